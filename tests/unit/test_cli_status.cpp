// `shardq status CHECKPOINT` run as a program (SHARDQ_BIN): progress on a saved
// checkpoint, one-line errors on a bad one, and reads while another process holds a
// lock on the file or replaces it.
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "pipeline/checkpoint.h"
#include "pipeline/run_lock.h"
#include "host_test_util.h"

using namespace shardq;
using shardq::test::this_boot_id;
using shardq::test::this_host_name;
namespace fs = std::filesystem;

namespace {

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class CliStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("SHARDQ_BIN");
    if (!bin || !*bin) GTEST_SKIP() << "SHARDQ_BIN is not set";
    bin_ = bin;
    dir_ = fs::temp_directory_path() / ("shardq_status_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = dir_ / "checkpoint.h5";
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Outcome status(const fs::path& checkpoint, const std::string& tag = "") const {
    const fs::path out = dir_ / ("out" + tag), err = dir_ / ("err" + tag);
    const std::string command =
        "'" + bin_ + "' status '" + checkpoint.string() + "' > '" + out.string() + "' 2> '" + err.string() + "'";
    const int raw = std::system(command.c_str());
    return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(out), slurp(err)};
  }

  std::string bin_;
  fs::path dir_, path_;
};

// 10 chunks of 100 rows (the last has 50): chunks 0..2 done in 2 s each.
CheckpointState three_of_ten_done(uint64_t generation = 7) {
  CheckpointState s;
  s.fingerprint = {{"job", "engram-nvfp4"}, {"source_headers", "9f3a1c2b4d5e6f7081"}};
  TaskRecord t;
  t.name = "layers.1.engram.embed";
  t.rows = 950;
  t.rows_per_chunk = 100;
  t.reductions.assign(10, ReduceRecord{1, 2.5f});
  t.chunks.resize(10);
  for (int i = 0; i < 3; ++i) {
    t.chunks[i].state = kChunkDone;
    t.chunks[i].seconds = 2.0;
  }
  s.tasks.push_back(t);
  s.finished = {"config"};
  s.elapsed_seconds = 10.0;
  s.generation = generation;
  s.updated_unix = 1750000000;
  return s;
}

} // namespace

