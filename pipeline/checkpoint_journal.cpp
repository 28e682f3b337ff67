#include "pipeline/checkpoint_journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "pipeline/io/atomic_file.h"
#include "pipeline/io/posix_file.h"
#include "pipeline/pipeline_error.h"

namespace shardq {
namespace {

static_assert(std::endian::native == std::endian::little, "the journal is the native little-endian form");

constexpr char kMagic[8] = {'S', 'H', 'Q', 'J', 'R', 'N', 'L', '1'};
constexpr size_t kHeaderBytes = sizeof kMagic + 4 + 8 + 8;
// A record larger than this is damage, not data (a save of 50K chunk records is ~12 MB).
constexpr uint64_t kMaxRecordBytes = 1ull << 30;

class Bytes {
 public:
  template <class T> void put(T value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    data_.insert(data_.end(), p, p + sizeof value);
  }
  void put_text(const std::string& text) {
    put<uint64_t>(text.size());
    data_.insert(data_.end(), text.begin(), text.end());
  }
  std::vector<uint8_t>& data() { return data_; }

 private:
  std::vector<uint8_t> data_;
};

// Reads what Bytes wrote; any read past the end marks the record bad.
class RecordReader {
 public:
  explicit RecordReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <class T> T get() {
    T value{};
    if (at_ + sizeof value > bytes_.size()) {
      ok_ = false;
      return value;
    }
    std::memcpy(&value, bytes_.data() + at_, sizeof value);
    at_ += sizeof value;
    return value;
  }
  std::string get_text() {
    const uint64_t size = get<uint64_t>();
    if (!ok_ || size > bytes_.size() - at_) {
      ok_ = false;
      return {};
    }
    std::string text(reinterpret_cast<const char*>(bytes_.data() + at_), size);
    at_ += size;
    return text;
  }
  bool ok() const { return ok_ && at_ == bytes_.size(); }
  bool good() const { return ok_; }

