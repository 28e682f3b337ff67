#include "pipeline/run_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include "pipeline/commands.h"
#include "pipeline/pipeline_error.h"
#include "pipeline/signals.h"

namespace shardq {
namespace fs = std::filesystem;
namespace {

// Rounds of "create, else judge and take over a stale lock": more than one only while
// other contenders take the same stale lock over, which takes them milliseconds.
constexpr int kTakeAttempts = 50;
constexpr auto kTakeOverWait = std::chrono::milliseconds(20);

// ---- paths ------------------------------------------------------------------------------

fs::path resolved(const fs::path& path) {
  const fs::path full = fs::weakly_canonical(fs::absolute(path));
  return full.has_filename() ? full : full.parent_path(); // "a/b/" -> "a/b"
}

bool same_folder(const fs::path& a, const fs::path& b) {
  std::error_code error; // equivalent() fails on a folder that does not exist (yet)
  return a == b || (fs::equivalent(a, b, error) && !error);
}

// `inner` is `outer` or lies below it; every ancestor is compared as a file, so a bind
// mount of `outer` counts too.
bool within(const fs::path& inner, const fs::path& outer) {
  for (fs::path path = inner;; path = path.parent_path()) {
    if (same_folder(path, outer)) return true;
    if (path == path.parent_path()) return false;
  }
}

// 'given' (resolved), the resolved path only where it says more.
std::string shown(const fs::path& given, const fs::path& resolved_path) {
  if (given == resolved_path) return fmt::format("'{}'", given.string());
  return fmt::format("'{}' ({})", given.string(), resolved_path.string());
}

// ---- this process and host --------------------------------------------------------------

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) throw PipelineError(fmt::format("gethostname: {}", std::strerror(errno)));
  return name;
}

std::string boot_id() {
  std::string id = read_text("/proc/sys/kernel/random/boot_id");
  while (!id.empty() && id.back() == '\n') id.pop_back();
  return id;
}

std::optional<uint64_t> process_start(int64_t pid) {
  const std::string line = read_text(fmt::format("/proc/{}/stat", pid));
  return line.empty() ? std::nullopt : parse_process_start(line);
}

std::string local_time_now() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[64];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S %z", &local);
  return text;
}

LockHolder this_process() {
  const int64_t pid = getpid();
  return {host_name(), pid, process_start(pid).value_or(0), boot_id(), local_time_now()};
}

LocalHost this_host() { return {host_name(), boot_id(), process_start}; }

// ---- the lock file ----------------------------------------------------------------------

struct SeenLock {
  std::string text;
  dev_t device = 0;
  ino_t inode = 0;
  time_t mtime = 0;

  bool same_file(const SeenLock& other) const {
    return device == other.device && inode == other.inode && text == other.text;
  }
};

// nullopt: there is no such file (any more).
std::optional<SeenLock> read_lock_file(const fs::path& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw PipelineError(fmt::format("cannot read lock file {}: {}", path.string(), std::strerror(errno)));
  }
  SeenLock seen;
  char buffer[4096];
  ssize_t got = 0;
  while ((got = read(fd, buffer, sizeof(buffer))) > 0) seen.text.append(buffer, size_t(got));
  struct stat info {};
  fstat(fd, &info);
  close(fd);
  seen.device = info.st_dev;
  seen.inode = info.st_ino;
  seen.mtime = info.st_mtim.tv_sec;
  return seen;
}

// The file system's clock (on NFS the server's): the mtime of a file made for the purpose.
time_t file_system_now(const fs::path& lock_file, const LockHolder& me) {
  const fs::path probe = fmt::format("{}.clock.{}.{}", lock_file.string(), me.host, me.pid);
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw PipelineError(fmt::format("cannot create {}: {}", probe.string(), std::strerror(errno)));
  struct stat info {};
  const bool ok = futimens(fd, nullptr) == 0 && fstat(fd, &info) == 0;
  close(fd);
  unlink(probe.c_str());
  if (!ok) throw PipelineError(fmt::format("cannot stamp {}: {}", probe.string(), std::strerror(errno)));
  return info.st_mtim.tv_sec;
}

