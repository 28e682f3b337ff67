#include "pipeline/checkpoint_schema.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "pipeline/checkpoint_digest.h"
#include "pipeline/checkpoint_hdf5.h"

namespace shardq {
namespace {

namespace fs = std::filesystem;
using hdf5::Hid;

// ---------------------------------------------------------------- writing

template <class Record, class Field> auto column(const std::vector<Record>& records, Field field) {
  std::vector<std::decay_t<decltype(field(records.front()))>> values;
  values.reserve(records.size());
  for (const auto& r : records) values.push_back(field(r));
  return values;
}

// One field of every task's records of one kind (chunks or reductions), in task order:
// built from the tasks' own vectors, not from a copy of every record (a 50K-chunk plan's
// chunk records are ~15 MB).
template <class Records, class Field>
auto records_column(const std::vector<TaskRecord>& tasks, Records records, Field field) {
  using Record = typename std::decay_t<decltype(records(tasks.front()))>::value_type;
  std::vector<std::decay_t<decltype(field(std::declval<const Record&>()))>> values;
  size_t count = 0;
  for (const auto& t : tasks) count += records(t).size();
  values.reserve(count);
  for (const auto& t : tasks) {
    for (const auto& r : records(t)) values.push_back(field(r));
  }
  return values;
}

const std::vector<ChunkRecord>& chunks_of(const TaskRecord& t) { return t.chunks; }
const std::vector<ReduceRecord>& reductions_of(const TaskRecord& t) { return t.reductions; }

// One stats field of every chunk: u64 [C] counters, u64 [C, 16] wins, u64 [C, 2] sums.
constexpr hsize_t field_width(uint64_t) { return 1; }
constexpr hsize_t field_width(const ExactSum&) { return 2; }
template <size_t N> constexpr hsize_t field_width(const std::array<uint64_t, N>&) { return N; }

// Calls visit(field_index, name, field...) for each stats field, in for_each_stat order.
template <class Visit, class... Stats> void for_each_stat_indexed(Visit&& visit, Stats&... stats) {
  size_t index = 0;
  for_each_stat([&](const char* name, auto&... fields) { visit(index++, name, fields...); }, stats...);
}

void write_chunk_stats(hdf5::FileWriter& w, hid_t chunks_group, const std::vector<TaskRecord>& tasks) {
  Hid group = w.group(chunks_group, "stats");
  w.string_attr(group.get(), "sum_encoding", "*_sq: [high, low] u64 words of a 128-bit integer count of 2^-64");
  // A field no chunk has counted yet (every one at the start; candidate wins of an INT8 job
  // all run long) is left out and reads as zeros: the first save of a 50K-chunk plan would
  // otherwise write ~12 MB of zeros. Found first, so that only the others are gathered.
  std::vector<uint8_t> counted(stat_fields(), 0);
  uint64_t n = 0;
  for (const auto& t : tasks) {
    n += t.chunks.size();
    for (const auto& c : t.chunks) {
      for_each_stat_indexed(
          [&](size_t field, const char*, const auto& value) { for_each_word(value, [&](uint64_t word) { counted[field] |= word != 0; }); },
          c.stats);
    }
  }
  const ChunkStats widths;
  std::vector<std::vector<uint64_t>> columns(stat_fields()); // in for_each_stat order; counted ones only
  for_each_stat_indexed(
      [&](size_t field, const char*, const auto& width) {
        if (counted[field]) columns[field].reserve(n * field_width(width));
      },
      widths);
  for (const auto& t : tasks) {
    for (const auto& c : t.chunks) {
      for_each_stat_indexed(
          [&](size_t field, const char*, const auto& value) {
            if (counted[field]) for_each_word(value, [&](uint64_t word) { columns[field].push_back(word); });
          },
          c.stats);
    }
  }
  for_each_stat_indexed(
      [&](size_t field, const char* name, const auto& width_of) {
        if (!counted[field]) return;
        const hsize_t width = field_width(width_of);
        w.dataset(group.get(), name, columns[field], width == 1 ? std::vector<hsize_t>{n} : std::vector<hsize_t>{n, width});
      },
      widths);
}

void write_tasks(hdf5::FileWriter& w, const std::vector<TaskRecord>& tasks) {
  {
    Hid group = w.group(w.root(), "tasks");
    w.string_dataset(group.get(), "name", column(tasks, [](const TaskRecord& t) { return t.name; }));
    w.dataset(group.get(), "rows", column(tasks, [](const TaskRecord& t) { return t.rows; }));
    w.dataset(group.get(), "rows_per_chunk", column(tasks, [](const TaskRecord& t) { return t.rows_per_chunk; }));
    // Left out when every task is one tensor (every recipe but W8A8): 184 KB less in each
    // save of a 46K-task plan. Reads as ones.
    const bool stacked = std::any_of(tasks.begin(), tasks.end(), [](const TaskRecord& t) { return t.stacked_tensors != 1; });
    if (stacked) w.dataset(group.get(), "stacked_tensors", column(tasks, [](const TaskRecord& t) { return t.stacked_tensors; }));
    w.dataset(group.get(), "chunks", column(tasks, [](const TaskRecord& t) { return uint64_t(t.chunks.size()); }));
    w.dataset(group.get(), "reductions", column(tasks, [](const TaskRecord& t) { return uint64_t(t.reductions.size()); }));
  }
  {
    Hid group = w.group(w.root(), "reductions");
    w.dataset(group.get(), "done", records_column(tasks, reductions_of, [](const ReduceRecord& r) { return r.done; }));
    w.dataset(group.get(), "value", records_column(tasks, reductions_of, [](const ReduceRecord& r) { return r.value; }));
  }
  Hid group = w.group(w.root(), "chunks");
  w.dataset(group.get(), "state", records_column(tasks, chunks_of, [](const ChunkRecord& c) { return c.state; }));
  w.dataset(group.get(), "checksum", records_column(tasks, chunks_of, [](const ChunkRecord& c) { return c.checksum; }));
  w.dataset(group.get(), "seconds", records_column(tasks, chunks_of, [](const ChunkRecord& c) { return c.seconds; }));
  write_chunk_stats(w, group.get(), tasks);
}

// /blobs: the names and the digest; with_data: the arrays too (the blob file).
void write_blobs(hdf5::FileWriter& w, const std::vector<Blob>& blobs, uint64_t digest, bool with_data) {
  Hid group = w.group(w.root(), "blobs");
  w.string_dataset(group.get(), "names", column(blobs, [](const Blob& b) { return b.name; }));
  w.scalar_attr(group.get(), "digest", digest);
  if (!with_data) return;
  for (size_t i = 0; i < blobs.size(); ++i) {
    const std::vector<hsize_t> shape(blobs[i].shape.begin(), blobs[i].shape.end());
    w.dataset(group.get(), std::to_string(i), blobs[i].values, shape);
  }
}

uint64_t shape_elements(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t dim : shape) n *= dim;
  return n;
}

// ---------------------------------------------------------------- reading

std::vector<std::pair<std::string, std::string>> read_fingerprint(hdf5::FileReader& r) {
  Hid group = r.group(r.root(), "fingerprint");
  std::vector<std::string> names;
  const auto collect = [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->emplace_back(name);
    return 0;
  };
  if (H5Aiterate2(group.get(), H5_INDEX_CRT_ORDER, H5_ITER_INC, nullptr, collect, &names) < 0)
    r.fail("fingerprint", "cannot list the fields");
  std::vector<std::pair<std::string, std::string>> fingerprint;
  for (const auto& name : names) fingerprint.emplace_back(name, r.string_attr(group.get(), name));
  return fingerprint;
}

void read_chunk_stats(hdf5::FileReader& r, hid_t chunks_group, std::vector<ChunkRecord>& chunks) {
  Hid group = r.group(chunks_group, "stats");
  const size_t n = chunks.size();
  ChunkStats widths;
  std::vector<std::vector<uint64_t>> columns(stat_fields()); // in for_each_stat order
  for_each_stat_indexed(
      [&](size_t field, const char* name, const auto& width_of) {
        const hsize_t width = field_width(width_of);
        if (!r.exists(group.get(), name)) { // left out: every word zero
          columns[field].assign(n * width, 0);
          return;
        }
        hsize_t leading = 0;
        columns[field] = r.dataset<uint64_t>(group.get(), name, width == 1 ? std::vector<hsize_t>{} : std::vector<hsize_t>{width}, &leading);
        if (leading != n) r.fail(std::string("/chunks/stats/") + name, "expected " + std::to_string(n) + " chunks");
      },
      widths);
  std::vector<size_t> at(columns.size(), 0);
  for (auto& chunk : chunks) {
    for_each_stat_indexed([&](size_t field, const char*, auto& into) { read_words(into, [&] { return columns[field][at[field]++]; }); },
                          chunk.stats);
  }
}

// Splits the concatenated records back into tasks by their per-task counts.
template <class Record>
void distribute(hdf5::FileReader& r, const std::vector<Record>& all, const std::vector<uint64_t>& counts,
                std::vector<TaskRecord>& tasks, std::vector<Record> TaskRecord::*member, const char* what) {
  uint64_t at = 0;
  for (size_t t = 0; t < tasks.size(); ++t) {
    if (counts[t] > all.size() - at) r.fail(what, "fewer records than the tasks' counts");
    (tasks[t].*member).assign(all.begin() + long(at), all.begin() + long(at + counts[t]));
    at += counts[t];
  }
  if (at != all.size()) r.fail(what, "more records than the tasks' counts");
}

std::vector<TaskRecord> read_tasks(hdf5::FileReader& r) {
  Hid group = r.group(r.root(), "tasks");
  const auto names = r.string_dataset(group.get(), "name");
  const auto rows = r.dataset<uint64_t>(group.get(), "rows");
  const auto rows_per_chunk = r.dataset<uint64_t>(group.get(), "rows_per_chunk");
  const size_t n = names.size();
  const auto stacked_tensors = r.exists(group.get(), "stacked_tensors") ? r.dataset<uint32_t>(group.get(), "stacked_tensors")
                                                                        : std::vector<uint32_t>(n, 1);
  const auto chunk_counts = r.dataset<uint64_t>(group.get(), "chunks");
  const auto reduction_counts = r.dataset<uint64_t>(group.get(), "reductions");
  if (rows.size() != n || rows_per_chunk.size() != n || stacked_tensors.size() != n || chunk_counts.size() != n ||
      reduction_counts.size() != n)
    r.fail("/tasks", "columns differ in length");
  std::vector<TaskRecord> tasks(n);
  for (size_t t = 0; t < n; ++t) tasks[t] = {names[t], rows[t], rows_per_chunk[t], stacked_tensors[t], {}, {}};

  Hid reductions_group = r.group(r.root(), "reductions");
  const auto done = r.dataset<uint8_t>(reductions_group.get(), "done");
  const auto value = r.dataset<float>(reductions_group.get(), "value");
  if (done.size() != value.size()) r.fail("/reductions", "done and value differ in length");
  std::vector<ReduceRecord> reductions(done.size());
  for (size_t i = 0; i < done.size(); ++i) reductions[i] = {done[i], value[i]};
  distribute(r, reductions, reduction_counts, tasks, &TaskRecord::reductions, "/reductions");

  Hid chunks_group = r.group(r.root(), "chunks");
  const auto state = r.dataset<uint8_t>(chunks_group.get(), "state");
  const auto checksum = r.dataset<uint64_t>(chunks_group.get(), "checksum");
  const auto seconds = r.dataset<double>(chunks_group.get(), "seconds");
  if (checksum.size() != state.size() || seconds.size() != state.size())
    r.fail("/chunks", "state, checksum and seconds differ in length");
  std::vector<ChunkRecord> chunks(state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    chunks[i].state = state[i];
    chunks[i].checksum = checksum[i];
    chunks[i].seconds = seconds[i];
  }
  read_chunk_stats(r, chunks_group.get(), chunks);
  distribute(r, chunks, chunk_counts, tasks, &TaskRecord::chunks, "/chunks");
  return tasks;
}

// The blob file's arrays, in the order of its names.
std::vector<Blob> read_blob_data(hdf5::FileReader& r) {
  Hid group = r.group(r.root(), "blobs");
  std::vector<Blob> blobs;
  const auto names = r.string_dataset(group.get(), "names");
  for (size_t i = 0; i < names.size(); ++i) {
    Blob b;
    b.name = names[i];
    b.values = r.dataset_any_shape(group.get(), std::to_string(i), b.shape);
    blobs.push_back(std::move(b));
  }
  return blobs;
}

// The generation's blobs: none, or the first ones of `checkpoint`'s blob file, which must
// be the names and the digest the generation recorded (returned in `digest`). The file may
// hold more: a run only adds blobs, and the file that holds a new factor set is put in
// place before the generation that records it, so .prev (and, killed in between, the
// newest) records a prefix of the file's.
std::vector<Blob> read_blobs(hdf5::FileReader& r, const fs::path& checkpoint, uint64_t& digest) {
  Hid group = r.group(r.root(), "blobs");
  const auto names = r.string_dataset(group.get(), "names");
  digest = r.scalar_attr<uint64_t>(group.get(), "digest");
  if (names.empty()) return {};
  const fs::path file = blobs_file(checkpoint);
  std::error_code ec;
  if (!fs::exists(file, ec)) throw PipelineError(checkpoint.string() + ": its blob file " + file.string() + " is missing");
  hdf5::FileReader blob_reader(file);
  auto blobs = read_blob_data(blob_reader);
  if (blobs.size() > names.size()) blobs.resize(names.size());
  const bool same_names = std::equal(names.begin(), names.end(), blobs.begin(), blobs.end(),
                                     [](const std::string& name, const Blob& b) { return b.name == name; });
  if (!same_names || blobs_digest(blobs) != digest)
    throw PipelineError(checkpoint.string() + ": its blob file " + file.string() + " holds other blobs than this generation recorded");
  return blobs;
}

} // namespace

