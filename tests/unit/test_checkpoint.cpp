// The HDF5 run checkpoint: round trip, refusal of other jobs, and a complete generation
// after any interrupted save, torn file or flipped byte (docs/checkpoint.md "Atomic saves", "Journal").
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "pipeline/checkpoint.h"
#include "pipeline/checkpoint_journal.h"

using namespace shardq;
namespace fs = std::filesystem;

namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shardq_ckpt_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = dir_ / "checkpoint.h5";
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_, path_;
};

ExactSum some_sum(std::mt19937_64& rng) { return ExactSum::from_parts(rng() >> 20, rng()); }

ChunkRecord some_chunk(std::mt19937_64& rng) {
  ChunkRecord c;
  c.state = uint8_t(rng() % 2);
  c.checksum = rng();
  c.seconds = double(rng() % 100000) / 1000.0;
  c.stats.rows = rng() % 5000;
  c.stats.blocks = rng();
  c.stats.zero_blocks = rng();
  c.stats.scale_underflows = rng();
  for (auto& wins : c.stats.candidate_wins) wins = rng();
  c.stats.inexact_blocks = rng();
  c.stats.error_sq = some_sum(rng);
  c.stats.reference_sq = some_sum(rng);
  c.stats.output_sq = some_sum(rng);
  c.stats.weighted_error_sq = some_sum(rng);
  c.stats.weighted_reference_sq = some_sum(rng);
  // Like an INT8 chunk, some count no candidate wins and no weighted sums (stored sparsely).
  if (rng() % 3 == 0) {
    c.stats.candidate_wins = {};
    c.stats.weighted_error_sq = {};
    c.stats.weighted_reference_sq = ExactSum::from_parts(0, rng());
  }
  return c;
}

TaskRecord some_task(std::mt19937_64& rng, const std::string& name, size_t chunks, bool reduces = true) {
  TaskRecord t;
  t.name = name;
  t.rows_per_chunk = 4096;
  t.rows = chunks * t.rows_per_chunk - (chunks ? 17 : 0);
  t.stacked_tensors = reduces ? 1 : 240; // a W8A8 task sharing 240 small linears
  for (size_t i = 0; i < chunks; ++i) {
    if (reduces) t.reductions.push_back({uint8_t(rng() % 2), float(rng() % 1000000) / 7.0f});
    t.chunks.push_back(some_chunk(rng));
  }
  return t;
}

// The size of one Engram factor set: 24 hash columns of 256 x 256.
const std::vector<uint64_t> kFactorShape = {24, 256, 256};
constexpr size_t kFactorValues = 24 * 256 * 256;

Blob some_blob(std::mt19937_64& rng, const std::string& name) {
  std::uniform_real_distribution<double> value(-3.0, 3.0);
  Blob b{name, kFactorShape, std::vector<double>(kFactorValues)};
  for (double& v : b.values) v = value(rng);
  return b;
}

CheckpointState some_state(uint64_t generation, size_t chunks_per_table = 40, bool factors = false) {
  std::mt19937_64 rng(generation * 7919 + chunks_per_table);
  CheckpointState s;
  // Not alphabetical on purpose: the order is part of the state.
  s.fingerprint = {{"job", "engram-nvfp4 gptq-mse rows_per_chunk=4096"},
                   {"source_headers", "9f3a1c2b4d5e6f70"},
                   {"tool_version", "0.1.0"},
                   {"note", ""},
                   {"dst", "/models/DeepSeek-V4.1-Flash-NVFP4-Engram \xc3\xa9"}};
  s.tasks.push_back(some_task(rng, "layers.1.engram.embed", chunks_per_table));
  s.tasks.push_back(some_task(rng, "layers.14.engram.embed", chunks_per_table / 2 + 1));
  s.tasks.push_back(some_task(rng, "layers.20.engram.embed", 0));
  s.tasks.push_back(some_task(rng, "layers.3.ffn.experts.7.w2", 3, /*reduces=*/false));
  if (factors) {
    s.blobs.push_back(some_blob(rng, "gram:layers.14.engram.wkv"));
    s.blobs.push_back(some_blob(rng, "factor:layers.1.engram.wkv"));
  }
  s.finished = {"shard:model-00005-of-00046.safetensors", "index", "config"};
  s.elapsed_seconds = 1234.5 + double(generation);
  s.generation = generation;
  s.updated_unix = 1750000000 + int64_t(generation);
  return s;
}