// The created file's descriptor, or -1 when a lock file exists already.
int create_lock_file(const fs::path& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST) return -1;
    throw PipelineError(fmt::format("cannot create lock file {}: {}", path.string(), std::strerror(errno)));
  }
  if (write(fd, text.data(), text.size()) != ssize_t(text.size()) || fsync(fd) != 0) {
    const int error = errno;
    close(fd);
    unlink(path.c_str());
    throw PipelineError(fmt::format("cannot write lock file {}: {}", path.string(), std::strerror(error)));
  }
  return fd;
}

LockVerdict judge_file(const SeenLock& seen, time_t fs_now, const LocalHost& here) {
  return judge_lock(parse_lock(seen.text), std::chrono::seconds(std::max<time_t>(0, fs_now - seen.mtime)), here);
}

// The right to remove a stale lock: the first of its markers 0, 1, ... that we create
// while every earlier one is stale (its maker died mid-way). Returns how many markers
// there are, or 0 when another contender is at it (or has just finished).
int claim_take_over(const fs::path& path, const SeenLock& stale, const std::string& record, time_t fs_now,
                    const LocalHost& here) {
  for (int k = 0;; ++k) {
    const fs::path marker = take_over_marker(path, stale.inode, stale.text, k);
    const int fd = create_lock_file(marker, record);
    if (fd >= 0) {
      close(fd);
      return k + 1;
    }
    const auto seen = read_lock_file(marker);
    if (!seen || !judge_file(*seen, fs_now, here).stale) return 0;
  }
}

// Removes the stale lock if we win the right to. Only a marker's owner removes or replaces
// the lock file, so while we own one, a lock file that still is `stale` stays so.
bool take_over(const fs::path& path, const SeenLock& stale, const std::string& record, time_t fs_now,
               const LocalHost& here) {
  const int markers = claim_take_over(path, stale, record, fs_now, here);
  if (markers == 0) return false;
  const auto current = read_lock_file(path);
  const bool removed = current && current->same_file(stale) && unlink(path.c_str()) == 0;
  // Once `stale` is gone its markers guard nothing: a late contender's new one finds
  // another lock file and backs off.
  for (int k = 0; k < markers; ++k) unlink(take_over_marker(path, stale.inode, stale.text, k).c_str());
  return removed;
}

std::string describe(const std::optional<LockHolder>& holder) {
  if (!holder) return "holder unknown (the lock file is being written, or damaged)";
  return fmt::format("host {}, pid {}, since {}", holder->host, holder->pid, holder->since);
}

} // namespace

// ---- public -----------------------------------------------------------------------------

void check_dst_apart(const fs::path& input, std::string_view role, const fs::path& dst) {
  const fs::path source = resolved(input), output = resolved(dst);
  const char* relation = same_folder(output, source) ? "is the same folder as"
                         : within(output, source)    ? "lies inside"
                         : within(source, output)    ? "contains"
                                                     : nullptr;
  if (!relation) return;
  throw PipelineError(fmt::format("dst {} {} {} {}: the output must go to a folder apart from the {}", shown(dst, output),
                                  relation, role, shown(input, source), role == "src" ? "source" : role));
}

void check_dst_can_be_a_folder(const fs::path& dst) {
  for (fs::path part = dst; !part.empty(); part = part.parent_path()) {
    std::error_code error;
    const fs::file_status status = fs::status(part, error); // through symbolic links
    if (status.type() == fs::file_type::not_found) {
      if (fs::is_symlink(fs::symlink_status(part, error))) {
        const fs::path target = fs::read_symlink(part, error);
        throw PipelineError(fmt::format("dst {}: {} is a symbolic link to {}, which does not exist", dst.string(),
                                        part.string(), (part.parent_path() / target).lexically_normal().string()));
      }
      continue; // made by the run, if what holds it is a folder
    }
    if (error) {
      throw PipelineError(fmt::format("dst {}: {}{}", dst.string(), error.message(),
                                      part == dst ? "" : fmt::format(" (at {})", part.string())));
    }
    if (status.type() != fs::file_type::directory) {
      throw PipelineError(fmt::format("dst {}: {} exists and is not a folder", dst.string(), part.string()));
    }
    return;
  }
}

fs::path take_over_marker(const fs::path& lock_file, uint64_t inode, std::string_view lock_text, int k) {
  const std::string identity = fmt::format("{}:{}", inode, lock_text);
  return fmt::format("{}.takeover.{:016x}.{}", lock_file.string(), XXH3_64bits(identity.data(), identity.size()), k);
}

