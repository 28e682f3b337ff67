// The run lock (pipeline/run_lock.h): the lock file's format, the stale/live judgement,
// the src/dst overlap check, and RunLock itself on a local folder: refusal while held,
// release, take-over of stale locks, and one winner among racing processes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/pipeline_error.h"
#include "pipeline/run_lock.h"
#include "host_test_util.h"

using namespace shardq;
using shardq::test::this_boot_id;
using shardq::test::this_host_name;
namespace fs = std::filesystem;
using std::chrono::seconds;

namespace {

LockHolder sample_holder() { return {"node07", 4242, 987654, "0f1e-boot", "2026-01-31 12:00:03 +0000"}; }

LocalHost host_where(std::optional<uint64_t> start_of_4242) {
  return {"node07", "0f1e-boot", [=](int64_t pid) { return pid == 4242 ? start_of_4242 : std::nullopt; }};
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

// A pid that surely names no process: a child that has exited and been reaped.
int64_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

uint64_t inode_of(const fs::path& path) {
  struct stat info {};
  stat(path.c_str(), &info);
  return info.st_ino;
}


class RunLockFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dst_ = fs::temp_directory_path() / ("shardq_run_lock_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dst_);
    fs::create_directories(dst_ / ".shardq");
  }
  void TearDown() override { fs::remove_all(dst_); }

  fs::path lock_path() const { return dst_ / ".shardq" / "run.lock"; }
  fs::path checkpoint() const { return dst_ / ".shardq" / "checkpoint.h5"; }
  void write_lock(const std::string& host, int64_t pid, seconds age = seconds(0)) const {
    write_file(lock_path(), format_lock({host, pid, 0, this_boot_id(), "2026-01-31 12:00:03 +0000"}));
    const auto when = fs::last_write_time(lock_path()) - age;
    fs::last_write_time(lock_path(), when);
  }
  std::vector<std::string> leftovers() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dst_ / ".shardq")) names.push_back(entry.path().filename());
    return names;
  }

  fs::path dst_;
};

} // namespace

TEST(RunLockFormat, RoundTrips) {
  const auto parsed = parse_lock(format_lock(sample_holder()));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->host, "node07");
  EXPECT_EQ(parsed->pid, 4242);
  EXPECT_EQ(parsed->pid_start, 987654u);
  EXPECT_EQ(parsed->boot_id, "0f1e-boot");
  EXPECT_EQ(parsed->since, "2026-01-31 12:00:03 +0000");
}

TEST(RunLockFormat, FileCutShortDoesNotParse) {
  const std::string text = format_lock(sample_holder());
  for (size_t length = 0; length < text.size(); ++length) {
    EXPECT_FALSE(parse_lock(text.substr(0, length))) << "cut at " << length << ": " << text.substr(0, length);
  }
}

TEST(RunLockFormat, BadNumbersDoNotParse) {
  EXPECT_FALSE(parse_lock("host=a\npid=12x\npid_start=1\nboot_id=b\nsince=s\n"));
  EXPECT_FALSE(parse_lock("host=a\npid=-3\npid_start=1\nboot_id=b\nsince=s\n"));
  EXPECT_FALSE(parse_lock("host=\npid=3\npid_start=1\nboot_id=b\nsince=s\n"));
  EXPECT_TRUE(parse_lock("host=a\npid=3\npid_start=1\nboot_id=b\nsince=s\n"));
}

TEST(ProcessStart, ReadsField22AfterTheCommand) {
  // The command may hold spaces and ')': fields are counted from the last ')'.
  const std::string line = "77 (a) b (c)) S 1 77 77 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 123456 1000 10 0";
  EXPECT_EQ(parse_process_start(line), 123456u);
  EXPECT_FALSE(parse_process_start("77 (x) Z 1 77 77 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 123456 1000 10 0"));
  EXPECT_FALSE(parse_process_start("77 (x) S 1 2"));
  EXPECT_FALSE(parse_process_start("garbage"));
}

TEST(ProcessStart, OfThisProcessIsStable) {
  const auto first = parse_process_start(read_file("/proc/self/stat"));
  ASSERT_TRUE(first);
  EXPECT_EQ(parse_process_start(read_file("/proc/self/stat")), first);
}

TEST(JudgeLock, SameHostLiveHolderIsLive) {
  const auto verdict = judge_lock(sample_holder(), seconds(3600), host_where(987654));
  EXPECT_FALSE(verdict.stale) << verdict.reason; // a live pid wins over any heartbeat age
  EXPECT_NE(verdict.reason.find("pid 4242 is running"), std::string::npos) << verdict.reason;
}