void validate_for_save(const fs::path& path, const CheckpointState& state) {
  const auto refuse = [&](const std::string& what) { throw PipelineError("checkpoint " + path.string() + ": " + what); };
  const auto check_text = [&](const std::string& s, const std::string& what) {
    if (s.find('\0') != std::string::npos) refuse(what + " contains a NUL byte");
  };
  std::set<std::string> fields;
  for (const auto& [field, value] : state.fingerprint) {
    if (field.empty() || !fields.insert(field).second) refuse("fingerprint field '" + field + "' is empty or repeated");
    check_text(field, "fingerprint field");
    check_text(value, "fingerprint field '" + field + "'");
  }
  for (const auto& t : state.tasks) check_text(t.name, "task name");
  for (const auto& s : state.finished) check_text(s, "finished step");
  std::set<std::string> names;
  for (const auto& b : state.blobs) {
    check_text(b.name, "blob name");
    if (!names.insert(b.name).second) refuse("blob '" + b.name + "' appears twice");
    if (b.shape.empty() || b.values.size() != shape_elements(b.shape))
      refuse("blob '" + b.name + "' has " + std::to_string(b.values.size()) + " values, its shape " +
             std::to_string(shape_elements(b.shape)));
  }
}

void write_generation(const fs::path& path, const CheckpointState& state, uint64_t blobs_digest_value) {
  hdf5::FileWriter w(path);
  const hid_t root = w.root();
  w.scalar_attr(root, "format_version", kCheckpointFormatVersion);
  w.scalar_attr(root, "generation", state.generation);
  w.scalar_attr(root, "checksum", checksum_with_blobs(state, blobs_digest_value));
  w.scalar_attr(root, "elapsed_seconds", state.elapsed_seconds);
  w.scalar_attr(root, "updated_unix", state.updated_unix);
  {
    Hid fingerprint = w.group(root, "fingerprint", /*ordered_attributes=*/true);
    for (const auto& [field, value] : state.fingerprint) w.string_attr(fingerprint.get(), field, value);
  }
  write_tasks(w, state.tasks);
  write_blobs(w, state.blobs, blobs_digest_value, /*with_data=*/false);
  w.string_dataset(root, "finished", state.finished);
  w.close();
}