TEST_F(CliStatusTest, PrintsProgressOfASavedCheckpoint) {
  save_checkpoint(path_, three_of_ten_done());
  const Outcome o = status(path_);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("generation 7"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("job=engram-nvfp4"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("reduce 10/10 chunks"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("stored factors: none"), std::string::npos) << o.out;
  // 3 of 10 chunks; 300 of 950 rows; 300 rows / 6 chunk-seconds = 50; 300 / 10 s = 30 wall.
  EXPECT_NE(o.out.find("3/10 chunks  30.0%  300/950 rows"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("rows/s: 50 per chunk-second"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(", 30 wall"), std::string::npos) << o.out;
  // 650 rows left at 30 rows/s = 21.67 s; no run holds the checkpoint's lock.
  EXPECT_NE(o.out.find("run: not running (no run holds " + path_.string() + ".lock)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("eta: not running; once resumed, 0h00m21s"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("finished: config"), std::string::npos) << o.out;
}

// While a run holds the checkpoint's lock, status names it and gives a plain ETA; a lock
// its holder left behind (a killed run) is called gone.
TEST_F(CliStatusTest, SaysWhetherARunHoldsTheCheckpoint) {
  save_checkpoint(path_, three_of_ten_done());
#if !SHARDQ_TEST_EMULATED
  // Not under qemu-user: it makes up this process's own /proc/self/stat, whose start time
  // the lock records, and status reads the real /proc/<pid>/stat, so the two differ.
  {
    const RunLock lock(dir_ / "dst", path_);
    const Outcome o = status(path_);
    EXPECT_EQ(o.exit_code, 0) << o.err;
    EXPECT_NE(o.out.find(fmt::format("run: running: host {}, pid {}, since ", this_host_name(), ::getpid())),
              std::string::npos) << o.out;
    EXPECT_NE(o.out.find("eta: 0h00m21s"), std::string::npos) << o.out;
  }
#endif
  // A dead holder on this host: a pid that cannot be running (above pid_max).
  std::ofstream(path_.string() + ".lock") << format_lock({this_host_name(), 99999999, 1, this_boot_id(), "then"});
  const Outcome gone = status(path_);
  EXPECT_NE(gone.out.find("run: not running: the run that holds " + path_.string() + ".lock is gone (host "),
            std::string::npos) << gone.out;
  EXPECT_NE(gone.out.find("pid 99999999 is not running"), std::string::npos) << gone.out;
  EXPECT_NE(gone.out.find("eta: not running; once resumed"), std::string::npos) << gone.out;

  // A lock that cannot be read (a symlink loop) leaves the progress report whole.
  fs::remove(path_.string() + ".lock");
  fs::create_symlink(path_.filename().string() + ".lock", path_.string() + ".lock");
  const Outcome unreadable = status(path_);
  EXPECT_EQ(unreadable.exit_code, 0) << unreadable.err;
  EXPECT_NE(unreadable.out.find("run: unknown: cannot read lock file " + path_.string() + ".lock"), std::string::npos)
      << unreadable.out;
  EXPECT_NE(unreadable.out.find("eta: 0h00m21s"), std::string::npos) << unreadable.out;
}

// A W8A8 task of 240 stacked linears of 32 rows, one chunk of 32 task rows, done in 2 s:
// rows and rates in tensor rows (7680), as the run's log and report count them.
TEST_F(CliStatusTest, CountsTheRowsOfStackedTensors) {
  CheckpointState s = three_of_ten_done();
  TaskRecord shared;
  shared.name = "layers.0.ffn.experts.0.w1 and 239 more";
  shared.rows = 32;
  shared.rows_per_chunk = 2048;
  shared.stacked_tensors = 240;
  shared.chunks.resize(1);
  shared.chunks[0].state = kChunkDone;
  shared.chunks[0].seconds = 2.0;
  s.tasks.push_back(shared);
  save_checkpoint(path_, s);
  const Outcome o = status(path_);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("1/1 chunks  100.0%  7680/7680 rows"), std::string::npos) << o.out;
  // With the Engram task's 300 of 950: 7980 of 8630 rows in 8 chunk-seconds (997.5), 10 s wall.
  EXPECT_NE(o.out.find("4/11 chunks  36.4%  7980/8630 rows"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("rows/s: 998 per chunk-second"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(", 798 wall"), std::string::npos) << o.out;
}

// An output folder stands for its default checkpoint; every fingerprint field is printed
// whole (a mismatch names one, and the user compares them).
TEST_F(CliStatusTest, TakesAnOutputFolderAndPrintsTheWholeFingerprint) {
  const fs::path own = dir_ / ".shardq" / "checkpoint.h5";
  fs::create_directories(own.parent_path());
  save_checkpoint(own, three_of_ten_done());
  const Outcome o = status(dir_);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("checkpoint: " + own.string() + " (generation 7"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\n  source_headers=9f3a1c2b4d5e6f7081\n"), std::string::npos) << o.out;
}

TEST_F(CliStatusTest, SaysWhenItFellBack) {
  save_checkpoint(path_, three_of_ten_done(1));
  save_checkpoint(path_, three_of_ten_done(2));
  fs::resize_file(path_, 100);
  const Outcome o = status(path_);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("generation 1"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("note: newest generation unusable"), std::string::npos) << o.out;
}

// Finished steps whose files are gone from the output folder (the fingerprint's dst) are
// named, and a run with every chunk done is not called done: the next run makes them again.
TEST_F(CliStatusTest, NamesFinishedFilesMissingFromTheOutput) {
  CheckpointState s = three_of_ten_done();
  for (auto& chunk : s.tasks[0].chunks) chunk.state = kChunkDone;
  const fs::path out = dir_ / "dst";
  fs::create_directories(out);
  std::ofstream(out / "config.json") << "{}";
  s.fingerprint.push_back({"dst", out.string()});
  s.finished = {"shard:model-00001-of-00001.safetensors", "index", "config"};
  save_checkpoint(path_, s);
  const Outcome o = status(path_);
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("missing: model-00001-of-00001.safetensors, model.safetensors.index.json ("), std::string::npos)
      << o.out;
  EXPECT_EQ(o.out.find("eta: done"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("eta: unknown (every chunk done, but finished files are missing"), std::string::npos) << o.out;
  std::ofstream(out / "model-00001-of-00001.safetensors") << "x";
  std::ofstream(out / "model.safetensors.index.json") << "{}";
  const Outcome whole = status(path_, "whole");
  EXPECT_EQ(whole.out.find("missing:"), std::string::npos) << whole.out;
  EXPECT_NE(whole.out.find("eta: done"), std::string::npos) << whole.out;
}

// The rank figures beside the checkpoint, malformed: one error line naming that file.
TEST_F(CliStatusTest, MalformedRankFiguresNameTheirFile) {
  save_checkpoint(path_, three_of_ten_done());
  const fs::path figures = path_.string() + ".ranks.json";
  std::ofstream(figures) << R"({"run_seconds": 1})";
  const Outcome o = status(path_);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("shardq: error: " + figures.string() + ": not the rank figures a run writes"), std::string::npos)
      << o.err;
  EXPECT_EQ(o.err.find('\n'), o.err.size() - 1) << o.err;
}

TEST_F(CliStatusTest, GarbageIsOneLineErrorNamingTheFile) {
  std::ofstream(path_, std::ios::binary) << "this is not a checkpoint";
  const Outcome o = status(path_);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find(path_.string()), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("`shardq run ... --fresh`; status only reads"), std::string::npos) << o.err;
  ASSERT_FALSE(o.err.empty());
  EXPECT_EQ(o.err.find('\n'), o.err.size() - 1) << o.err;
}

TEST_F(CliStatusTest, MissingCheckpointIsAnError) {
  const Outcome o = status(path_);
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find(path_.string()), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find('\n'), o.err.size() - 1) << o.err;
}

// HDF5's own file locks (flock) would make this fail if they were on.
TEST_F(CliStatusTest, ReadsAFileLockedByAnotherProcess) {
  save_checkpoint(path_, three_of_ten_done());
  const int fd = ::open(path_.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const Outcome o = status(path_);
  ::close(fd);
  EXPECT_EQ(o.exit_code, 0) << o.err;
}

TEST_F(CliStatusTest, ReadsWhileARunKeepsSaving) {
  save_checkpoint(path_, three_of_ten_done(1));
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint64_t generation = 2; !stop; ++generation) save_checkpoint(path_, three_of_ten_done(generation));
  });
  for (int i = 0; i < 10; ++i) {
    const Outcome o = status(path_, std::to_string(i));
    EXPECT_EQ(o.exit_code, 0) << o.err;
    EXPECT_NE(o.out.find("3/10 chunks"), std::string::npos) << o.out;
  }
  stop = true;
  writer.join();
}