TEST(JudgeLock, SameHostDeadPidIsStale) {
  const auto verdict = judge_lock(sample_holder(), seconds(0), host_where(std::nullopt));
  EXPECT_TRUE(verdict.stale);
  EXPECT_NE(verdict.reason.find("not running"), std::string::npos) << verdict.reason;
}

TEST(JudgeLock, SameHostReusedPidIsStale) {
  const auto verdict = judge_lock(sample_holder(), seconds(0), host_where(999999));
  EXPECT_TRUE(verdict.stale);
  EXPECT_NE(verdict.reason.find("started later"), std::string::npos) << verdict.reason;
}

TEST(JudgeLock, SameHostAfterRestartIsStale) {
  LocalHost here = host_where(987654);
  here.boot_id = "another-boot";
  EXPECT_TRUE(judge_lock(sample_holder(), seconds(0), here).stale);
}

TEST(JudgeLock, OtherHostGoesStaleAfterTheBound) {
  LocalHost here = host_where(987654);
  here.host = "node08";
  const auto fresh = judge_lock(sample_holder(), seconds(20), here);
  EXPECT_FALSE(fresh.stale);
  EXPECT_NE(fresh.reason.find(fmt::format("in {} s", (kStaleAfter - seconds(20)).count())), std::string::npos)
      << fresh.reason;
  EXPECT_FALSE(judge_lock(sample_holder(), kStaleAfter - seconds(1), here).stale);
  EXPECT_TRUE(judge_lock(sample_holder(), kStaleAfter, here).stale);
}

TEST(JudgeLock, UnreadableLockGoesStaleAfterTheBound) {
  EXPECT_FALSE(judge_lock(std::nullopt, seconds(0), host_where(987654)).stale);
  EXPECT_TRUE(judge_lock(std::nullopt, kStaleAfter + seconds(1), host_where(987654)).stale);
}

TEST_F(RunLockFolder, DstApartFromSrcAndReference) {
  fs::create_directories(dst_ / "src" / "inner");
  fs::create_symlink(dst_ / "src", dst_ / "link");
  const fs::path src = dst_ / "src";
  EXPECT_NO_THROW(check_dst_apart(src, "src", dst_ / "out"));
  EXPECT_NO_THROW(check_dst_apart(src, "src", dst_ / "src-out")); // a prefix of the name only
  for (const fs::path& dst : {src, fs::path(src.string() + "/"), dst_ / "link", dst_ / "src" / "inner" / "..",
                              dst_ / "src" / "inner", dst_ / "link" / "new", dst_}) {
    try {
      check_dst_apart(src, "src", dst);
      ADD_FAILURE() << dst << " was accepted";
    } catch (const PipelineError& e) {
      EXPECT_NE(std::string(e.what()).find(dst.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(src.string()), std::string::npos) << e.what();
    }
  }
  try {
    check_dst_apart(src, "reference", dst_ / "src" / "inner");
    ADD_FAILURE() << "a dst inside the reference was accepted";
  } catch (const PipelineError& e) {
    EXPECT_NE(std::string(e.what()).find(" lies inside reference "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("apart from the reference"), std::string::npos) << e.what();
  }
}

TEST_F(RunLockFolder, HeldLockRefusesASecondOneAndIsRemovedAfter) {
  {
    RunLock first(dst_, checkpoint());
    ASSERT_TRUE(fs::exists(lock_path()));
    const auto holder = parse_lock(read_file(lock_path()));
    ASSERT_TRUE(holder);
    EXPECT_EQ(holder->pid, getpid());
    try {
      RunLock second(dst_, checkpoint());
      ADD_FAILURE() << "a second lock was taken";
    } catch (const PipelineError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(fmt::format("pid {}", getpid())), std::string::npos) << message;
      EXPECT_NE(message.find(this_host_name()), std::string::npos) << message;
      EXPECT_NE(message.find(holder->since), std::string::npos) << message;
      EXPECT_NE(message.find(lock_path().string()), std::string::npos) << message;
    }
  }
  EXPECT_FALSE(fs::exists(lock_path()));
  EXPECT_EQ(leftovers(), std::vector<std::string>{});
}

TEST_F(RunLockFolder, HeartbeatRefreshesTheMtime) {
  RunLock lock(dst_, checkpoint());
  const auto taken = fs::last_write_time(lock_path());
  fs::last_write_time(lock_path(), taken - std::chrono::seconds(600));
  std::this_thread::sleep_for(kHeartbeatInterval + std::chrono::seconds(1));
  EXPECT_GE(fs::last_write_time(lock_path()), taken);
}

TEST_F(RunLockFolder, CheckpointElsewhereIsLockedToo) {
  const fs::path other = dst_ / "other", shared = dst_ / "scratch" / "checkpoint.h5";
  {
    RunLock lock(dst_ / "out", shared);
    EXPECT_TRUE(fs::exists(dst_ / "out" / ".shardq" / "run.lock"));
    EXPECT_TRUE(fs::exists(shared.string() + ".lock"));
    try {
      RunLock second(other, shared); // another dst, the same checkpoint
      ADD_FAILURE() << "a second run took the same checkpoint";
    } catch (const PipelineError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(shared.string() + " is in use by another shardq run", 0), 0u) << e.what();
    }
    EXPECT_FALSE(fs::exists(other / ".shardq" / "run.lock")) << "the refused run kept its dst lock";
    EXPECT_THROW((RunLock{dst_ / "out", dst_ / "elsewhere.h5"}), PipelineError); // the same dst
  }
  EXPECT_TRUE(fs::is_empty(dst_ / "scratch"));
  EXPECT_TRUE(fs::is_empty(dst_ / "out" / ".shardq"));
}

