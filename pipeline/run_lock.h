// One run per output folder. Two `shardq run` on the same dst (a Slurm job submitted
// twice, a second terminal, another host) would both write its shards and checkpoint;
// the second is refused before any work, with one line naming the holder.
//
// Where: <dst>/.shardq/run.lock, whatever --checkpoint says, since two runs with the same
// dst but different checkpoints write the same shards; and with --checkpoint elsewhere
// also <checkpoint>.lock, since two runs with different dsts would write one checkpoint
// (its fingerprint does not name the dst). Both are taken, or neither.
//
// How (NFS included, so no flock): rank 0 alone creates the file with O_CREAT|O_EXCL
// (atomic on local file systems and NFSv3+) and writes who holds it: host, pid, the
// pid's start time (/proc/<pid>/stat, so a reused pid is told apart), boot id, and since
// when. While the run lasts a thread refreshes the file's mtime every kHeartbeatInterval.
// The files are removed when RunLock is destroyed (end of run, exit 75, errors) and when
// a second stop signal ends the process at once (signals.h); a SIGKILLed holder leaves them.
//
// A lock left behind is stale, and taken over with a warning, when its holder is gone:
//   - same host, same boot: its pid is not running, or runs a process started later;
//   - same host, another boot id: the host restarted since;
//   - another host (or a file that does not parse): no heartbeat for kStaleAfter. Ages
//     are measured on the file system's clock (the mtime of a file we create next to the
//     lock), so clock skew between hosts does not count.
// Take-over is race-free between any number of contenders: removing a stale lock file
// takes a marker named after that file (its inode and contents), created with O_EXCL, so
// one contender alone removes it, after checking it still is the file judged stale; then
// the lock is created with O_EXCL again, which one contender wins. A marker whose maker
// died mid-way is judged like a lock, and the next marker name (.1, .2, ...) is used.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace shardq {

inline constexpr auto kHeartbeatInterval = std::chrono::seconds(5);
// 12 heartbeats: a holder on another host must miss a minute of them (a hung NFS server,
// a stopped process) before its lock is taken; a requeued Slurm job that lands elsewhere
// right after a SIGKILL is refused for at most this long, and told how long to wait.
inline constexpr auto kStaleAfter = std::chrono::seconds(60);

// Refuses a dst that is an input folder (the source, "src", or the reference a recipe reads,
// "reference"), or lies inside it, or contains it (symlinks and bind mounts resolved): the
// run would read what it writes, and --fresh would overwrite the input. Throws
// PipelineError naming both paths.
void check_dst_apart(const std::filesystem::path& input, std::string_view role, const std::filesystem::path& dst);

// Refuses a dst that cannot be made a folder, before anything is written: a file, a
// symbolic link to nothing, a path through a file, a symlink loop. Throws PipelineError
// naming dst and the part in the way. Run before anything resolves dst (the plan's
// fingerprint does), which would fail with the bare filesystem error.
void check_dst_can_be_a_folder(const std::filesystem::path& dst);

// What the lock file says.
struct LockHolder {
  std::string host;
  int64_t pid = 0;
  uint64_t pid_start = 0; // clock ticks after boot: /proc/<pid>/stat field 22
  std::string boot_id;    // /proc/sys/kernel/random/boot_id
  std::string since;      // local time the lock was taken, for messages
};
std::string format_lock(const LockHolder& holder);
// nullopt: not a complete lock file (being written, or damaged).
std::optional<LockHolder> parse_lock(std::string_view text);
// The k-th take-over marker of a lock file, next to it: the same name for every contender
// that read it (the inode number, unlike st_dev, is the same on every NFS client, and the
// contents tell a reused inode apart).
std::filesystem::path take_over_marker(const std::filesystem::path& lock_file, uint64_t inode,
                                       std::string_view lock_text, int k);
// Field 22 (starttime) of a /proc/<pid>/stat line; nullopt if it does not parse.
std::optional<uint64_t> parse_process_start(std::string_view stat_line);

// The contender's side of the judgement.
struct LocalHost {
  std::string host, boot_id;
  // Start time of a running process on this host; nullopt when there is none.
  std::function<std::optional<uint64_t>(int64_t pid)> process_start;
};

struct LockVerdict {
  bool stale = false;
  std::string reason; // stale: why; live: how long until it would be stale, if ever
};
// `holder` nullopt: the file did not parse. `heartbeat_age`: time since its last mtime.
LockVerdict judge_lock(const std::optional<LockHolder>& holder, std::chrono::seconds heartbeat_age,
                       const LocalHost& here);

// One lock file we created.
struct HeldLock {
  std::filesystem::path path;
  int fd = -1; // its mtime is the heartbeat
  dev_t device = 0;
  ino_t inode = 0;
};

// Whether a run holds the lock file `lock_file` (a checkpoint's <checkpoint>.lock), for
// `status`: a line naming the holder and its last heartbeat, or saying none runs. Reads
// only; a holder on another host is judged by this machine's clock.
struct RunActivity {
  bool running = false;
  std::string line;
};
RunActivity run_activity(const std::filesystem::path& lock_file);

class RunLock {
 public:
  // Takes the lock of `dst` (creating <dst>/.shardq) and the checkpoint's (<checkpoint>.lock,
  // wherever it lies); or throws PipelineError naming the holder's host, pid and since
  // when, the lock path, and when it would be stale. A lock taken over by another run
  // ends this process at once (exit 1, nothing more written).
  RunLock(const std::filesystem::path& dst, const std::filesystem::path& checkpoint);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  void heartbeat(std::stop_token stop) const;

  std::vector<HeldLock> held_;
  std::jthread heartbeat_;
};

} // namespace shardq