std::string format_lock(const LockHolder& holder) {
  // Every key, in this order, each line ended: a file cut short does not parse.
  return fmt::format("host={}\npid={}\npid_start={}\nboot_id={}\nsince={}\n", holder.host, holder.pid,
                     holder.pid_start, holder.boot_id, holder.since);
}

std::optional<LockHolder> parse_lock(std::string_view text) {
  if (text.empty() || text.back() != '\n') return std::nullopt;
  std::map<std::string, std::string, std::less<>> fields;
  std::istringstream lines{std::string(text)};
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) fields[line.substr(0, eq)] = line.substr(eq + 1);
  }
  for (const char* key : {"host", "pid", "pid_start", "boot_id", "since"}) {
    if (!fields.count(key)) return std::nullopt;
  }
  LockHolder holder{fields["host"], 0, 0, fields["boot_id"], fields["since"]};
  try {
    size_t used_pid = 0, used_start = 0;
    holder.pid = std::stoll(fields["pid"], &used_pid);
    holder.pid_start = std::stoull(fields["pid_start"], &used_start);
    if (used_pid != fields["pid"].size() || used_start != fields["pid_start"].size()) return std::nullopt;
  } catch (const std::logic_error&) { // stoll: not a number, or out of range
    return std::nullopt;
  }
  if (holder.host.empty() || holder.pid <= 0) return std::nullopt;
  return holder;
}

