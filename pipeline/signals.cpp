#include "pipeline/signals.h"

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <ctime>
#include <string>

#include "pipeline/commands.h"

namespace shardq {
namespace {

volatile sig_atomic_t g_stop_signal = 0;
// When the first stop arrived (CLOCK_MONOTONIC, ns). Signals within kSameStopNs of it are the
// same stop delivered twice: GNU `timeout` signals its child and then its whole process
// group, the child included, and a launcher may pass on a signal the ranks also got.
std::atomic<int64_t> g_first_stop_ns{0};
static_assert(std::atomic<int64_t>::is_always_lock_free);
constexpr int64_t kSameStopNs = 1'000'000'000;

// Read by the signal handler on any thread: fixed buffers, counted only once filled.
struct FastExitFile {
  char path[4096];
  dev_t device;
  ino_t inode;
};
FastExitFile g_fast_exit_files[kFastExitFiles];
std::atomic<int> g_fast_exit_count{0};
static_assert(std::atomic<int>::is_always_lock_free);

void remove_fast_exit_files() { // async-signal-safe: stat and unlink only
  const int count = g_fast_exit_count;
  for (int i = 0; i < count; ++i) {
    const FastExitFile& file = g_fast_exit_files[i];
    struct stat now {};
    if (stat(file.path, &now) == 0 && now.st_dev == file.device && now.st_ino == file.inode) unlink(file.path);
  }
}

int64_t monotonic_ns() { // async-signal-safe: clock_gettime
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

void on_stop_signal(int signal) {
  const int saved_errno = errno; // the interrupted code may be about to read it
  const int64_t now = monotonic_ns();
  // Two signals may be handled at once on two threads: the first to set the time is the
  // first stop, and the other reads that time, never a zero.
  int64_t first = 0;
  if (g_first_stop_ns.compare_exchange_strong(first, now)) {
    g_stop_signal = signal;
    errno = saved_errno;
    return;
  }
  if (now - first < kSameStopNs) {
    errno = saved_errno;
    return;
  }
  static constexpr char kLine[] =
      "shardq: a second stop signal: exiting at once, without the final checkpoint save; "
      "run the same command to resume from the last save\n";
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, kLine, sizeof(kLine) - 1);
  remove_fast_exit_files();
  _exit(kExitInterrupted);
}

} // namespace

void install_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  // Restart interrupted reads and writes: a stop during MPI_Init or HDF5 I/O is acted on
  // by the run loop, not seen as EINTR by a library that does not retry.
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGTERM, SIGINT, SIGUSR1}) sigaction(signal, &action, nullptr);
}

namespace {

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int signal : {SIGTERM, SIGINT, SIGUSR1}) sigaddset(&set, signal);
  return set;
}

} // namespace

void hold_stop_signals() {
  const sigset_t held = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &held, nullptr);
}

StopSignalsHeld::StopSignalsHeld() { hold_stop_signals(); }

StopSignalsHeld::~StopSignalsHeld() {
  install_stop_signals();
  const sigset_t held = stop_signal_set();
  pthread_sigmask(SIG_UNBLOCK, &held, nullptr); // a pending stop is delivered here
}

bool stop_requested() { return g_stop_signal != 0; }
int stop_signal() { return g_stop_signal; }

void remove_on_fast_exit(const std::filesystem::path& path, dev_t device, ino_t inode) {
  const int index = g_fast_exit_count;
  const std::string& text = path.native();
  if (index >= kFastExitFiles || text.size() >= sizeof(FastExitFile::path)) return; // left to go stale
  FastExitFile& file = g_fast_exit_files[index];
  text.copy(file.path, text.size());
  file.path[text.size()] = '\0';
  file.device = device;
  file.inode = inode;
  g_fast_exit_count = index + 1;
}

void forget_fast_exit_files() { g_fast_exit_count = 0; }

} // namespace shardq