void truncate_to_half(const fs::path& path) { fs::resize_file(path, fs::file_size(path) / 2); }

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void flip_byte(const fs::path& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(offset));
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ 0x5A);
  f.seekp(std::streamoff(offset));
  f.write(&c, 1);
}

// Where HDF5 put a dataset's raw values, read with the HDF5 API, not with our reader.
uint64_t raw_data_offset(const fs::path& path, const char* dataset) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t set = H5Dopen2(file, dataset, H5P_DEFAULT);
  const haddr_t offset = H5Dget_offset(set);
  H5Dclose(set);
  H5Fclose(file);
  return offset;
}

} // namespace

TEST_F(CheckpointTest, RoundTripKeepsEveryField) {
  const CheckpointState saved = some_state(3, 40, /*factors=*/true);
  save_checkpoint(path_, saved);
  const auto loaded = load_checkpoint(path_);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_FALSE(loaded->fell_back);
  EXPECT_EQ(loaded->note, "");
  const CheckpointState& s = loaded->state;
  EXPECT_EQ(s.fingerprint, saved.fingerprint);
  ASSERT_EQ(s.tasks.size(), 4u);
  for (size_t t = 0; t < s.tasks.size(); ++t) EXPECT_EQ(s.tasks[t], saved.tasks[t]) << t;
  EXPECT_TRUE(s.tasks[3].reductions.empty());
  ASSERT_EQ(s.blobs.size(), 2u);
  EXPECT_EQ(s.blobs[0].name, "gram:layers.14.engram.wkv");
  EXPECT_EQ(s.blobs[1].shape, kFactorShape);
  EXPECT_EQ(s.blobs, saved.blobs);
  EXPECT_EQ(s.finished, saved.finished);
  EXPECT_EQ(s.elapsed_seconds, saved.elapsed_seconds);
  EXPECT_EQ(s.generation, 3u);
  EXPECT_EQ(s.updated_unix, saved.updated_unix);
  EXPECT_EQ(s, saved);
  EXPECT_FALSE(fs::exists(fs::path(path_.string() + ".tmp")));
}

