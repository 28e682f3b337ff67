// HDF5 run checkpoint: layout, crash-atomic save, checked load with fallback.
//
// Layout (h5dump shows it; libver bounds v18 so metadata blocks carry HDF5's own
// checksums and 1.8+ tools read it). Records are flat columns over all tasks, so a plan
// of 50K small tasks costs a few datasets, not 50K groups:
//   /                      attrs format_version u32, generation u64, checksum u64,
//                          elapsed_seconds f64, updated_unix i64
//   /fingerprint           one string attribute per field, in creation order
//   /tasks                 name str[T], rows u64[T], rows_per_chunk u64[T],
//                          chunks u64[T], reductions u64[T] (counts per task, in order)
//   /reductions            done u8[R], value f32[R] (tasks' reduction records, concatenated)
//   /chunks                state u8[C], checksum u64[C], seconds f64[C], stats/<field>
//                          (u64[C] counters, candidate_wins u64[C,16], *_sq u64[C,2]
//                          ExactSum: high, low words)
//   /blobs                 names str[B], attr digest u64 (xxh3 of the blobs)
//   /finished              fixed-length strings [m]
//
// The blobs themselves (/blobs/<i> f64 with attrs name and shape; a GPTQ factor set is
// ~25 MB) live in PATH.blobs, written once when they first appear in a saved state: a save
// then costs the per-chunk state, not every blob again. A generation whose blob file is
// missing or holds other blobs (digest) is unusable.
#include "pipeline/checkpoint.h"
#include "pipeline/checkpoint_journal.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <utility>

namespace shardq {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- HDF5 plumbing

void init_hdf5() {
  static const bool done = [] {
#if !H5_VERSION_GE(1, 10, 7)
    // No H5Pset_file_locking before 1.10.7: the variable is read when the library starts.
    setenv("HDF5_USE_FILE_LOCKING", "FALSE", 0);
#endif
    H5open();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); // errors become PipelineError, not stderr
    return true;
  }();
  (void)done;
}

herr_t take_most_specific(unsigned n, const H5E_error2_t* err, void* out) {
  if (n == 0) *static_cast<std::string*>(out) = err->desc ? err->desc : "";
  return 0;
}

// The innermost message of HDF5's error stack (e.g. "truncated file: eof = ..."), then cleared.
std::string hdf5_reason() {
  std::string reason;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, take_most_specific, &reason);
  H5Eclear2(H5E_DEFAULT);
  return reason.empty() ? "HDF5 error" : reason;
}

// An HDF5 identifier closed at scope end with its matching close function.
class Hid {
 public:
  Hid(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  Hid(Hid&& other) noexcept : id_(std::exchange(other.id_, -1)), closer_(other.closer_) {}
  Hid& operator=(Hid&& other) noexcept {
    std::swap(id_, other.id_);
    std::swap(closer_, other.closer_);
    return *this;
  }
  ~Hid() {
    if (id_ >= 0) closer_(id_);
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  herr_t close() { // for the file: its close flushes, and that result matters
    const herr_t status = closer_(std::exchange(id_, -1));
    return status;
  }

 private:
  hid_t id_;
  herr_t (*closer_)(hid_t);
};

template <class T> struct H5Types;
template <> struct H5Types<uint8_t> {
  static hid_t mem() { return H5T_NATIVE_UINT8; }
  static hid_t file() { return H5T_STD_U8LE; }
};
template <> struct H5Types<uint32_t> {
  static hid_t mem() { return H5T_NATIVE_UINT32; }
  static hid_t file() { return H5T_STD_U32LE; }
};
template <> struct H5Types<int32_t> {
  static hid_t mem() { return H5T_NATIVE_INT32; }
  static hid_t file() { return H5T_STD_I32LE; }
};
template <> struct H5Types<uint64_t> {
  static hid_t mem() { return H5T_NATIVE_UINT64; }
  static hid_t file() { return H5T_STD_U64LE; }
};
template <> struct H5Types<int64_t> {
  static hid_t mem() { return H5T_NATIVE_INT64; }
  static hid_t file() { return H5T_STD_I64LE; }
};
template <> struct H5Types<float> {
  static hid_t mem() { return H5T_NATIVE_FLOAT; }
  static hid_t file() { return H5T_IEEE_F32LE; }
};
template <> struct H5Types<double> {
  static hid_t mem() { return H5T_NATIVE_DOUBLE; }
  static hid_t file() { return H5T_IEEE_F64LE; }
};

Hid file_access_plist() {
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18);
#if H5_VERSION_GE(1, 10, 7)
  H5Pset_file_locking(fapl.get(), false, true); // NFS, and status reading during a run
#endif
  return fapl;
}

Hid string_type(size_t size) {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), size);
  H5Tset_strpad(type.get(), H5T_STR_NULLTERM);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  return type;
}

