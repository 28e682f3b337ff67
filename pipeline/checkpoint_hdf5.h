// The HDF5 calls the checkpoint's files are made of (docs/checkpoint.md "Layout"):
// identifiers closed at scope end, the file type of each C type, and a writer and a
// reader of one file whose every failure throws PipelineError naming the file, the object
// and HDF5's own reason. Serial HDF5: one thread (rank 0's main thread).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace shardq::hdf5 {

// Starts the library once, its error printing off (errors become PipelineError) and file
// locking off where H5Pset_file_locking is missing (before 1.10.7).
void init();

// The innermost message of HDF5's error stack (e.g. "truncated file: eof = ..."), then cleared.
std::string reason();

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
  herr_t close() { return closer_(std::exchange(id_, -1)); } // a file's close flushes: its result matters

 private:
  hid_t id_;
  herr_t (*closer_)(hid_t);
};

// The memory and the (little-endian) file type of each value type the checkpoint stores.
template <class T> struct Types;
template <> struct Types<uint8_t> {
  static hid_t mem() { return H5T_NATIVE_UINT8; }
  static hid_t file() { return H5T_STD_U8LE; }
};
template <> struct Types<uint32_t> {
  static hid_t mem() { return H5T_NATIVE_UINT32; }
  static hid_t file() { return H5T_STD_U32LE; }
};
template <> struct Types<uint64_t> {
  static hid_t mem() { return H5T_NATIVE_UINT64; }
  static hid_t file() { return H5T_STD_U64LE; }
};
template <> struct Types<int64_t> {
  static hid_t mem() { return H5T_NATIVE_INT64; }
  static hid_t file() { return H5T_STD_I64LE; }
};
template <> struct Types<float> {
  static hid_t mem() { return H5T_NATIVE_FLOAT; }
  static hid_t file() { return H5T_IEEE_F32LE; }
};
template <> struct Types<double> {
  static hid_t mem() { return H5T_NATIVE_DOUBLE; }
  static hid_t file() { return H5T_IEEE_F64LE; }
};

// Creates one file (truncating) and writes groups, attributes and datasets into it.
class FileWriter {
 public:
  explicit FileWriter(const std::filesystem::path& path);

  hid_t root() const { return file_.get(); }
  Hid group(hid_t parent, const std::string& name, bool ordered_attributes = false);

  template <class T> void scalar_attr(hid_t obj, const std::string& name, T value) {
    Hid space(H5Screate(H5S_SCALAR), H5Sclose);
    write_attr(obj, name, Types<T>::file(), Types<T>::mem(), space.get(), &value);
  }
  void string_attr(hid_t obj, const std::string& name, const std::string& value);

  // dims empty: one dimension, values.size().
  template <class T>
  void dataset(hid_t parent, const std::string& name, const std::vector<T>& values, std::vector<hsize_t> dims = {}) {
    if (dims.empty()) dims = {values.size()};
    Hid space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
    write_dataset(parent, name, Types<T>::file(), Types<T>::mem(), space.get(), values.data(), values.empty());
  }
  // Fixed-length strings as wide as the longest.
  void string_dataset(hid_t parent, const std::string& name, const std::vector<std::string>& values);

  void close();
  [[noreturn]] void fail(const std::string& object, const std::string& what) const;

 private:
  void write_attr(hid_t obj, const std::string& name, hid_t ftype, hid_t mtype, hid_t space, const void* data);
  void write_dataset(hid_t parent, const std::string& name, hid_t ftype, hid_t mtype, hid_t space, const void* data,
                     bool empty);

  std::string path_;
  Hid file_;
};

// Opens one file read-only; shapes are checked before any buffer is sized from them.
class FileReader {
 public:
  explicit FileReader(const std::filesystem::path& path);

  hid_t root() const { return file_.get(); }
  Hid group(hid_t parent, const std::string& name);

  template <class T> T scalar_attr(hid_t obj, const std::string& name) {
    Hid attr = open_attr(obj, name);
    T value{};
    if (H5Aread(attr.get(), Types<T>::mem(), &value) < 0) fail("attribute '" + name + "'", "cannot read");
    return value;
  }
  std::string string_attr(hid_t obj, const std::string& name);
  bool exists(hid_t parent, const std::string& name); // a link of that name in parent

  // A dataset of shape {n, tail...}: checks rank and tail, returns the values and n.
  template <class T>
  std::vector<T> dataset(hid_t parent, const std::string& name, const std::vector<hsize_t>& tail = {},
                         hsize_t* leading = nullptr) {
    Hid set = open_dataset(parent, name);
    const hsize_t count = element_count(set.get(), name, tail, leading);
    std::vector<T> values(count);
    if (count > 0 && H5Dread(set.get(), Types<T>::mem(), H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
      fail(name, "cannot read");
    return values;
  }
  // A dataset of any rank: its values and its shape.
  std::vector<double> dataset_any_shape(hid_t parent, const std::string& name, std::vector<uint64_t>& shape);
  std::vector<std::string> string_dataset(hid_t parent, const std::string& name);

  [[noreturn]] void fail(const std::string& object, const std::string& what) const;

 private:
  Hid open_attr(hid_t obj, const std::string& name);
  Hid open_dataset(hid_t parent, const std::string& name);
  hsize_t element_count(hid_t set, const std::string& name, const std::vector<hsize_t>& tail, hsize_t* leading);
  size_t fixed_string_width(hid_t type, const std::string& object);

  std::string path_;
  Hid file_;
};

} // namespace shardq::hdf5
