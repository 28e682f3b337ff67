#include "pipeline/checkpoint_hdf5.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "pipeline/pipeline_error.h"

namespace shardq::hdf5 {
namespace {

herr_t take_most_specific(unsigned n, const H5E_error2_t* err, void* out) {
  if (n == 0) *static_cast<std::string*>(out) = err->desc ? err->desc : "";
  return 0;
}

Hid file_access_plist() {
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  // v18 bounds: metadata blocks carry HDF5's own checksums and 1.8+ tools read the file.
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

} // namespace

void init() {
  static const bool done = [] {
#if !H5_VERSION_GE(1, 10, 7)
    // No H5Pset_file_locking before 1.10.7: the variable is read when the library starts.
    setenv("HDF5_USE_FILE_LOCKING", "FALSE", 0);
#endif
    H5open();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

std::string reason() {
  std::string reason;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, take_most_specific, &reason);
  H5Eclear2(H5E_DEFAULT);
  return reason.empty() ? "HDF5 error" : reason;
}

// ---------------------------------------------------------------- FileWriter

FileWriter::FileWriter(const std::filesystem::path& path) : path_(path.string()), file_(-1, H5Fclose) {
  Hid fapl = file_access_plist();
  file_ = Hid(H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  if (!file_.ok()) fail("/", "cannot create the file");
}

Hid FileWriter::group(hid_t parent, const std::string& name, bool ordered_attributes) {
  Hid gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
  if (ordered_attributes) H5Pset_attr_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  Hid group(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
  if (!group.ok()) fail(name, "cannot create the group");
  return group;
}

void FileWriter::string_attr(hid_t obj, const std::string& name, const std::string& value) {
  Hid type = string_type(value.size() + 1);
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  write_attr(obj, name, type.get(), type.get(), space.get(), value.c_str());
}

void FileWriter::string_dataset(hid_t parent, const std::string& name, const std::vector<std::string>& values) {
  size_t width = 1;
  for (const auto& v : values) width = std::max(width, v.size() + 1);
  std::vector<char> packed(values.size() * width, '\0');
  for (size_t i = 0; i < values.size(); ++i) std::memcpy(&packed[i * width], values[i].data(), values[i].size());
  Hid type = string_type(width);
  const hsize_t dims[1] = {values.size()};
  Hid space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  write_dataset(parent, name, type.get(), type.get(), space.get(), packed.data(), values.empty());
}

void FileWriter::close() {
  if (file_.close() < 0) fail("/", "cannot close (flush) the file");
}

void FileWriter::fail(const std::string& object, const std::string& what) const {
  throw PipelineError("checkpoint " + path_ + ": " + object + ": " + what + " (" + reason() + ")");
}

void FileWriter::write_attr(hid_t obj, const std::string& name, hid_t ftype, hid_t mtype, hid_t space,
                            const void* data) {
  Hid attr(H5Acreate2(obj, name.c_str(), ftype, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.ok()) fail("attribute '" + name + "'", "cannot create");
  const bool empty = H5Sget_simple_extent_npoints(space) == 0; // HDF5 refuses a null buffer even then
  if (!empty && H5Awrite(attr.get(), mtype, data) < 0) fail("attribute '" + name + "'", "cannot write");
}

void FileWriter::write_dataset(hid_t parent, const std::string& name, hid_t ftype, hid_t mtype, hid_t space,
                               const void* data, bool empty) {
  Hid set(H5Dcreate2(parent, name.c_str(), ftype, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!set.ok()) fail(name, "cannot create the dataset");
  if (!empty && H5Dwrite(set.get(), mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) fail(name, "cannot write");
}

// ---------------------------------------------------------------- FileReader

FileReader::FileReader(const std::filesystem::path& path) : path_(path.string()), file_(-1, H5Fclose) {
  Hid fapl = file_access_plist();
  file_ = Hid(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!file_.ok()) fail("/", "not a readable HDF5 file");
}

Hid FileReader::group(hid_t parent, const std::string& name) {
  Hid group(H5Gopen2(parent, name.c_str(), H5P_DEFAULT), H5Gclose);
  if (!group.ok()) fail(name, "missing group");
  return group;
}

std::string FileReader::string_attr(hid_t obj, const std::string& name) {
  Hid attr = open_attr(obj, name);
  Hid type(H5Aget_type(attr.get()), H5Tclose);
  const size_t width = fixed_string_width(type.get(), "attribute '" + name + "'");
  std::vector<char> buffer(width, '\0');
  if (H5Aread(attr.get(), type.get(), buffer.data()) < 0) fail("attribute '" + name + "'", "cannot read");
  return std::string(buffer.data(), strnlen(buffer.data(), width));
}

std::vector<double> FileReader::dataset_any_shape(hid_t parent, const std::string& name, std::vector<uint64_t>& shape) {
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

std::vector<std::string> FileReader::string_dataset(hid_t parent, const std::string& name) {
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

void FileReader::fail(const std::string& object, const std::string& what) const {
  throw PipelineError(path_ + ": " + object + ": " + what + " (" + reason() + ")");
}

Hid FileReader::open_attr(hid_t obj, const std::string& name) {
  Hid attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!attr.ok()) fail("attribute '" + name + "'", "missing");
  return attr;
}

bool FileReader::exists(hid_t parent, const std::string& name) {
  const htri_t found = H5Lexists(parent, name.c_str(), H5P_DEFAULT);
  if (found < 0) fail(name, "cannot look up");
  return found > 0;
}

Hid FileReader::open_dataset(hid_t parent, const std::string& name) {
  Hid set(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!set.ok()) fail(name, "missing dataset");
  return set;
}

hsize_t FileReader::element_count(hid_t set, const std::string& name, const std::vector<hsize_t>& tail,
                                  hsize_t* leading) {
  Hid space(H5Dget_space(set), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank != int(tail.size()) + 1) fail(name, "expected rank " + std::to_string(tail.size() + 1));
  std::vector<hsize_t> dims(size_t(rank), 0);
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  hsize_t count = dims[0];
  for (size_t i = 0; i < tail.size(); ++i) {
    if (dims[i + 1] != tail[i])
      fail(name, "dimension " + std::to_string(i + 1) + " is " + std::to_string(dims[i + 1]) + ", expected " +
                     std::to_string(tail[i]));
    count *= tail[i];
  }
  if (leading) *leading = dims[0];
  return count;
}

size_t FileReader::fixed_string_width(hid_t type, const std::string& object) {
  if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) != 0) fail(object, "expected a fixed-length string");
  return H5Tget_size(type);
}

} // namespace shardq::hdf5