// The blobs (a factor set's Gram or factor: 12.6 MB each) go to PATH.blobs once: later
// saves of the same blobs leave that file alone (same inode, same bytes) and the
// generation itself stays small.
TEST_F(CheckpointTest, BlobsAreWrittenOnceBesideTheCheckpoint) {
  const CheckpointState first = some_state(1, 40, /*factors=*/true);
  save_checkpoint(path_, first);
  const fs::path file = blobs_file(path_);
  ASSERT_TRUE(fs::exists(file));
  EXPECT_GT(fs::file_size(file), 2 * kFactorValues * sizeof(double)); // two blobs of one factor set each
  EXPECT_LT(fs::file_size(path_), 1u << 20);
  struct stat before {};
  ASSERT_EQ(::stat(file.c_str(), &before), 0);
  CheckpointState second = first;
  second.generation = 2;
  second.tasks[0].chunks[3].state = 2;
  save_checkpoint(path_, second);
  struct stat after {};
  ASSERT_EQ(::stat(file.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino) << "the blob file was rewritten";
  EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  EXPECT_EQ(load_checkpoint(path_)->state, second);
  EXPECT_FALSE(fs::exists(fs::path(file.string() + ".tmp")));
}

// The blob file is replaced (holding one factor set more) before the generation that
// records the new set: killed in between, or later with the newest generation lost, the
// older generation still loads from that file (its blobs are the file's first ones).
TEST_F(CheckpointTest, OlderGenerationLoadsFromABlobFileThatGrew) {
  CheckpointState older = some_state(1, 10, /*factors=*/true);
  older.blobs.resize(1);
  save_checkpoint(path_, older);
  CheckpointState newer = some_state(1, 10, /*factors=*/true);
  newer.generation = 2;
  ASSERT_EQ(newer.blobs.size(), 2u);
  ASSERT_EQ(newer.blobs[0], older.blobs[0]);
  save_checkpoint(path_, newer);
  std::ofstream(path_, std::ios::trunc) << "cut short"; // the newest generation lost
  const auto loaded = load_checkpoint(path_);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_TRUE(loaded->fell_back);
  EXPECT_EQ(loaded->state, older);
  // A file whose first blob differs from the generation's is still refused.
  CheckpointState other = newer;
  other.blobs[0].values[3] += 1.0;
  save_checkpoint(dir_ / "other.h5", other);
  fs::copy_file(blobs_file(dir_ / "other.h5"), blobs_file(path_), fs::copy_options::overwrite_existing);
  EXPECT_THROW(load_checkpoint(path_), PipelineError);
}

// A generation needs its blob file: missing, or holding other blobs (another run's file
// copied over it), the checkpoint is refused with the file named, not half-loaded.
TEST_F(CheckpointTest, MissingOrForeignBlobFileIsRefused) {
  save_checkpoint(path_, some_state(1, 10, /*factors=*/true));
  const fs::path file = blobs_file(path_);
  const fs::path other = dir_ / "other.h5";
  CheckpointState foreign = some_state(1, 10, /*factors=*/true);
  foreign.blobs[0].values[7] += 1.0;
  save_checkpoint(other, foreign);
  fs::copy_file(blobs_file(other), file, fs::copy_options::overwrite_existing);
  try {
    load_checkpoint(path_);
    FAIL() << "a foreign blob file was accepted";
  } catch (const PipelineError& e) {
    EXPECT_NE(std::string(e.what()).find("holds other blobs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
  fs::remove(file);
  try {
    load_checkpoint(path_);
    FAIL() << "a checkpoint without its blob file was accepted";
  } catch (const PipelineError& e) {
    EXPECT_NE(std::string(e.what()).find("is missing"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointTest, EmptyStateRoundTrips) {
  const CheckpointState empty;
  save_checkpoint(path_, empty);
  const auto loaded = load_checkpoint(path_);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->state, empty);
}

// Stacked tensors are stored only where a task stacks more than one (W8A8's shared
// tasks); a plan of single-tensor tasks leaves the column out and reads back ones.
TEST_F(CheckpointTest, StackedTensorsColumnOnlyWhereATaskStacks) {
  const auto has_column = [&] {
    const hid_t file = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const bool exists = H5Lexists(file, "/tasks/stacked_tensors", H5P_DEFAULT) > 0;
    H5Fclose(file);
    return exists;
  };
  CheckpointState single = some_state(1);
  for (auto& task : single.tasks) task.stacked_tensors = 1;
  save_checkpoint(path_, single);
  EXPECT_FALSE(has_column());
  EXPECT_EQ(load_checkpoint(path_)->state, single);
  CheckpointState stacked = some_state(2);
  ASSERT_EQ(stacked.tasks[3].stacked_tensors, 240u);
  save_checkpoint(path_, stacked);
  EXPECT_TRUE(has_column());
  EXPECT_EQ(load_checkpoint(path_)->state, stacked);
}

TEST_F(CheckpointTest, FileHoldsTheDocumentedLayout) {
  save_checkpoint(path_, some_state(5));
  const hid_t file = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  uint32_t version = 0;
  uint64_t generation = 0;
  const hid_t version_attr = H5Aopen(file, "format_version", H5P_DEFAULT);
  H5Aread(version_attr, H5T_NATIVE_UINT32, &version);
  H5Aclose(version_attr);
  const hid_t generation_attr = H5Aopen(file, "generation", H5P_DEFAULT);
  H5Aread(generation_attr, H5T_NATIVE_UINT64, &generation);
  H5Aclose(generation_attr);
  EXPECT_EQ(version, kCheckpointFormatVersion);
  EXPECT_EQ(generation, 5u);
  EXPECT_GT(H5Aexists(file, "checksum"), 0);
  EXPECT_GT(H5Lexists(file, "/chunks/stats/candidate_wins", H5P_DEFAULT), 0);
  EXPECT_GT(H5Lexists(file, "/finished", H5P_DEFAULT), 0);
  const hid_t fingerprint = H5Gopen2(file, "/fingerprint", H5P_DEFAULT);
  EXPECT_GT(H5Aexists(fingerprint, "source_headers"), 0);
  H5Gclose(fingerprint);
  H5Fclose(file);
}

// A stats field every chunk has at zero (every field of a fresh plan; an INT8 job's
// candidate wins) is not written, and reads back as zeros.
TEST_F(CheckpointTest, StatsFieldsAllZeroAreLeftOutAndReadAsZeros) {
  CheckpointState state = some_state(2, 12);
  for (auto& task : state.tasks) {
    for (auto& chunk : task.chunks) {
      chunk.stats.candidate_wins = {};
      chunk.stats.output_sq = {};
    }
  }
  state.tasks[0].chunks[3].stats.candidate_wins[15] = 1; // one word keeps its column
  save_checkpoint(path_, state);
  const hid_t file = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  EXPECT_EQ(H5Lexists(file, "/chunks/stats/output_sq", H5P_DEFAULT), 0);
  EXPECT_GT(H5Lexists(file, "/chunks/stats/candidate_wins", H5P_DEFAULT), 0);
  EXPECT_GT(H5Lexists(file, "/chunks/stats/error_sq", H5P_DEFAULT), 0);
  H5Fclose(file);
  EXPECT_EQ(load_checkpoint(path_)->state, state);

  CheckpointState fresh = some_state(3, 12);
  for (auto& task : fresh.tasks) {
    for (auto& chunk : task.chunks) chunk = ChunkRecord{};
  }
  save_checkpoint(path_, fresh);
  const hid_t fresh_file = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(fresh_file, 0);
  for (const char* field : {"rows", "candidate_wins", "error_sq", "weighted_reference_sq"}) {
    EXPECT_EQ(H5Lexists(fresh_file, ("/chunks/stats/" + std::string(field)).c_str(), H5P_DEFAULT), 0) << field;
  }
  H5Fclose(fresh_file);
  EXPECT_EQ(load_checkpoint(path_)->state, fresh);
}

TEST_F(CheckpointTest, H5dumpReadsTheFile) {
  if (std::system("command -v h5dump > /dev/null 2>&1") != 0) GTEST_SKIP() << "h5dump not installed";
  save_checkpoint(path_, some_state(1, 10, /*factors=*/true));
  const std::string command = "h5dump -H '" + path_.string() + "' > /dev/null 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0);
  const std::string data = "h5dump -d /chunks/checksum '" + path_.string() + "' > /dev/null 2>&1";
  EXPECT_EQ(std::system(data.c_str()), 0);
}

TEST_F(CheckpointTest, NoCheckpointIsNullopt) { EXPECT_FALSE(load_checkpoint(path_).has_value()); }

TEST_F(CheckpointTest, SaveKeepsThePreviousGeneration) {
  save_checkpoint(path_, some_state(1));
  save_checkpoint(path_, some_state(2));
  save_checkpoint(path_, some_state(3));
  EXPECT_EQ(load_checkpoint(path_)->state, some_state(3));
  fs::remove(path_);
  const auto previous = load_checkpoint(path_);
  ASSERT_TRUE(previous.has_value());
  EXPECT_TRUE(previous->fell_back);
  EXPECT_EQ(previous->state, some_state(2));
}

TEST_F(CheckpointTest, FingerprintMismatchNamesTheField) {
  const CheckpointState stored = some_state(1);
  auto current = stored.fingerprint;
  EXPECT_EQ(fingerprint_mismatch(stored, current), "");
  current[1].second = "3a00000000000000";
  const std::string message = fingerprint_mismatch(stored, current);
  EXPECT_NE(message.find("another job"), std::string::npos) << message;
  EXPECT_NE(message.find("'source_headers'"), std::string::npos) << message;
  EXPECT_NE(message.find("9f3a1c2b4d5e6f70"), std::string::npos) << message;
  EXPECT_NE(message.find("3a00000000000000"), std::string::npos) << message;

  // A field of job keys names the key that differs.
  CheckpointState keys = stored;
  keys.fingerprint = {{"job", "recipe=w8a8-int8;method=rtn;rows_per_chunk=2048"}};
  EXPECT_EQ(fingerprint_mismatch(keys, {{"job", "recipe=w8a8-int8;method=rtn;rows_per_chunk=4096"}}),
            "checkpoint belongs to another job: field 'job': key 'rows_per_chunk' is 2048 in the checkpoint but 4096 now");
  EXPECT_EQ(fingerprint_mismatch(keys, {{"job", "recipe=w8a8-int8;method=mse;mse_candidates=8;rows_per_chunk=2048"}}),
            "checkpoint belongs to another job: field 'job': key 'method' is rtn in the checkpoint but mse now");
  EXPECT_EQ(fingerprint_mismatch(keys, {{"job", "recipe=w8a8-int8;method=rtn"}}),
            "checkpoint belongs to another job: field 'job': key 'rows_per_chunk' is 2048 in the checkpoint but absent now");
  EXPECT_EQ(fingerprint_mismatch(keys, {{"job", "recipe=w8a8-int8;method=rtn;rows_per_chunk=2048;threads=2"}}),
            "checkpoint belongs to another job: field 'job': key 'threads' is absent in the checkpoint but 2 now");

  auto fewer = stored.fingerprint;
  fewer.pop_back();
  EXPECT_NE(fingerprint_mismatch(stored, fewer).find("'dst'"), std::string::npos);
  auto more = stored.fingerprint;
  more.emplace_back("recipe", "nvfp4-1017");
  EXPECT_NE(fingerprint_mismatch(stored, more).find("'recipe'"), std::string::npos);
}

TEST_F(CheckpointTest, TruncatedNewestFallsBackToPrevious) {
  save_checkpoint(path_, some_state(1));
  save_checkpoint(path_, some_state(2));
  truncate_to_half(path_);
  const auto loaded = load_checkpoint(path_);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_TRUE(loaded->fell_back);
  EXPECT_EQ(loaded->state, some_state(1));
  EXPECT_NE(loaded->note.find(path_.string()), std::string::npos) << loaded->note;
  EXPECT_NE(loaded->note.find("previous"), std::string::npos) << loaded->note;
}

TEST_F(CheckpointTest, FlippedDataByteIsCaughtByTheChecksum) {
  save_checkpoint(path_, some_state(1));
  save_checkpoint(path_, some_state(2));
  flip_byte(path_, raw_data_offset(path_, "/chunks/checksum") + 3);
  const auto loaded = load_checkpoint(path_);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_TRUE(loaded->fell_back);
  EXPECT_EQ(loaded->state, some_state(1));
  EXPECT_NE(loaded->note.find("checksum mismatch"), std::string::npos) << loaded->note;
}

// A flipped byte anywhere: the load gives the newest generation intact (the byte was
// unused) or the previous one, never a changed state and never a crash.
TEST_F(CheckpointTest, FlippedByteAnywhereNeverYieldsAChangedState) {
  save_checkpoint(path_, some_state(1, 8));
  save_checkpoint(path_, some_state(2, 8));
  const fs::path pristine = dir_ / "pristine.h5";
  fs::copy_file(path_, pristine);
  const uint64_t size = fs::file_size(path_);
  int fell_back = 0, intact = 0;
  for (uint64_t offset = 0; offset < size; offset += 41) {
    fs::copy_file(pristine, path_, fs::copy_options::overwrite_existing);
    flip_byte(path_, offset);
    const auto loaded = load_checkpoint(path_);
    ASSERT_TRUE(loaded.has_value()) << offset;
    if (loaded->fell_back) {
      ++fell_back;
      EXPECT_EQ(loaded->state, some_state(1, 8)) << offset;
    } else {
      ++intact;
      EXPECT_EQ(loaded->state, some_state(2, 8)) << offset;
    }
  }
  EXPECT_GT(fell_back, 0);
  std::printf("[          ] %llu-byte file: %d flips fell back, %d hit unused bytes\n", (unsigned long long)size,
              fell_back, intact);
}

TEST_F(CheckpointTest, BothGenerationsCorruptIsAnErrorSuggestingFresh) {
  save_checkpoint(path_, some_state(1));
  save_checkpoint(path_, some_state(2));
  truncate_to_half(path_);
  write_bytes(fs::path(path_.string() + ".prev"), "not an hdf5 file at all");
  try {
    load_checkpoint(path_);
    FAIL() << "expected a PipelineError";
  } catch (const PipelineError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path_.string() + " is corrupt"), std::string::npos) << message;
    EXPECT_NE(message.find("--fresh"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST_F(CheckpointTest, CorruptNewestWithoutPreviousIsAnError) {
  write_bytes(path_, std::string(4096, '\x42'));
  EXPECT_THROW(load_checkpoint(path_), PipelineError);
}

// A kill -9 can stop a save at any step; each leftover state still loads a whole generation.
TEST_F(CheckpointTest, InterruptedSaveLeavesACompleteGeneration) {
  const fs::path tmp(path_.string() + ".tmp"), prev(path_.string() + ".prev");
  // Killed while writing the very first .tmp: nothing was ever saved.
  write_bytes(tmp, "\x89HDF\r\n\x1a\n half");
  EXPECT_FALSE(load_checkpoint(path_).has_value());

  save_checkpoint(path_, some_state(1)); // a stale .tmp does not stop a save
  save_checkpoint(path_, some_state(2));
  // Killed while writing .tmp: the half file is never read.
  fs::copy_file(path_, tmp, fs::copy_options::overwrite_existing);
  truncate_to_half(tmp);
  EXPECT_EQ(load_checkpoint(path_)->state, some_state(2));
  // Killed between linking the current file as .prev and renaming .tmp over it.
  fs::copy_file(path_, prev, fs::copy_options::overwrite_existing);
  EXPECT_EQ(load_checkpoint(path_)->state, some_state(2));
  // Killed after moving the current file to .prev (no hard links), before the rename.
  fs::rename(path_, prev);
  const auto loaded = load_checkpoint(path_);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_TRUE(loaded->fell_back);
  EXPECT_EQ(loaded->state, some_state(2));
  EXPECT_NE(loaded->note.find("missing"), std::string::npos) << loaded->note;
  // The next save recovers the normal pair.
  save_checkpoint(path_, some_state(3));
  EXPECT_EQ(load_checkpoint(path_)->state, some_state(3));
  EXPECT_FALSE(fs::exists(tmp));
}

TEST_F(CheckpointTest, RefusesWhatItCannotStore) {
  CheckpointState bad_blob = some_state(1);
  bad_blob.blobs.push_back({"factor:x", {2, 3}, std::vector<double>(10)});
  EXPECT_THROW(save_checkpoint(path_, bad_blob), PipelineError);
  CheckpointState repeated = some_state(1);
  repeated.fingerprint.push_back(repeated.fingerprint.front());
  EXPECT_THROW(save_checkpoint(path_, repeated), PipelineError);
  CheckpointState nul = some_state(1);
  nul.finished.push_back(std::string("a\0b", 3));
  EXPECT_THROW(save_checkpoint(path_, nul), PipelineError);
  EXPECT_FALSE(fs::exists(path_));
}

TEST_F(CheckpointTest, ChecksumCoversEveryField) {
  const CheckpointState base = some_state(1, 40, /*factors=*/true);
  const uint64_t reference = checkpoint_checksum(base);
  std::vector<CheckpointState> variants(18, base);
  variants[0].fingerprint[0].second += "x";
  variants[1].tasks[0].chunks[3].stats.weighted_reference_sq.value += 1;
  variants[2].tasks[1].reductions[0].done ^= 1;
  variants[3].finished.pop_back();
  variants[4].elapsed_seconds += 1e-9;
  variants[5].tasks[0].rows_per_chunk += 1;
  variants[6].tasks[3].chunks[1].stats.inexact_blocks += 1;
  variants[7].tasks[2].name += "x";
  variants[8].tasks[3].stacked_tensors += 1;
  ChunkRecord& chunk = variants[9].tasks[0].chunks[0];
  chunk.state = chunk.state == kChunkDone ? kChunkPending : kChunkDone;
  variants[10].tasks[0].chunks[1].checksum += 1;
  variants[11].tasks[0].chunks[2].seconds += 1e-9;
  variants[12].tasks[1].reductions[0].value = std::nextafter(variants[12].tasks[1].reductions[0].value, 1e30f);
  variants[13].tasks[2].rows += 1;
  variants[14].generation += 1;
  variants[15].updated_unix += 1;
  variants[16].blobs[0].values[0] = std::nextafter(variants[16].blobs[0].values[0], 1e300);
  variants[17].blobs[1].name += "x";
  for (size_t i = 0; i < variants.size(); ++i) EXPECT_NE(checkpoint_checksum(variants[i]), reference) << i;
}

// Records are flat columns over all tasks: a plan of 50,000 one-chunk tasks (the INT8
// product's many small linears) round-trips, and the chunk records land with their task.
TEST_F(CheckpointTest, ManySmallTasksRoundTrip) {
  std::mt19937_64 rng(11);
  CheckpointState state;
  state.fingerprint = {{"job", "w8a8"}};
  for (size_t t = 0; t < 50000; ++t) {
    // Appended, not "t" + ...: GCC 12 for aarch64 warns falsely (-Wrestrict) on that insert.
    std::string name = "t";
    name += std::to_string(t);
    state.tasks.push_back(some_task(rng, name, 1 + t % 2, t % 3 == 0));
  }
  save_checkpoint(path_, state);
  const auto loaded = load_checkpoint(path_);
  ASSERT_TRUE(loaded.has_value());
  ASSERT_EQ(loaded->state.tasks.size(), 50000u);
  EXPECT_EQ(loaded->state.tasks[49999], state.tasks[49999]);
  EXPECT_EQ(loaded->state, state);
}

// A checkpoint of another format version is refused naming both versions, and is never
// read as a fallback generation either.
TEST_F(CheckpointTest, OtherFormatVersionIsRefusedNamingBoth) {
  save_checkpoint(path_, some_state(1));
  save_checkpoint(path_, some_state(2)); // .prev exists too
  for (const fs::path& file : {path_, fs::path(path_.string() + ".prev")}) {
    const hid_t h5 = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(h5, 0);
    const hid_t attr = H5Aopen(h5, "format_version", H5P_DEFAULT);
    const uint32_t old_version = 2;
    H5Awrite(attr, H5T_NATIVE_UINT32, &old_version);
    H5Aclose(attr);
    H5Fclose(h5);
  }
  try {
    load_checkpoint(path_);
    FAIL() << "a version-2 checkpoint was read";
  } catch (const PipelineError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("format version 2"), std::string::npos) << what;
    EXPECT_NE(what.find("reads version " + std::to_string(kCheckpointFormatVersion)), std::string::npos) << what;
    EXPECT_NE(what.find("--fresh"), std::string::npos) << what;
  }
}

// Between whole saves, a save appends only what changed to PATH.journal; a load replays it
// onto the base, so the state reads back whole.
TEST_F(CheckpointTest, JournalReplaysChangesOntoTheBase) {
  CheckpointState state = some_state(1, 40);
  save_checkpoint(path_, state);
  const uint64_t base_size = fs::file_size(path_);
  std::mt19937_64 rng(5);
  for (uint64_t save = 0; save < 3; ++save) {
    CheckpointChanges changes;
    changes.finished_from = state.finished.size();
    for (uint64_t c = save * 4; c < save * 4 + 4; ++c) {
      state.tasks[0].chunks[c] = some_chunk(rng);
      changes.chunks.emplace_back(0, c);
    }
    state.tasks[1].reductions[save] = {1, float(save) + 0.5f};
    changes.reductions.emplace_back(1, save);
    state.finished.push_back("shard:" + std::to_string(save));
    state.generation += 1;
    state.elapsed_seconds += 1.0;
    append_journal(path_, state, changes);
  }
  EXPECT_EQ(fs::file_size(path_), base_size) << "an append rewrote the base";
  EXPECT_LT(fs::file_size(journal_file(path_)), base_size / 4) << "12 chunk records cost more than a quarter of the base";
  const auto loaded = load_checkpoint(path_);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->note, "");
  EXPECT_EQ(loaded->state, state);
}

// A kill mid-append leaves a torn last record: the records before it hold, the torn one
// (a save that never completed) is dropped and said so. Damage inside a record the same.
TEST_F(CheckpointTest, TornOrDamagedJournalRecordEndsTheReplay) {
  CheckpointState state = some_state(1, 10);
  save_checkpoint(path_, state);
  CheckpointChanges first;
  first.finished_from = state.finished.size();
  state.tasks[0].chunks[0].state = kChunkDone;
  first.chunks.emplace_back(0, 0);
  state.generation = 2;
  append_journal(path_, state, first);
  const CheckpointState after_first = state;
  const uint64_t first_end = fs::file_size(journal_file(path_));
  CheckpointChanges second;
  second.finished_from = state.finished.size();
  state.tasks[0].chunks[1].state = kChunkDone;
  second.chunks.emplace_back(0, 1);
  state.generation = 3;
  append_journal(path_, state, second);
  const uint64_t second_end = fs::file_size(journal_file(path_));

  fs::resize_file(journal_file(path_), second_end - 5); // torn
  auto loaded = load_checkpoint(path_);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->state, after_first);
  EXPECT_NE(loaded->note.find("cut short or damaged"), std::string::npos) << loaded->note;

  append_journal(path_, state, second);
  flip_byte(journal_file(path_), first_end + 20); // inside the second record (now damaged)
  loaded = load_checkpoint(path_);
  EXPECT_EQ(loaded->state, after_first);
}

// A journal written for another base (the base was rewritten after it, or it belongs to a
// newer base that was lost) is ignored whole: its records are in no state we hold.
TEST_F(CheckpointTest, JournalOfAnotherBaseIsIgnored) {
  CheckpointState state = some_state(1, 10);
  save_checkpoint(path_, state);
  CheckpointChanges changes;
  CheckpointState changed = state;
  changed.tasks[0].chunks[2].state = kChunkDone;
  changed.generation = 2;
  changes.chunks.emplace_back(0, 2);
  append_journal(path_, changed, changes);
  const fs::path journal = journal_file(path_);
  const fs::path kept = dir_ / "kept.journal";
  fs::copy_file(journal, kept);
  changed.generation = 3;
  save_checkpoint(path_, changed); // a new base (generation 3) and an empty journal
  fs::copy_file(kept, journal, fs::copy_options::overwrite_existing); // the old base's journal
  const auto loaded = load_checkpoint(path_);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->state, changed);
  EXPECT_EQ(loaded->note, "");
}