// A run on another dst given the first run's own checkpoint (<dst>/.shardq/checkpoint.h5)
// through --checkpoint is refused for that checkpoint's lock: with --fresh it would have
// deleted the checkpoint of the run under way.
TEST_F(RunLockFolder, CheckpointInItsOwnFolderIsLockedToo) {
  RunLock lock(dst_, checkpoint());
  EXPECT_TRUE(fs::exists(checkpoint().string() + ".lock"));
  try {
    RunLock second(dst_ / "other", checkpoint());
    ADD_FAILURE() << "a second run took the first run's checkpoint";
  } catch (const PipelineError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(checkpoint().string() + " is in use by another shardq run", 0), 0u) << e.what();
  }
  EXPECT_FALSE(fs::exists(dst_ / "other" / ".shardq" / "run.lock")) << "the refused run kept its dst lock";
}

// Another run took the lock over (this one judged dead): the process ends at once, exit 1,
// and leaves the other run's lock file in place. In a child of its own (fork, not a death
// test: those hang under qemu-user, where the aarch64 suite runs).
TEST_F(RunLockFolder, ALockTakenOverEndsTheProcess) {
#if SHARDQ_TEST_EMULATED
  // As in RacingTakeOversHaveOneWinner: the forked child starts the heartbeat thread, which
  // qemu-user aborts once the test process has had threads (it passed alone, failed in the suite).
  GTEST_SKIP() << "a forked child cannot start threads under qemu-user";
#endif
  const pid_t child = fork();
  if (child == 0) {
    RunLock lock(dst_, checkpoint());
    fs::remove(lock_path());
    write_file(lock_path(), format_lock({"other-host", 4242, 1, "other-boot", "now"}));
    std::this_thread::sleep_for(3 * kHeartbeatInterval);
    _exit(0); // still running: the take-over went unnoticed
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_EQ(parse_lock(read_file(lock_path()))->host, "other-host");
}

TEST_F(RunLockFolder, TakesOverADeadPidOnThisHost) {
  write_lock(this_host_name(), dead_pid());
  { RunLock lock(dst_, checkpoint()); EXPECT_EQ(parse_lock(read_file(lock_path()))->pid, getpid()); }
  EXPECT_EQ(leftovers(), std::vector<std::string>{});
}

TEST_F(RunLockFolder, TakesOverAReusedPidOnThisHost) {
  // Our own pid, recorded with another start time: a process that has gone, whose pid is ours now.
  write_file(lock_path(), format_lock({this_host_name(), getpid(), 1, this_boot_id(), "then"}));
  RunLock lock(dst_, checkpoint());
  EXPECT_EQ(parse_lock(read_file(lock_path()))->pid_start,
            parse_process_start(read_file("/proc/self/stat")).value());
}

TEST_F(RunLockFolder, OtherHostIsLiveUntilItsHeartbeatIsOld) {
  write_lock("elsewhere.example", 12345, seconds(10));
  try {
    RunLock lock(dst_, checkpoint());
    ADD_FAILURE() << "a live lock of another host was taken";
  } catch (const PipelineError& e) {
    EXPECT_NE(std::string(e.what()).find("host elsewhere.example, pid 12345"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("stale after"), std::string::npos) << e.what();
  }
  write_lock("elsewhere.example", 12345, kStaleAfter + seconds(5));
  RunLock lock(dst_, checkpoint());
  EXPECT_EQ(parse_lock(read_file(lock_path()))->pid, getpid());
}

TEST_F(RunLockFolder, UnreadableLockIsLiveUntilOld) {
  write_file(lock_path(), "host=half-writ");
  EXPECT_THROW((RunLock{dst_, checkpoint()}), PipelineError);
  fs::last_write_time(lock_path(), fs::last_write_time(lock_path()) - kStaleAfter - seconds(5));
  RunLock lock(dst_, checkpoint());
  EXPECT_TRUE(parse_lock(read_file(lock_path())));
}

TEST_F(RunLockFolder, MarkerOfADeadContenderDoesNotBlockTheTakeOver) {
  write_lock(this_host_name(), dead_pid());
  write_file(take_over_marker(lock_path(), inode_of(lock_path()), read_file(lock_path()), 0),
             format_lock({this_host_name(), dead_pid(), 0, this_boot_id(), "x"}));
  { RunLock lock(dst_, checkpoint()); }
  EXPECT_EQ(leftovers(), std::vector<std::string>{});
}

TEST_F(RunLockFolder, LiveContenderMarkerMakesOthersWaitNotTakeOver) {
  write_lock(this_host_name(), dead_pid());
  const fs::path marker = take_over_marker(lock_path(), inode_of(lock_path()), read_file(lock_path()), 0);
  write_file(marker, format_lock({this_host_name(), getpid(), 0, this_boot_id(), "x"})); // start time 0: not checked
  try {
    RunLock lock(dst_, checkpoint());
    ADD_FAILURE() << "took the lock while another contender was taking it over";
  } catch (const PipelineError& e) {
    EXPECT_NE(std::string(e.what()).find("could not take the lock"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(lock_path()));
  EXPECT_TRUE(fs::exists(marker));
}

TEST_F(RunLockFolder, RacingTakeOversHaveOneWinner) {
  // Processes (each its own pid, as contenders on one host are) start at one instant on a
  // stale lock; the winner holds it until every other one has answered.
#if SHARDQ_TEST_EMULATED
  // qemu-user (7.2) aborts a child forked from a multithreaded process when the child
  // starts a thread, as each contender's lock does (its heartbeat); shardq itself never forks.
  GTEST_SKIP() << "forked contenders cannot start threads under qemu-user";
#endif
  constexpr int kContenders = 6, kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    write_lock(this_host_name(), dead_pid());
    int go[2], answers[2], release[2];
    ASSERT_EQ(pipe(go), 0);
    ASSERT_EQ(pipe(answers), 0);
    ASSERT_EQ(pipe(release), 0);
    std::vector<pid_t> children;
    for (int c = 0; c < kContenders; ++c) {
      const pid_t child = fork();
      if (child == 0) {
        close(go[1]);
        close(release[1]);
        char byte = 0;
        if (read(go[0], &byte, 1) != 0) _exit(3); // the parent closes it: everyone starts
        try {
          RunLock lock(dst_, checkpoint());
          byte = 'W';
          if (write(answers[1], &byte, 1) != 1) _exit(3);
          if (read(release[0], &byte, 1) != 0) _exit(3);
        } catch (const PipelineError&) {
          byte = 'R';
          if (write(answers[1], &byte, 1) != 1) _exit(3);
        }
        _exit(0);
      }
      children.push_back(child);
    }
    close(go[0]);
    close(release[0]);
    close(answers[1]);
    close(go[1]);
    std::string got;
    char byte = 0;
    while (got.size() < size_t(kContenders) && read(answers[0], &byte, 1) == 1) got += byte;
    close(release[1]);
    close(answers[0]);
    for (pid_t child : children) {
      int status = 0;
      waitpid(child, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    EXPECT_EQ(std::count(got.begin(), got.end(), 'W'), 1) << "round " << round << ": " << got;
    EXPECT_EQ(std::count(got.begin(), got.end(), 'R'), kContenders - 1) << "round " << round << ": " << got;
    EXPECT_EQ(leftovers(), std::vector<std::string>{}) << "round " << round;
  }
}