std::optional<uint64_t> parse_process_start(std::string_view stat_line) {
  // "pid (comm) state ppid ...": comm may hold spaces and ')', so count from the last ')'.
  const auto paren = stat_line.rfind(')');
  if (paren == std::string_view::npos) return std::nullopt;
  std::istringstream fields{std::string(stat_line.substr(paren + 1))};
  std::string field;
  fields >> field; // field 3: state
  if (field == "Z" || field == "X") return std::nullopt; // exited: holds nothing any more
  for (int index = 4; index <= 22 && fields >> field; ++index) {
    if (index == 22) {
      try {
        return std::stoull(field);
      } catch (const std::logic_error&) {
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

LockVerdict judge_lock(const std::optional<LockHolder>& holder, std::chrono::seconds heartbeat_age,
                       const LocalHost& here) {
  if (holder && holder->host == here.host) {
    if (holder->boot_id != here.boot_id) return {true, fmt::format("host {} has restarted since", here.host)};
    const auto start = here.process_start(holder->pid);
    if (!start) return {true, fmt::format("pid {} is not running", holder->pid)};
    if (holder->pid_start != 0 && *start != holder->pid_start) {
      return {true, fmt::format("pid {} now belongs to a process started later", holder->pid)};
    }
    return {false, fmt::format("pid {} is running on this host", holder->pid)};
  }
  if (heartbeat_age >= kStaleAfter) {
    return {true, fmt::format("no heartbeat for {} s (stale after {} s)", heartbeat_age.count(), kStaleAfter.count())};
  }
  return {false, fmt::format("last heartbeat {} s ago; stale after {} s without one, in {} s", heartbeat_age.count(),
                             kStaleAfter.count(), (kStaleAfter - heartbeat_age).count())};
}

namespace {

// Creates the lock file `path` guarding `guarded`, taking over a stale one.
HeldLock take_lock_file(const fs::path& path, const fs::path& guarded) {
  const LockHolder me = this_process();
  const std::string record = format_lock(me);
  for (int attempt = 0; attempt < kTakeAttempts; ++attempt) {
    const int fd = create_lock_file(path, record);
    if (fd >= 0) {
      struct stat info {};
      fstat(fd, &info);
      return {path, fd, info.st_dev, info.st_ino};
    }
    const auto seen = read_lock_file(path);
    if (!seen) continue; // released meanwhile
    const LocalHost here = this_host();
    const time_t fs_now = file_system_now(path, me);
    const auto holder = parse_lock(seen->text);
    const LockVerdict verdict = judge_file(*seen, fs_now, here);
    if (!verdict.stale) {
      throw PipelineError(fmt::format("{} is in use by another shardq run: {}; {}; lock {}", guarded.string(),
                                      describe(holder), verdict.reason, path.string()));
    }
    if (take_over(path, *seen, record, fs_now, here)) {
      spdlog::warn("{}: taking over a stale lock: {}; {}", path.string(), describe(holder), verdict.reason);
    } else {
      std::this_thread::sleep_for(kTakeOverWait); // another contender is taking it over
    }
  }
  throw PipelineError(fmt::format("{}: could not take the lock in {} attempts: other runs keep taking it over",
                                  path.string(), kTakeAttempts));
}

// Another run judged this one dead (no heartbeat for a minute: a stopped or paused
// process, a hung NFS server) and took the lock: both would write the same shards and
// checkpoint. This run ends as if it had died, at once and without another write or save
// (the checkpoint is made for a kill at any instant); mpirun then ends the other ranks.
[[noreturn]] void stop_taken_over(const fs::path& lock) {
  spdlog::error("{}: the lock was taken over by another run, which judged this one dead: stopping at once, without "
                "writing more", lock.string());
  spdlog::shutdown();
  std::_Exit(kExitError);
}

// Only our own file: one that replaced it (a run that wrongly judged ours stale) stays.
void release_lock_file(const HeldLock& lock) {
  close(lock.fd); // before the unlink: NFS would keep an open, removed file as .nfsXXXX
  struct stat now {};
  if (stat(lock.path.c_str(), &now) == 0 && now.st_dev == lock.device && now.st_ino == lock.inode) {
    unlink(lock.path.c_str());
  }
}

} // namespace

RunActivity run_activity(const fs::path& lock_file) {
  const auto seen = read_lock_file(lock_file);
  if (!seen) return {false, "not running (no run holds " + lock_file.string() + ")"};
  const auto holder = parse_lock(seen->text);
  const LocalHost here = this_host();
  const LockVerdict verdict = judge_file(*seen, time(nullptr), here);
  if (verdict.stale) {
    // Another host's run is judged by its heartbeat's age on this machine's clock, which
    // on NFS may run ahead of the file system's: the next run judges by the latter.
    const bool held_here = holder && holder->host == here.host;
    return {false, fmt::format("not running: the run that holds {} {} ({}; {}); the next run takes it over",
                               lock_file.string(), held_here ? "is gone" : "looks gone by this machine's clock",
                               describe(holder), verdict.reason)};
  }
  return {true, fmt::format("running: {}; {}", describe(holder), verdict.reason)};
}

RunLock::RunLock(const fs::path& dst, const fs::path& checkpoint) {
  const fs::path own_folder = dst / ".shardq";
  fs::create_directories(own_folder);
  held_.push_back(take_lock_file(own_folder / "run.lock", dst));
  // The checkpoint's own lock too, wherever it lies: a run on another dst given this
  // checkpoint through --checkpoint takes the same file (with --fresh it would delete
  // the checkpoint of the run under way).
  try {
    fs::create_directories(resolved(checkpoint).parent_path());
    held_.push_back(take_lock_file(checkpoint.string() + ".lock", checkpoint));
  } catch (...) {
    release_lock_file(held_.front());
    throw;
  }
  for (const HeldLock& lock : held_) remove_on_fast_exit(lock.path, lock.device, lock.inode);
  heartbeat_ = std::jthread([this](std::stop_token stop) { heartbeat(stop); });
}

RunLock::~RunLock() {
  heartbeat_.request_stop();
  if (heartbeat_.joinable()) heartbeat_.join();
  forget_fast_exit_files();
  for (const HeldLock& lock : held_) release_lock_file(lock);
}

void RunLock::heartbeat(std::stop_token stop) const {
  std::mutex mutex;
  std::condition_variable_any wake;
  std::unique_lock lock(mutex);
  bool warned = false;
  while (!wake.wait_for(lock, stop, kHeartbeatInterval, [] { return false; }) && !stop.stop_requested()) {
    for (const HeldLock& held : held_) {
      struct stat now {};
      const bool ours = stat(held.path.c_str(), &now) == 0 && now.st_dev == held.device && now.st_ino == held.inode;
      if (ours && futimens(held.fd, nullptr) == 0) continue;
      if (!ours) stop_taken_over(held.path);
      if (!std::exchange(warned, true)) {
        spdlog::error("{}: cannot refresh the heartbeat: {}", held.path.string(), std::strerror(errno));
      }
    }
  }
}

} // namespace shardq
