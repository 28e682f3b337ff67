#include "pipeline/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "pipeline/commands.h"

namespace shardq {
namespace {

volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_signal_count = 0;

void on_stop_signal(int signal) {
  const int count = g_signal_count + 1; // no ++ on a volatile (deprecated in C++20)
  g_signal_count = count;
  if (count > 1) _exit(kExitInterrupted);
  g_stop_signal = signal;
}

} // namespace

void install_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGTERM, SIGINT, SIGUSR1}) sigaction(signal, &action, nullptr);
}

bool stop_requested() { return g_stop_signal != 0; }
int stop_signal() { return g_stop_signal; }

void crash_point(const char* event) {
  static const char* spec = std::getenv("SHARDQ_CRASH_AT");
  if (!spec) return;
  static std::mutex mutex;
  static std::map<std::string, int> seen;
  const std::string text(spec);
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || text.substr(0, colon) != event) return;
  std::lock_guard lock(mutex);
  if (++seen[event] == std::atoi(text.c_str() + colon + 1)) kill(getpid(), SIGKILL);
}

void test_chunk_delay() {
  static const char* delay = std::getenv("SHARDQ_TEST_CHUNK_DELAY_MS");
  if (delay) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
}

} // namespace shardq