// Writes one file; every failure names the file and the object.
class Writer {
 public:
  explicit Writer(const fs::path& path) : path_(path.string()), file_(-1, H5Fclose) {
    Hid fapl = file_access_plist();
    file_ = Hid(H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    if (!file_.ok()) fail("/", "cannot create the file");
  }

  hid_t root() const { return file_.get(); }

  Hid group(hid_t parent, const std::string& name, bool ordered_attributes = false) {
    Hid gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
    if (ordered_attributes) H5Pset_attr_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    Hid group(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
    if (!group.ok()) fail(name, "cannot create the group");
    return group;
  }

  template <class T> void scalar_attr(hid_t obj, const std::string& name, T value) {
    Hid space(H5Screate(H5S_SCALAR), H5Sclose);
    write_attr(obj, name, H5Types<T>::file(), H5Types<T>::mem(), space.get(), &value);
  }

  template <class T> void array_attr(hid_t obj, const std::string& name, const std::vector<T>& values) {
    const hsize_t dims[1] = {values.size()};
    Hid space(H5Screate_simple(1, dims, nullptr), H5Sclose);
    write_attr(obj, name, H5Types<T>::file(), H5Types<T>::mem(), space.get(), values.data());
  }

  void string_attr(hid_t obj, const std::string& name, const std::string& value) {
    Hid type = string_type(value.size() + 1);
    Hid space(H5Screate(H5S_SCALAR), H5Sclose);
    write_attr(obj, name, type.get(), type.get(), space.get(), value.c_str());
  }

  template <class T>
  void dataset(hid_t parent, const std::string& name, const std::vector<T>& values, std::vector<hsize_t> dims = {}) {
    if (dims.empty()) dims = {values.size()};
    Hid space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
    write_dataset(parent, name, H5Types<T>::file(), H5Types<T>::mem(), space.get(), values.data(), values.empty());
  }

  void string_dataset(hid_t parent, const std::string& name, const std::vector<std::string>& values) {
    size_t width = 1;
    for (const auto& v : values) width = std::max(width, v.size() + 1);
    std::vector<char> packed(values.size() * width, '\0');
    for (size_t i = 0; i < values.size(); ++i) std::memcpy(&packed[i * width], values[i].data(), values[i].size());
    Hid type = string_type(width);
    const hsize_t dims[1] = {values.size()};
    Hid space(H5Screate_simple(1, dims, nullptr), H5Sclose);
    write_dataset(parent, name, type.get(), type.get(), space.get(), packed.data(), values.empty());
  }

  void close() {
    if (file_.close() < 0) fail("/", "cannot close (flush) the file");
  }

  [[noreturn]] void fail(const std::string& object, const std::string& what) const {
    throw PipelineError("checkpoint " + path_ + ": " + object + ": " + what + " (" + hdf5_reason() + ")");
  }

 private:
  void write_attr(hid_t obj, const std::string& name, hid_t ftype, hid_t mtype, hid_t space, const void* data) {
    Hid attr(H5Acreate2(obj, name.c_str(), ftype, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (!attr.ok()) fail("attribute '" + name + "'", "cannot create");
    const bool empty = H5Sget_simple_extent_npoints(space) == 0; // HDF5 refuses a null buffer even then
    if (!empty && H5Awrite(attr.get(), mtype, data) < 0) fail("attribute '" + name + "'", "cannot write");
  }

  void write_dataset(hid_t parent, const std::string& name, hid_t ftype, hid_t mtype, hid_t space, const void* data,
                     bool empty) {
    Hid set(H5Dcreate2(parent, name.c_str(), ftype, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    if (!set.ok()) fail(name, "cannot create the dataset");
    if (!empty && H5Dwrite(set.get(), mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) fail(name, "cannot write");
  }

  std::string path_;
  Hid file_;
};

// Reads one file; shapes are checked before any buffer is sized from them.
class Reader {
 public:
  explicit Reader(const fs::path& path) : path_(path.string()), file_(-1, H5Fclose) {
    Hid fapl = file_access_plist();
    file_ = Hid(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
    if (!file_.ok()) fail("/", "not a readable HDF5 file");
  }

  hid_t root() const { return file_.get(); }

  Hid group(hid_t parent, const std::string& name) {
    Hid group(H5Gopen2(parent, name.c_str(), H5P_DEFAULT), H5Gclose);
    if (!group.ok()) fail(name, "missing group");
    return group;
  }

  template <class T> T scalar_attr(hid_t obj, const std::string& name) {
    Hid attr = open_attr(obj, name);
    T value{};
    if (H5Aread(attr.get(), H5Types<T>::mem(), &value) < 0) fail("attribute '" + name + "'", "cannot read");
    return value;
  }

  template <class T> std::vector<T> array_attr(hid_t obj, const std::string& name) {
    Hid attr = open_attr(obj, name);
    Hid space(H5Aget_space(attr.get()), H5Sclose);
    std::vector<T> values(extent_1d(space.get(), "attribute '" + name + "'"));
    if (!values.empty() && H5Aread(attr.get(), H5Types<T>::mem(), values.data()) < 0)
      fail("attribute '" + name + "'", "cannot read");
    return values;
  }

  std::string string_attr(hid_t obj, const std::string& name) {
    Hid attr = open_attr(obj, name);
    Hid type(H5Aget_type(attr.get()), H5Tclose);
    const size_t width = fixed_string_width(type.get(), "attribute '" + name + "'");
    std::vector<char> buffer(width, '\0');
    if (H5Aread(attr.get(), type.get(), buffer.data()) < 0) fail("attribute '" + name + "'", "cannot read");
    return std::string(buffer.data(), strnlen(buffer.data(), width));
  }

  // A dataset of shape {n, tail...}: checks rank and tail, returns the values and n.
  template <class T>
  std::vector<T> dataset(hid_t parent, const std::string& name, const std::vector<hsize_t>& tail = {},
                         hsize_t* leading = nullptr) {
    Hid set = open_dataset(parent, name);
    const hsize_t count = element_count(set.get(), name, tail, leading);
    std::vector<T> values(count);
    if (count > 0 && H5Dread(set.get(), H5Types<T>::mem(), H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
      fail(name, "cannot read");
    return values;
  }

  // A dataset of any rank: its values and its shape.
  std::vector<double> dataset_any_shape(hid_t parent, const std::string& name, std::vector<uint64_t>& shape) {
    Hid set = open_dataset(parent, name);
    Hid space(H5Dget_space(set.get()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 1 || rank > 8) fail(name, "expected rank 1 to 8");
    std::vector<hsize_t> dims(size_t(rank), 0);
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    shape.assign(dims.begin(), dims.end());
    std::vector<double> values(size_t(H5Sget_simple_extent_npoints(space.get())));
    if (!values.empty() && H5Dread(set.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
      fail(name, "cannot read");
    return values;
  }

  std::vector<std::string> string_dataset(hid_t parent, const std::string& name) {
    Hid set = open_dataset(parent, name);
    const hsize_t count = element_count(set.get(), name, {}, nullptr);
    Hid type(H5Dget_type(set.get()), H5Tclose);
    const size_t width = fixed_string_width(type.get(), name);
    std::vector<char> packed(count * width, '\0');
    if (count > 0 && H5Dread(set.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, packed.data()) < 0)
      fail(name, "cannot read");
    std::vector<std::string> values;
    for (hsize_t i = 0; i < count; ++i) values.emplace_back(&packed[i * width], strnlen(&packed[i * width], width));
    return values;
  }

  [[noreturn]] void fail(const std::string& object, const std::string& what) const {
    throw PipelineError(path_ + ": " + object + ": " + what + " (" + hdf5_reason() + ")");
  }

 private:
  Hid open_attr(hid_t obj, const std::string& name) {
    Hid attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
    if (!attr.ok()) fail("attribute '" + name + "'", "missing");
    return attr;
  }

  Hid open_dataset(hid_t parent, const std::string& name) {
    Hid set(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!set.ok()) fail(name, "missing dataset");
    return set;
  }

  hsize_t extent_1d(hid_t space, const std::string& object) {
    hsize_t dims[1] = {0};
    if (H5Sget_simple_extent_ndims(space) != 1 || H5Sget_simple_extent_dims(space, dims, nullptr) != 1)
      fail(object, "expected one dimension");
    return dims[0];
  }

  hsize_t element_count(hid_t set, const std::string& name, const std::vector<hsize_t>& tail, hsize_t* leading) {
    Hid space(H5Dget_space(set), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank != int(tail.size()) + 1) fail(name, "expected rank " + std::to_string(tail.size() + 1));
    std::vector<hsize_t> dims(size_t(rank), 0);
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    hsize_t count = dims[0];
    for (size_t i = 0; i < tail.size(); ++i) {
      if (dims[i + 1] != tail[i]) fail(name, "dimension " + std::to_string(i + 1) + " is " + std::to_string(dims[i + 1]) + ", expected " + std::to_string(tail[i]));
      count *= tail[i];
    }
    if (leading) *leading = dims[0];
    return count;
  }

  size_t fixed_string_width(hid_t type, const std::string& object) {
    if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) != 0) fail(object, "expected a fixed-length string");
    return H5Tget_size(type);
  }

  std::string path_;
  Hid file_;
};

// ---------------------------------------------------------------- canonical checksum

// Feeds fixed-width little-endian fields and length-prefixed strings to xxh3-64,
// buffered so thousands of small fields cost one pass.
class CanonicalHash {
 public:
  static_assert(std::endian::native == std::endian::little, "the canonical form is the native little-endian one");
  CanonicalHash() : state_(XXH3_createState()) { XXH3_64bits_reset(state_); }
  ~CanonicalHash() { XXH3_freeState(state_); }
  CanonicalHash(const CanonicalHash&) = delete;
  CanonicalHash& operator=(const CanonicalHash&) = delete;

  template <class T> void value(T v) { bytes(&v, sizeof v); }
  void text(const std::string& s) {
    value<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void doubles(const std::vector<double>& v) {
    value<uint64_t>(v.size());
    flush();
    XXH3_64bits_update(state_, v.data(), v.size() * sizeof(double));
  }
  uint64_t digest() {
    flush();
    return XXH3_64bits_digest(state_);
  }

 private:
  void bytes(const void* p, size_t n) {
    if (buffer_.size() + n > kBuffer) flush();
    buffer_.append(static_cast<const char*>(p), n);
  }
  void flush() {
    XXH3_64bits_update(state_, buffer_.data(), buffer_.size());
    buffer_.clear();
  }
  static constexpr size_t kBuffer = 1 << 16;
  XXH3_state_t* state_;
  std::string buffer_;
};

void hash_task(CanonicalHash& h, const TaskRecord& t) {
  h.text(t.name);
  h.value(t.rows);
  h.value(t.rows_per_chunk);
  h.value<uint64_t>(t.reductions.size());
  for (const auto& r : t.reductions) {
    h.value(r.done);
    h.value(r.value);
  }
  h.value<uint64_t>(t.chunks.size());
  for (const auto& c : t.chunks) {
    h.value(c.state);
    h.value(c.checksum);
    h.value(c.seconds);
    for_each_stat([&](const char*, const auto& field) { for_each_word(field, [&](uint64_t w) { h.value(w); }); }, c.stats);
  }
}

} // namespace

uint64_t blobs_digest(const std::vector<Blob>& blobs) {
  CanonicalHash h;
  h.text("shardq-blobs");
  h.value<uint64_t>(blobs.size());
  for (const auto& b : blobs) {
    h.text(b.name);
    h.value<uint64_t>(b.shape.size());
    for (uint64_t dim : b.shape) h.value(dim);
    h.doubles(b.values);
  }
  return h.digest();
}

std::filesystem::path blobs_file(const std::filesystem::path& checkpoint) {
  return std::filesystem::path(checkpoint.string() + ".blobs");
}

namespace {

// checkpoint_checksum with the blobs' digest already at hand (a save and a load each
// hash the blobs once, not once per use).
uint64_t checksum_with_blobs(const CheckpointState& state, uint64_t blobs_digest_value) {
  CanonicalHash h;
  h.text("shardq-checkpoint");
  h.value(kCheckpointFormatVersion);
  h.value(state.generation);
  h.value(state.elapsed_seconds);
  h.value(state.updated_unix);
  h.value<uint64_t>(state.fingerprint.size());
  for (const auto& [field, value] : state.fingerprint) {
    h.text(field);
    h.text(value);
  }
  h.value<uint64_t>(state.tasks.size());
  for (const auto& t : state.tasks) hash_task(h, t);
  h.value<uint64_t>(state.blobs.size());
  h.value(blobs_digest_value);
  h.value<uint64_t>(state.finished.size());
  for (const auto& s : state.finished) h.text(s);
  return h.digest();
}

} // namespace

uint64_t checkpoint_checksum(const CheckpointState& state) {
  return checksum_with_blobs(state, blobs_digest(state.blobs));
}

namespace {

// ---------------------------------------------------------------- writing

template <class Record, class Field> auto column(const std::vector<Record>& records, Field field) {
  std::vector<std::decay_t<decltype(field(records.front()))>> values;
  values.reserve(records.size());
  for (const auto& r : records) values.push_back(field(r));
  return values;
}

// Every task's records of one kind, concatenated in task order.
template <class Records> auto concatenated(const std::vector<TaskRecord>& tasks, Records records) {
  std::decay_t<decltype(records(tasks.front()))> all;
  for (const auto& t : tasks) all.insert(all.end(), records(t).begin(), records(t).end());
  return all;
}

// One stats field of every chunk: u64 [C] counters, u64 [C, 16] wins, u64 [C, 2] sums.
constexpr hsize_t field_width(uint64_t) { return 1; }
constexpr hsize_t field_width(const ExactSum&) { return 2; }
template <size_t N> constexpr hsize_t field_width(const std::array<uint64_t, N>&) { return N; }

void write_chunk_stats(Writer& w, hid_t chunks_group, const std::vector<ChunkRecord>& chunks) {
  Hid group = w.group(chunks_group, "stats");
  w.string_attr(group.get(), "sum_encoding", "*_sq: [high, low] u64 words of a 128-bit integer count of 2^-64");
  std::map<std::string, std::vector<uint64_t>> columns;
  for (const auto& c : chunks) {
    for_each_stat([&](const char* name, const auto& field) {
      for_each_word(field, [&](uint64_t w) { columns[name].push_back(w); });
    }, c.stats);
  }
  const hsize_t n = chunks.size();
  const ChunkStats widths;
  for_each_stat(
      [&](const char* name, const auto& field) {
        const hsize_t width = field_width(field);
        w.dataset(group.get(), name, columns[name], width == 1 ? std::vector<hsize_t>{n} : std::vector<hsize_t>{n, width});
      },
      widths);
}

void write_tasks(Writer& w, const std::vector<TaskRecord>& tasks) {
  {
    Hid group = w.group(w.root(), "tasks");
    w.string_dataset(group.get(), "name", column(tasks, [](const TaskRecord& t) { return t.name; }));
    w.dataset(group.get(), "rows", column(tasks, [](const TaskRecord& t) { return t.rows; }));
    w.dataset(group.get(), "rows_per_chunk", column(tasks, [](const TaskRecord& t) { return t.rows_per_chunk; }));
    w.dataset(group.get(), "chunks", column(tasks, [](const TaskRecord& t) { return uint64_t(t.chunks.size()); }));
    w.dataset(group.get(), "reductions", column(tasks, [](const TaskRecord& t) { return uint64_t(t.reductions.size()); }));
  }
  {
    const auto reductions = concatenated(tasks, [](const TaskRecord& t) -> const std::vector<ReduceRecord>& { return t.reductions; });
    Hid group = w.group(w.root(), "reductions");
    w.dataset(group.get(), "done", column(reductions, [](const ReduceRecord& r) { return r.done; }));
    w.dataset(group.get(), "value", column(reductions, [](const ReduceRecord& r) { return r.value; }));
  }
  const auto chunks = concatenated(tasks, [](const TaskRecord& t) -> const std::vector<ChunkRecord>& { return t.chunks; });
  Hid group = w.group(w.root(), "chunks");
  w.dataset(group.get(), "state", column(chunks, [](const ChunkRecord& c) { return c.state; }));
  w.dataset(group.get(), "checksum", column(chunks, [](const ChunkRecord& c) { return c.checksum; }));
  w.dataset(group.get(), "seconds", column(chunks, [](const ChunkRecord& c) { return c.seconds; }));
  write_chunk_stats(w, group.get(), chunks);
}

// /blobs: the names and the digest; with_data: the arrays too (the blob file).
void write_blobs(Writer& w, const std::vector<Blob>& blobs, uint64_t digest, bool with_data) {
  Hid group = w.group(w.root(), "blobs");
  w.string_dataset(group.get(), "names", column(blobs, [](const Blob& b) { return b.name; }));
  w.scalar_attr(group.get(), "digest", digest);
  if (!with_data) return;
  for (size_t i = 0; i < blobs.size(); ++i) {
    const std::vector<hsize_t> shape(blobs[i].shape.begin(), blobs[i].shape.end());
    w.dataset(group.get(), std::to_string(i), blobs[i].values, shape);
  }
}

void write_generation(const fs::path& path, const CheckpointState& state, uint64_t blobs_digest_value) {
  Writer w(path);
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

uint64_t shape_elements(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t dim : shape) n *= dim;
  return n;
}

// What HDF5 cannot store faithfully or this format does not allow, refused before writing.
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

// ---------------------------------------------------------------- durability

void fsync_path(const fs::path& path, int flags, const std::string& what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw PipelineError("checkpoint: cannot open " + what + " " + path.string() + " to fsync: " + std::strerror(errno));
  const bool synced = ::fsync(fd) == 0;
  const int sync_errno = errno;
  const bool closed = ::close(fd) == 0; // NFS reports write errors at close
  if (!synced || !closed)
    throw PipelineError("checkpoint: fsync of " + what + " " + path.string() + " failed: " +
                        std::strerror(synced ? errno : sync_errno));
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw PipelineError("checkpoint: cannot rename " + from.string() + " to " + to.string() + ": " + std::strerror(errno));
}

fs::path with_suffix(const fs::path& path, const char* suffix) { return fs::path(path.string() + suffix); }

// Makes <path>.prev the current generation while <path> stays in place: a hard link
// renamed over .prev. Where hard links are not supported, <path> itself moves to .prev
// (then, until the next rename, only .prev exists, which load_checkpoint accepts).
void keep_previous(const fs::path& path) {
  if (!fs::exists(path)) return;
  const fs::path prev = with_suffix(path, ".prev");
  const fs::path link = with_suffix(path, ".prev.tmp");
  ::unlink(link.c_str());
  if (::link(path.c_str(), link.c_str()) == 0) {
    rename_or_throw(link, prev);
    return;
  }
  rename_or_throw(path, prev);
}

fs::path parent_folder(const fs::path& path) { return path.has_parent_path() ? path.parent_path() : fs::path("."); }

// ---------------------------------------------------------------- reading

// A generation of another format version: never read, never a reason to fall back to
// .prev (which that shardq wrote too).
struct VersionMismatch : PipelineError {
  VersionMismatch(const fs::path& path, uint32_t version)
      : PipelineError(path.string() + " has checkpoint format version " + std::to_string(version) + "; this shardq (" +
                      SHARDQ_VERSION + ") reads version " + std::to_string(kCheckpointFormatVersion) +
                      ": finish the run with the shardq that started it, or start over with --fresh") {}
};

std::vector<std::pair<std::string, std::string>> read_fingerprint(Reader& r) {
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

void read_chunk_stats(Reader& r, hid_t chunks_group, std::vector<ChunkRecord>& chunks) {
  Hid group = r.group(chunks_group, "stats");
  const size_t n = chunks.size();
  ChunkStats widths;
  for_each_stat(
      [&](const char* name, auto& field) {
        const hsize_t width = field_width(field);
        hsize_t leading = 0;
        const auto values = r.dataset<uint64_t>(group.get(), name, width == 1 ? std::vector<hsize_t>{} : std::vector<hsize_t>{width}, &leading);
        if (leading != n) r.fail(std::string("/chunks/stats/") + name, "expected " + std::to_string(n) + " chunks");
        size_t at = 0;
        for (size_t i = 0; i < n; ++i) {
          for_each_stat([&](const char* other, auto& into) {
            if constexpr (std::is_same_v<decltype(field), decltype(into)>) {
              if (other == name) read_words(into, [&] { return values[at++]; });
            }
          }, chunks[i].stats);
        }
      },
      widths);
}

// Splits the concatenated records back into tasks by their per-task counts.
template <class Record>
void distribute(Reader& r, const std::vector<Record>& all, const std::vector<uint64_t>& counts,
                std::vector<TaskRecord>& tasks, std::vector<Record> TaskRecord::*member, const char* what) {
  uint64_t at = 0;
  for (size_t t = 0; t < tasks.size(); ++t) {
    if (counts[t] > all.size() - at) r.fail(what, "fewer records than the tasks' counts");
    (tasks[t].*member).assign(all.begin() + long(at), all.begin() + long(at + counts[t]));
    at += counts[t];
  }
  if (at != all.size()) r.fail(what, "more records than the tasks' counts");
}

std::vector<TaskRecord> read_tasks(Reader& r) {
  Hid group = r.group(r.root(), "tasks");
  const auto names = r.string_dataset(group.get(), "name");
  const auto rows = r.dataset<uint64_t>(group.get(), "rows");
  const auto rows_per_chunk = r.dataset<uint64_t>(group.get(), "rows_per_chunk");
  const auto chunk_counts = r.dataset<uint64_t>(group.get(), "chunks");
  const auto reduction_counts = r.dataset<uint64_t>(group.get(), "reductions");
  const size_t n = names.size();
  if (rows.size() != n || rows_per_chunk.size() != n || chunk_counts.size() != n || reduction_counts.size() != n)
    r.fail("/tasks", "columns differ in length");
  std::vector<TaskRecord> tasks(n);
  for (size_t t = 0; t < n; ++t) tasks[t] = {names[t], rows[t], rows_per_chunk[t], {}, {}};

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
std::vector<Blob> read_blob_data(Reader& r) {
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

// The generation's blobs: none, or those of `checkpoint`'s blob file, which must hold the
// names and the digest the generation recorded (returned in `digest`).
std::vector<Blob> read_blobs(Reader& r, const fs::path& checkpoint, uint64_t& digest) {
  Hid group = r.group(r.root(), "blobs");
  const auto names = r.string_dataset(group.get(), "names");
  digest = r.scalar_attr<uint64_t>(group.get(), "digest");
  if (names.empty()) return {};
  const fs::path file = blobs_file(checkpoint);
  std::error_code ec;
  if (!fs::exists(file, ec)) throw PipelineError(checkpoint.string() + ": its blob file " + file.string() + " is missing");
  Reader blob_reader(file);
  auto blobs = read_blob_data(blob_reader);
  const bool same_names = std::equal(names.begin(), names.end(), blobs.begin(), blobs.end(),
                                     [](const std::string& name, const Blob& b) { return b.name == name; });
  if (!same_names || blobs_digest(blobs) != digest)
    throw PipelineError(checkpoint.string() + ": its blob file " + file.string() + " holds other blobs than this generation recorded");
  return blobs;
}

// One generation (PATH or PATH.prev of `checkpoint`), whole and checksum-verified, or a
// PipelineError saying what is wrong.
CheckpointState read_generation(const fs::path& path, const fs::path& checkpoint) {
  Reader r(path);
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

struct Attempt {
  std::optional<CheckpointState> state;
  std::string problem; // "missing" or what is wrong
};

Attempt try_read(const fs::path& path, const fs::path& checkpoint) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return {std::nullopt, path.string() + ": missing"};
  try {
    return {read_generation(path, checkpoint), ""};
  } catch (const VersionMismatch&) {
    throw;
  } catch (const PipelineError& e) {
    return {std::nullopt, e.what()};
  }
}

} // namespace

namespace {

// Whole file at `path` through path.tmp: written and fsync'd, then before_rename() (the
// checkpoint keeps its previous generation there), renamed, and the folder fsync'd.
template <class WriteFn, class BeforeRenameFn>
void replace_file(const fs::path& path, WriteFn write, BeforeRenameFn before_rename) {
  const fs::path tmp = with_suffix(path, ".tmp");
  ::unlink(tmp.c_str());
  try {
    write(tmp);
    fsync_path(tmp, O_RDONLY, "file");
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  before_rename();
  rename_or_throw(tmp, path);
  fsync_path(parent_folder(path), O_RDONLY | O_DIRECTORY, "folder");
}

// The digest recorded in a blob file, or nullopt when there is none or it is unreadable.
std::optional<uint64_t> stored_blobs_digest(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  try {
    Reader r(file);
    Hid group = r.group(r.root(), "blobs");
    return r.scalar_attr<uint64_t>(group.get(), "digest");
  } catch (const PipelineError&) {
    return std::nullopt;
  }
}

// Writes the blob file unless it already holds these blobs (the usual case: once written,
// every later save of the run finds it and skips ~25 MB per factor set).
void ensure_blobs_file(const fs::path& checkpoint, const std::vector<Blob>& blobs, uint64_t digest) {
  if (blobs.empty()) return;
  const fs::path file = blobs_file(checkpoint);
  if (stored_blobs_digest(file) == digest) return;
  replace_file(
      file,
      [&](const fs::path& tmp) {
        Writer w(tmp);
        w.scalar_attr(w.root(), "format_version", kCheckpointFormatVersion);
        write_blobs(w, blobs, digest, /*with_data=*/true);
        w.close();
      },
      [] {});
}

} // namespace

void save_checkpoint(const fs::path& path, const CheckpointState& state) {
  save_checkpoint(path, state, blobs_digest(state.blobs));
}

void save_checkpoint(const fs::path& path, const CheckpointState& state, uint64_t blobs_digest_value) {
  init_hdf5();
  validate_for_save(path, state);
  ensure_blobs_file(path, state.blobs, blobs_digest_value);
  replace_file(
      path, [&](const fs::path& tmp) { write_generation(tmp, state, blobs_digest_value); },
      [&] { keep_previous(path); });
  reset_journal(path, state.generation); // the base holds everything: later saves append to it
}

void set_aside_unusable_newest(const fs::path& path) {
  if (!fs::exists(path)) return;
  rename_or_throw(path, with_suffix(path, ".corrupt"));
  fsync_path(parent_folder(path), O_RDONLY | O_DIRECTORY, "folder");
}

std::optional<LoadResult> load_checkpoint(const fs::path& path) {
  init_hdf5();
  const fs::path prev = with_suffix(path, ".prev");
  std::error_code ec;
  if (!fs::exists(path, ec) && !fs::exists(prev, ec)) return std::nullopt;
  Attempt newest = try_read(path, path);
  if (newest.state) {
    std::string note;
    replay_journal(path, *newest.state, note); // a journal for another base is ignored
    return LoadResult{std::move(*newest.state), false, std::move(note)};
  }
  Attempt previous = try_read(prev, path);
  if (previous.state) {
    std::string note = "newest generation unusable (" + newest.problem + "); using the previous one, " +
                       prev.string() + " (generation " + std::to_string(previous.state->generation) + ")";
    return LoadResult{std::move(*previous.state), true, std::move(note)};
  }
  throw PipelineError("checkpoint " + path.string() + " is corrupt (" + newest.problem + "; " + previous.problem +
                      "); use --fresh to start over");
}

std::string fingerprint_mismatch(const CheckpointState& stored,
                                 const std::vector<std::pair<std::string, std::string>>& current) {
  const auto value_in = [](const std::vector<std::pair<std::string, std::string>>& fields,
                           const std::string& name) -> std::optional<std::string> {
    for (const auto& [field, value] : fields)
      if (field == name) return value;
    return std::nullopt;
  };
  const std::string prefix = "checkpoint belongs to another job: field '";
  for (const auto& [field, now] : current) {
    const auto then = value_in(stored.fingerprint, field);
    if (!then) return prefix + field + "' is missing in the checkpoint but " + now + " now";
    if (*then != now) return prefix + field + "' is " + *then + " in the checkpoint but " + now + " now";
  }
  for (const auto& [field, then] : stored.fingerprint)
    if (!value_in(current, field)) return prefix + field + "' is " + then + " in the checkpoint but missing now";
  return "";
}

} // namespace shardq