 private:
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
  bool ok_ = true;
};

// A chunk's stats as a mask of its non-zero words, then those words: most are zero (an
// INT8 chunk has no candidate wins or weighted sums), and a save of 50K chunks writes
// ~100 bytes a chunk instead of ~280.
constexpr size_t kStatWords = stat_words();
static_assert(kStatWords <= 64, "the stats' word mask is one u64");

void put_stats(Bytes& out, const ChunkStats& stats) {
  std::array<uint64_t, kStatWords> words{};
  size_t n = 0;
  for_each_stat([&](const char*, const auto& field) { for_each_word(field, [&](uint64_t w) { words[n++] = w; }); }, stats);
  uint64_t mask = 0;
  for (size_t i = 0; i < kStatWords; ++i) mask |= uint64_t(words[i] != 0) << i;
  out.put(mask);
  for (uint64_t w : words) {
    if (w != 0) out.put(w);
  }
}

// False for a mask naming words the stats do not have.
bool get_stats(RecordReader& in, ChunkStats& stats) {
  const uint64_t mask = in.get<uint64_t>();
  if (kStatWords < 64 && (mask >> kStatWords) != 0) return false;
  size_t i = 0;
  const auto next = [&]() -> uint64_t { return (mask >> i++ & 1) ? in.get<uint64_t>() : 0; };
  for_each_stat([&](const char*, auto& field) { read_words(field, next); }, stats);
  return true;
}

std::vector<uint8_t> header(uint64_t base_generation) {
  Bytes out;
  for (char c : kMagic) out.put(c);
  out.put<uint32_t>(kCheckpointFormatVersion);
  out.put(base_generation);
  out.put<uint64_t>(XXH3_64bits(out.data().data(), out.data().size()));
  return std::move(out.data());
}

std::vector<uint8_t> payload(const CheckpointState& state, const CheckpointChanges& changes) {
  Bytes out;
  out.put(state.generation);
  out.put(state.elapsed_seconds);
  out.put(state.updated_unix);
  out.put<uint64_t>(changes.chunks.size());
  for (const auto& [task, chunk] : changes.chunks) {
    const ChunkRecord& record = state.tasks.at(task).chunks.at(chunk);
    out.put(task);
    out.put(chunk);
    out.put(record.state);
    out.put(record.checksum);
    out.put(record.seconds);
    put_stats(out, record.stats);
  }
  out.put<uint64_t>(changes.reductions.size());
  for (const auto& [task, chunk] : changes.reductions) {
    const ReduceRecord& record = state.tasks.at(task).reductions.at(chunk);
    out.put(task);
    out.put(chunk);
    out.put(record.done);
    out.put(record.value);
  }
  // The steps finished before this save, then the new ones: a replay puts them exactly there.
  out.put<uint64_t>(changes.finished_from);
  out.put<uint64_t>(state.finished.size() - changes.finished_from);
  for (size_t i = changes.finished_from; i < state.finished.size(); ++i) out.put_text(state.finished[i]);
  return std::move(out.data());
}

// Applies one record to `state`; a bad record leaves state as it was. The record is read
// whole and checked first, then applied: copying the state per record instead (50K tasks,
// a record every 0.5 s of the run) made a replay cost records x tasks.
bool apply(std::span<const uint8_t> bytes, CheckpointState& state) {
  RecordReader in(bytes);
  const auto generation = in.get<uint64_t>();
  const auto elapsed_seconds = in.get<double>();
  const auto updated_unix = in.get<int64_t>();
  std::vector<std::tuple<uint32_t, uint64_t, ChunkRecord>> chunk_records;
  const uint64_t chunks = in.get<uint64_t>();
  for (uint64_t i = 0; i < chunks && in.good(); ++i) {
    const auto task = in.get<uint32_t>();
    const auto chunk = in.get<uint64_t>();
    if (task >= state.tasks.size() || chunk >= state.tasks[task].chunks.size()) return false;
    ChunkRecord record;
    record.state = in.get<uint8_t>();
    record.checksum = in.get<uint64_t>();
    record.seconds = in.get<double>();
    if (!get_stats(in, record.stats)) return false;
    chunk_records.emplace_back(task, chunk, record);
  }
  std::vector<std::tuple<uint32_t, uint64_t, ReduceRecord>> reduce_records;
  const uint64_t reductions = in.get<uint64_t>();
  for (uint64_t i = 0; i < reductions && in.good(); ++i) {
    const auto task = in.get<uint32_t>();
    const auto chunk = in.get<uint64_t>();
    if (task >= state.tasks.size() || chunk >= state.tasks[task].reductions.size()) return false;
    ReduceRecord record;
    record.done = in.get<uint8_t>();
    record.value = in.get<float>();
    reduce_records.emplace_back(task, chunk, record);
  }
  const uint64_t finished_before = in.get<uint64_t>();
  if (finished_before > state.finished.size()) return false;
  std::vector<std::string> finished_added;
  const uint64_t finished = in.get<uint64_t>();
  for (uint64_t i = 0; i < finished && in.good(); ++i) finished_added.push_back(in.get_text());
  if (!in.ok()) return false;
  state.generation = generation;
  state.elapsed_seconds = elapsed_seconds;
  state.updated_unix = updated_unix;
  for (const auto& [task, chunk, record] : chunk_records) state.tasks[task].chunks[chunk] = record;
  for (const auto& [task, chunk, record] : reduce_records) state.tasks[task].reductions[chunk] = record;
  state.finished.resize(finished_before);
  for (auto& step : finished_added) state.finished.push_back(std::move(step));
  return true;
}

std::optional<std::vector<uint8_t>> read_all(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

} // namespace

std::filesystem::path journal_file(const std::filesystem::path& checkpoint) {
  return std::filesystem::path(checkpoint.string() + ".journal");
}

void reset_journal(const std::filesystem::path& checkpoint, uint64_t base_generation) {
  const std::vector<uint8_t> bytes = header(base_generation);
  try {
    io::write_file_atomic(journal_file(checkpoint), std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const std::exception& e) {
    throw PipelineError(std::string("checkpoint journal: ") + e.what());
  }
}

uint64_t append_journal(const std::filesystem::path& checkpoint, const CheckpointState& state,
                        const CheckpointChanges& changes) {
  const std::filesystem::path file = journal_file(checkpoint);
  const std::vector<uint8_t> body = payload(state, changes);
  Bytes record;
  record.put<uint64_t>(body.size());
  record.put<uint64_t>(XXH3_64bits(body.data(), body.size()));
  record.data().insert(record.data().end(), body.begin(), body.end());
  const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) throw PipelineError("checkpoint journal " + file.string() + ": cannot open: " + io::errno_text(errno));
  struct stat info {};
  const bool ok = ::fstat(fd, &info) == 0;
  try {
    if (!ok) throw io::IoError(file.string() + ": " + io::errno_text(errno));
    io::pwrite_full(fd, record.data().data(), record.data().size(), uint64_t(info.st_size), file.string());
  } catch (const std::exception& e) {
    ::close(fd);
    throw PipelineError(std::string("checkpoint journal: ") + e.what());
  }
  const bool synced = ::fdatasync(fd) == 0;
  const int sync_errno = errno;
  const bool closed = ::close(fd) == 0; // NFS reports write errors at close
  if (!synced || !closed) {
    throw PipelineError("checkpoint journal " + file.string() + ": fsync failed: " + io::errno_text(synced ? errno : sync_errno));
  }
  return uint64_t(info.st_size) + record.data().size();
}

size_t replay_journal(const std::filesystem::path& checkpoint, CheckpointState& state, std::string& note) {
  const std::filesystem::path file = journal_file(checkpoint);
  const auto bytes = read_all(file);
  if (!bytes || bytes->size() < kHeaderBytes) return 0;
  if (!std::equal(bytes->begin(), bytes->begin() + long(kHeaderBytes), header(state.generation).begin())) {
    return 0; // another format, or written for another base: its records are in no state we hold
  }
  size_t applied = 0;
  for (size_t at = kHeaderBytes; at < bytes->size();) {
    RecordReader frame(std::span<const uint8_t>(*bytes).subspan(at, std::min<size_t>(16, bytes->size() - at)));
    const uint64_t length = frame.get<uint64_t>(), checksum = frame.get<uint64_t>();
    const bool whole = frame.good() && length <= kMaxRecordBytes && length <= bytes->size() - at - 16;
    const std::span<const uint8_t> body = whole ? std::span<const uint8_t>(*bytes).subspan(at + 16, length) : std::span<const uint8_t>{};
    if (!whole || XXH3_64bits(body.data(), body.size()) != checksum || !apply(body, state)) {
      note = file.string() + ": record " + std::to_string(applied + 1) + " at byte " + std::to_string(at) +
             " is cut short or damaged; replayed the " + std::to_string(applied) + " before it";
      return applied;
    }
    ++applied;
    at += 16 + length;
  }
  return applied;
}

} // namespace shardq