void write_blob_file(const fs::path& file, const std::vector<Blob>& blobs, uint64_t digest) {
  hdf5::FileWriter w(file);
  w.scalar_attr(w.root(), "format_version", kCheckpointFormatVersion);
  write_blobs(w, blobs, digest, /*with_data=*/true);
  w.close();
}

std::optional<uint64_t> stored_blobs_digest(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  try {
    hdf5::FileReader r(file);
    Hid group = r.group(r.root(), "blobs");
    return r.scalar_attr<uint64_t>(group.get(), "digest");
  } catch (const PipelineError&) {
    return std::nullopt;
  }
}

VersionMismatch::VersionMismatch(const fs::path& file, uint32_t version)
    : PipelineError(file.string() + " has checkpoint format version " + std::to_string(version) + "; this shardq (" +
                    SHARDQ_VERSION + ") reads version " + std::to_string(kCheckpointFormatVersion) +
                    ": finish the run with the shardq that started it, or start over with --fresh") {}

CheckpointState read_generation(const fs::path& path, const fs::path& checkpoint) {
  hdf5::FileReader r(path);
  const hid_t root = r.root();
  const auto version = r.scalar_attr<uint32_t>(root, "format_version");
  if (version != kCheckpointFormatVersion) throw VersionMismatch(path, version);
  CheckpointState state;
  state.generation = r.scalar_attr<uint64_t>(root, "generation");
  state.elapsed_seconds = r.scalar_attr<double>(root, "elapsed_seconds");
  state.updated_unix = r.scalar_attr<int64_t>(root, "updated_unix");
  const auto stored_checksum = r.scalar_attr<uint64_t>(root, "checksum");
  state.fingerprint = read_fingerprint(r);
  state.tasks = read_tasks(r);
  uint64_t stored_digest = 0;
  state.blobs = read_blobs(r, checkpoint, stored_digest);
  state.finished = r.string_dataset(root, "finished");
  // With blobs, read_blobs checked them against stored_digest; without, it is the
  // generation's own field and the checksum checks it.
  const uint64_t content_checksum = checksum_with_blobs(state, stored_digest);
  if (content_checksum != stored_checksum) {
    char buffer[96];
    std::snprintf(buffer, sizeof buffer, "checksum mismatch: stored %016llx, content %016llx",
                  (unsigned long long)stored_checksum, (unsigned long long)content_checksum);
    throw PipelineError(path.string() + ": " + buffer);
  }
  return state;
}
} // namespace shardq
