#include "pipeline/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <optional>
#include <utility>

#include "pipeline/io/direct_writer.h"
#include "pipeline/io/posix_file.h"
#include "pipeline/io/simple_header.h"
#include "pipeline/io/strict_json.h"

namespace shardq::io {

namespace {

using Json = nlohmann::ordered_json;



std::optional<uint64_t> checked_product(std::span<const uint64_t> dims) {
  uint64_t product = 1;
  for (uint64_t dim : dims) {
    if (__builtin_mul_overflow(product, dim, &product)) return std::nullopt;
  }
  return product;
}

// Bytes of `count` elements, or nullopt when count * bits overflows or is not whole bytes.
std::optional<uint64_t> checked_bytes(uint64_t count, int bits) {
  uint64_t total_bits = 0;
  if (__builtin_mul_overflow(count, uint64_t(bits), &total_bits) || total_bits % 8 != 0) return std::nullopt;
  return total_bits / 8;
}

constexpr uint64_t kMaxHeaderLength = 100'000'000;

void check_header_length(uint64_t header_length, uint64_t file_size, const std::string& label) {
  if (file_size < 8) throw IoError(fmt::format("{}: file is {} bytes, shorter than the 8-byte header length", label, file_size));
  if (header_length > kMaxHeaderLength) {
    throw IoError(fmt::format("{}: header length {} exceeds the cap of {} bytes", label, header_length, kMaxHeaderLength));
  }
  if (header_length > file_size - 8) {
    throw IoError(fmt::format("{}: header length {} reaches past the end of the file ({} bytes)", label, header_length, file_size));
  }
}

uint64_t json_u64(const Json& value, const std::string& context, std::string_view field) {
  if (!value.is_number_unsigned()) throw IoError(fmt::format("{}: {} holds {}, not a non-negative integer", context, field, value.dump()));
  return value.get<uint64_t>();
}

const Json& required_field(const Json& entry, std::string_view field, const std::string& context) {
  const auto it = entry.find(field);
  if (it == entry.end()) throw IoError(fmt::format("{}: missing '{}'", context, field));
  return *it;
}

// An entry's data_offsets against the bytes its dtype and shape need.
void check_entry_size(const TensorInfo& info, const std::string& label) {
  const auto context = [&] { return fmt::format("{}: tensor '{}'", label, info.name); };
  if (info.end < info.begin) throw IoError(fmt::format("{}: data_offsets [{}, {}) end before they begin", context(), info.begin, info.end));
  const auto numel = checked_product(info.shape);
  const auto bytes = numel ? checked_bytes(*numel, dtype_bits(info.dtype)) : std::nullopt;
  const auto described = [&] { return fmt::format("{} {}", dtype_name(info.dtype), shape_text(info.shape)); };
  if (!numel) throw IoError(fmt::format("{}: shape {} overflows 64 bits", context(), described()));
  if (!bytes) throw IoError(fmt::format("{}: {} is not a whole number of bytes (or overflows)", context(), described()));
  if (*bytes != info.end - info.begin) {
    throw IoError(fmt::format("{}: data_offsets [{}, {}) hold {} bytes but {} needs {}", context(), info.begin, info.end,
                              info.end - info.begin, described(), *bytes));
  }
}

TensorInfo parse_entry(const std::string& name, const Json& entry, const std::string& label) {
  const std::string context = fmt::format("{}: tensor '{}'", label, name);
  if (name.empty()) throw IoError(fmt::format("{}: a tensor has an empty name", label));
  if (!entry.is_object()) throw IoError(fmt::format("{}: entry is {}, not an object", context, entry.type_name()));
  TensorInfo info;
  info.name = name;
  const Json& dtype = required_field(entry, "dtype", context);
  const auto parsed_dtype = dtype.is_string() ? parse_dtype(dtype.get_ref<const std::string&>()) : std::nullopt;
  if (!parsed_dtype) throw IoError(fmt::format("{}: unknown dtype {}", context, dtype.dump()));
  info.dtype = *parsed_dtype;
  const Json& shape = required_field(entry, "shape", context);
  if (!shape.is_array()) throw IoError(fmt::format("{}: shape is {}, not an array", context, shape.type_name()));
  for (const Json& dim : shape) info.shape.push_back(json_u64(dim, context, "shape"));
  const Json& offsets = required_field(entry, "data_offsets", context);
  if (!offsets.is_array() || offsets.size() != 2) throw IoError(fmt::format("{}: data_offsets is {}, not [begin, end]", context, offsets.dump()));
  info.begin = json_u64(offsets[0], context, "data_offsets");
  info.end = json_u64(offsets[1], context, "data_offsets");
  check_entry_size(info, label);
  return info;
}

void parse_metadata(const Json& value, const std::string& label, std::map<std::string, std::string>* metadata) {
  if (!value.is_object()) throw IoError(fmt::format("{}: __metadata__ is {}, not an object", label, value.type_name()));
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) throw IoError(fmt::format("{}: __metadata__ '{}' is {}, not a string", label, key, item.type_name()));
    if (metadata) (*metadata)[key] = item.get<std::string>();
  }
}

// Sorted by offset the tensors must tile the buffer from 0 without holes or overlaps, and
// the buffer must end exactly at the end of the file. Returns whether sorting moved any
// (headers written in offset order, as ours are, are left as they are).
bool check_layout(std::vector<TensorInfo>& tensors, uint64_t buffer_size, const std::string& label) {
  const auto by_offset = [](const TensorInfo& a, const TensorInfo& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; };
  const bool reordered = !std::is_sorted(tensors.begin(), tensors.end(), by_offset);
  if (reordered) std::stable_sort(tensors.begin(), tensors.end(), by_offset);
  uint64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.begin < expected) {
      throw IoError(fmt::format("{}: tensor '{}' data_offsets [{}, {}) overlap tensor '{}' [{}, {})", label, t.name, t.begin,
                                t.end, previous->name, previous->begin, previous->end));
    }
    if (t.begin > expected) {
      throw IoError(fmt::format("{}: tensor '{}' starts at {} but the bytes before it end at {}: a gap of {} bytes", label,
                                t.name, t.begin, expected, t.begin - expected));
    }
    if (t.end > buffer_size) {
      throw IoError(fmt::format("{}: tensor '{}' data_offsets [{}, {}) reach past the end of the file (data buffer holds {} bytes)",
                                label, t.name, t.begin, t.end, buffer_size));
    }
    expected = t.end;
    previous = &t;
  }
  if (expected != buffer_size) {
    throw IoError(fmt::format("{}: tensors end at buffer offset {} but the file holds {} bytes of data: {} trailing bytes", label,
                              expected, buffer_size, buffer_size - expected));
  }
  return reordered;
}

// Any header the simple parse declines: a strict DOM, then each entry checked in order
// (the first problem found is the one reported).
std::vector<TensorInfo> parse_header_dom(std::string_view header_json, const std::string& file_label,
                                         std::map<std::string, std::string>* metadata) {
  const Json header = parse_json_strict(header_json, file_label, "header");
  if (!header.is_object()) throw IoError(fmt::format("{}: header is {}, not a JSON object", file_label, header.type_name()));
  std::vector<TensorInfo> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      parse_metadata(entry, file_label, metadata);
    } else {
      tensors.push_back(parse_entry(name, entry, file_label));
    }
  }
  return tensors;
}

// The header's JSON, byte for byte what ordered_json's dump() gives for
// {"__metadata__": metadata (when not empty), name: {"dtype", "shape", "data_offsets"}, ...}
// in this order, written directly: a JSON object of 100K tensors costs seconds to build.
std::string header_json(const std::vector<TensorInfo>& tensors, const std::map<std::string, std::string>& metadata) {
  // Room for the usual entry and the page padding the writer adds: one allocation, where
  // growing it by appends copied a 100K-tensor plan's headers over several times.
  constexpr size_t kEntryBytes = 96;
  size_t name_bytes = 0;
  for (const TensorInfo& t : tensors) name_bytes += t.name.size();
  std::string text;
  text.reserve(name_bytes + tensors.size() * kEntryBytes + Writer::kAlignment);
  text += '{';
  try {
    if (!metadata.empty()) text += "\"__metadata__\":" + Json(metadata).dump();
    for (const TensorInfo& t : tensors) {
      if (text.size() > 1) text += ',';
      append_json_string(text, t.name); // escaped; throws type_error on invalid UTF-8
      text += ":{\"dtype\":\"";
      text += dtype_name(t.dtype);
      text += "\",\"shape\":[";
      for (size_t d = 0; d < t.shape.size(); ++d) {
        if (d) text += ',';
        append_decimal(text, t.shape[d]);
      }
      text += "],\"data_offsets\":[";
      append_decimal(text, t.begin);
      text += ',';
      append_decimal(text, t.end);
      text += "]}";
    }
  } catch (const Json::type_error& e) {
    throw IoError(fmt::format("cannot plan header: {}", e.what()));
  }
  text += '}';
  return text;
}

// Byte offset of rows [first_row, ...) inside the tensor, checking that rows are whole
// bytes and that the range lies inside the tensor.
uint64_t row_range_offset(const TensorInfo& t, uint64_t first_row, uint64_t row_count, const std::string& label) {
  const auto row_numel = checked_product(std::span(t.shape).subspan(t.shape.empty() ? 0 : 1));
  const auto row_bytes = row_numel ? checked_bytes(*row_numel, dtype_bits(t.dtype)) : std::nullopt;
  if (!row_bytes) {
    throw IoError(fmt::format("{}: tensor '{}': rows of {} {} are not whole bytes", label, t.name, dtype_name(t.dtype), shape_text(t.shape)));
  }
  if (first_row > t.rows() || row_count > t.rows() - first_row) {
    throw IoError(fmt::format("{}: tensor '{}': rows [{}, {}) outside its {} rows", label, t.name, first_row, first_row + row_count, t.rows()));
  }
  return first_row * *row_bytes;
}

} // namespace



uint64_t TensorInfo::numel() const {
  uint64_t product = 1;
  for (uint64_t dim : shape) product *= dim;
  return product;
}

uint64_t TensorInfo::row_bytes() const {
  uint64_t row_numel = 1;
  for (size_t i = shape.empty() ? 0 : 1; i < shape.size(); ++i) row_numel *= shape[i];
  return row_numel * uint64_t(dtype_bits(dtype)) / 8;
}

std::vector<TensorInfo> parse_header(std::string_view header_json, uint64_t header_length, uint64_t file_size,
                                     const std::string& file_label, std::map<std::string, std::string>* metadata,
                                     NameIndex* by_name) {
  check_header_length(header_length, file_size, file_label);
  if (header_json.size() != header_length) {
    throw IoError(fmt::format("{}: header holds {} bytes but its length field says {}", file_label, header_json.size(), header_length));
  }
  if (header_json.empty() || header_json.front() != '{') throw IoError(fmt::format("{}: header does not start with '{{'", file_label));
  std::vector<TensorInfo> tensors;
  std::optional<NameIndex> names; // the simple parse's, while the order is the header's
  if (auto simple = parse_simple_header(header_json)) {
    for (const auto& tensor : simple->tensors) check_entry_size(tensor, file_label);
    tensors = std::move(simple->tensors);
    names = std::move(simple->names);
    if (metadata)
      for (auto& [key, value] : simple->metadata) metadata->insert_or_assign(key, std::move(value));
  } else {
    tensors = parse_header_dom(header_json, file_label, metadata);
  }
  if (check_layout(tensors, file_size - 8 - header_length, file_label)) names.reset();
  if (by_name) {
    if (!names) names.emplace().build(tensors.size(), [&](size_t i) -> std::string_view { return tensors[i].name; });
    *by_name = std::move(*names);
  }
  return tensors;
}

// ------------------------------------------------------------------------- Reader

Reader::Reader(const std::filesystem::path& path) : path_(path) {
  const std::string& label = path_.native();
  // O_NONBLOCK: opening a FIFO named like a shard returns (and fails the regular-file
  // check) instead of waiting for a writer; on a regular file it changes nothing.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw IoError(fmt::format("{}: cannot open: {}", label, errno_text(errno)));
  try {
    struct stat info {};
    if (::fstat(fd_, &info) != 0) throw IoError(fmt::format("{}: fstat failed: {}", label, errno_text(errno)));
    if (!S_ISREG(info.st_mode)) throw IoError(fmt::format("{}: not a regular file", label));
    file_size_ = uint64_t(info.st_size);
    if (file_size_ < 8) check_header_length(0, file_size_, label);
    std::array<uint8_t, 8> length_bytes{};
    pread_full(fd_, length_bytes.data(), 8, 0, label);
    uint64_t header_length = 0;
    for (int i = 7; i >= 0; --i) header_length = header_length << 8 | length_bytes[size_t(i)];
    check_header_length(header_length, file_size_, label); // before allocating the header
    std::string header(header_length, '\0');
    pread_full(fd_, reinterpret_cast<uint8_t*>(header.data()), header_length, 8, label);
    tensors_ = parse_header(header, header_length, file_size_, label, &metadata_, &by_name_);
    header_hash_ = XXH3_64bits(header.data(), header.size());
    data_offset_ = 8 + header_length;
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

Reader::~Reader() {
  if (fd_ >= 0) ::close(fd_);
}

const TensorInfo* Reader::find(std::string_view name) const {
  const auto at = by_name_.find(name, [&](size_t i) -> std::string_view { return tensors_[i].name; });
  return at ? &tensors_[*at] : nullptr;
}

const TensorInfo& Reader::tensor(std::string_view name) const {
  const TensorInfo* found = find(name);
  if (!found) throw IoError(fmt::format("{}: no tensor '{}'", path_.string(), name));
  return *found;
}

uint64_t Reader::rows_offset(const TensorInfo& tensor, uint64_t first_row, uint64_t row_count, uint64_t out_size) const {
  const std::string& label = path_.native();
  if (tensor.end < tensor.begin || tensor.end > file_size_ - data_offset_) {
    throw IoError(fmt::format("{}: tensor '{}' [{}, {}) is not inside this file's data buffer", label, tensor.name, tensor.begin, tensor.end));
  }
  const uint64_t offset = row_range_offset(tensor, first_row, row_count, label);
  const uint64_t needed = row_count * tensor.row_bytes();
  if (out_size != needed) {
    throw IoError(fmt::format("{}: tensor '{}': rows [{}, {}) are {} bytes but the buffer holds {}", label, tensor.name, first_row,
                              first_row + row_count, needed, out_size));
  }
  // A TensorInfo whose shape disagrees with its offsets (not one of ours) must not read
  // into its neighbours.
  if (offset > tensor.end - tensor.begin || needed > tensor.end - tensor.begin - offset) {
    throw IoError(fmt::format("{}: tensor '{}': rows [{}, {}) lie outside its data_offsets [{}, {})", label, tensor.name, first_row,
                              first_row + row_count, tensor.begin, tensor.end));
  }
  return tensor.begin + offset;
}

void Reader::read_rows(const TensorInfo& tensor, uint64_t first_row, uint64_t row_count, std::span<uint8_t> out) const {
  read_bytes(rows_offset(tensor, first_row, row_count, out.size()), out);
}

void Reader::read_bytes(uint64_t buffer_offset, std::span<uint8_t> out) const {
  check_readable(buffer_offset, out.size());
  pread_full(fd_, out.data(), out.size(), data_offset_ + buffer_offset, path_.native());
}

void Reader::read_gathered(uint64_t buffer_offset, std::span<const std::span<uint8_t>> pieces) const {
  uint64_t size = 0;
  for (const auto& piece : pieces) size += piece.size();
  check_readable(buffer_offset, size);
  preadv_full(fd_, pieces, data_offset_ + buffer_offset, path_.native());
}

void Reader::check_readable(uint64_t buffer_offset, uint64_t size) const {
  const uint64_t buffer_size = file_size_ - data_offset_;
  if (buffer_offset > buffer_size || size > buffer_size - buffer_offset) {
    throw IoError(fmt::format("{}: bytes [{}, {}) outside the {}-byte data buffer", path_.string(), buffer_offset,
                              buffer_offset + size, buffer_size));
  }
}

// ------------------------------------------------------------------------- Writer

const TensorInfo* FileLayout::find(std::string_view name) const {
  const auto at = by_name.find(name, [&](size_t i) -> std::string_view { return tensors[i].name; });
  return at ? &tensors[*at] : nullptr;
}

FileLayout Writer::plan(std::vector<TensorSpec> specs, const std::map<std::string, std::string>& metadata) {
  const auto refuse = [](const TensorInfo& t, std::string_view why) {
    return IoError(fmt::format("cannot plan tensor '{}' {} {}: {}", t.name, dtype_name(t.dtype), shape_text(t.shape), why));
  };
  FileLayout layout;
  layout.tensors.reserve(specs.size());
  uint64_t offset = 0;
  for (TensorSpec& spec : specs) {
    TensorInfo& t = layout.tensors.emplace_back(TensorInfo{std::move(spec.name), spec.dtype, std::move(spec.shape), offset, 0});
    if (t.name.empty() || t.name == "__metadata__") throw refuse(t, "reserved or empty name");
    const auto numel = checked_product(t.shape);
    const auto bytes = numel ? checked_bytes(*numel, dtype_bits(t.dtype)) : std::nullopt;
    if (!bytes || __builtin_add_overflow(offset, *bytes, &t.end)) throw refuse(t, "size overflows or is not whole bytes");
    offset = t.end;
  }
  const auto repeated = layout.by_name.build(layout.tensors.size(), [&](size_t i) -> std::string_view { return layout.tensors[i].name; });
  if (!repeated.empty()) throw refuse(layout.tensors[repeated.front()], "the name appears twice");
  layout.header = header_json(layout.tensors, metadata);
  // Pad with spaces so the data buffer starts on a page: row chunks then align too.
  const uint64_t unpadded = 8 + layout.header.size();
  layout.data_offset = (unpadded + kAlignment - 1) / kAlignment * kAlignment;
  layout.header.append(layout.data_offset - unpadded, ' ');
  if (offset > uint64_t(INT64_MAX) - layout.data_offset) {
    throw IoError(fmt::format("cannot plan {} bytes of tensors: the file size overflows off_t", offset));
  }
  return layout;
}

Writer::Writer(const std::filesystem::path& final_path, std::vector<TensorSpec> specs, const std::map<std::string, std::string>& metadata)
    : final_path_(final_path), partial_path_(final_path.string() + ".partial"),
      owned_layout_(std::make_unique<const FileLayout>(plan(std::move(specs), metadata))), layout_(owned_layout_.get()) {}

Writer::Writer(const std::filesystem::path& final_path, const FileLayout& layout)
    : final_path_(final_path), partial_path_(final_path.string() + ".partial"), layout_(&layout) {}

Writer::Writer(Writer&& other) noexcept
    : final_path_(std::move(other.final_path_)), partial_path_(std::move(other.partial_path_)),
      owned_layout_(std::move(other.owned_layout_)), layout_(other.layout_), fd_(std::exchange(other.fd_, -1)),
      direct_(std::move(other.direct_)), unsynced_(other.unsynced_.load()) {}

Writer::~Writer() {
  if (fd_ >= 0) ::close(fd_);
}

const TensorInfo& Writer::tensor(std::string_view name) const {
  const TensorInfo* found = layout_->find(name);
  if (!found) throw IoError(fmt::format("{}: no tensor '{}' planned", final_path_.string(), name));
  return *found;
}

uint64_t Writer::buffer_size() const { return layout_->buffer_size(); }

uint64_t Writer::file_size() const { return layout_->file_size(); }

void Writer::reserve_space() {
  const std::string& label = partial_path_.native();
  struct statvfs fs {};
  const std::filesystem::path folder = folder_of(partial_path_);
  // A file system that reports no size (f_blocks 0: ramfs, some FUSE ones) has no free
  // count to check against; posix_fallocate below still finds out.
  if (::statvfs(folder.c_str(), &fs) == 0 && fs.f_blocks != 0) {
    const uint64_t free_bytes = uint64_t(fs.f_bavail) * uint64_t(fs.f_frsize);
    if (free_bytes < file_size()) {
      throw IoError(fmt::format("{}: needs {} bytes but the file system has {} free", label, file_size(), free_bytes));
    }
  }
  const int rc = ::posix_fallocate(fd_, 0, off_t(file_size()));
  if (rc == EOPNOTSUPP || rc == EINVAL) {
    if (::ftruncate(fd_, off_t(file_size())) != 0) throw IoError(fmt::format("{}: cannot size to {} bytes: {}", label, file_size(), errno_text(errno)));
  } else if (rc == ENOSPC) {
    throw IoError(fmt::format("{}: no space left for {} bytes", label, file_size()));
  } else if (rc != 0) {
    throw IoError(fmt::format("{}: cannot allocate {} bytes: {}", label, file_size(), errno_text(rc)));
  }
}

void Writer::open(bool resume) {
  const std::string& label = partial_path_.native();
  if (fd_ >= 0) throw IoError(fmt::format("{}: already open", label));
  std::error_code ec;
  const bool reusable = resume && std::filesystem::file_size(partial_path_, ec) == file_size() && !ec;
  if (reusable) {
    fd_ = ::open(partial_path_.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0) throw IoError(fmt::format("{}: cannot reopen: {}", label, errno_text(errno)));
  } else {
    fd_ = ::open(partial_path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw IoError(fmt::format("{}: cannot create: {}", label, errno_text(errno)));
    reserve_space();
  }
  std::array<uint8_t, 8> header_length{};
  for (size_t i = 0; i < 8; ++i) header_length[i] = uint8_t(uint64_t(layout_->header.size()) >> (8 * i));
  const std::array<std::span<const uint8_t>, 2> prefix = {
      std::span<const uint8_t>(header_length),
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(layout_->header.data()), layout_->header.size())};
  pwritev_full(fd_, prefix, 0, label);
  unsynced_ = true;
  direct_ = std::make_unique<DirectWriter>(partial_path_);
}

void Writer::write_rows(const TensorInfo& tensor, uint64_t first_row, std::span<const uint8_t> bytes) {
  const std::string& label = partial_path_.native();
  const uint64_t row_bytes = tensor.row_bytes();
  if (row_bytes == 0 ? !bytes.empty() : bytes.size() % row_bytes != 0) {
    throw IoError(fmt::format("{}: tensor '{}': {} bytes are not whole rows of {} bytes", label, tensor.name, bytes.size(), row_bytes));
  }
  const uint64_t row_count = row_bytes == 0 ? 0 : bytes.size() / row_bytes;
  const uint64_t offset = row_range_offset(tensor, first_row, row_count, label);
  if (tensor.end < tensor.begin || tensor.end > buffer_size()) {
    throw IoError(fmt::format("{}: tensor '{}' [{}, {}) is not inside this file's data buffer", label, tensor.name, tensor.begin, tensor.end));
  }
  write_bytes(tensor.begin + offset, bytes);
}

void Writer::check_writable(uint64_t buffer_offset, uint64_t size) const {
  const std::string& label = partial_path_.native();
  if (fd_ < 0) throw IoError(fmt::format("{}: write before open()", label));
  if (buffer_offset > buffer_size() || size > buffer_size() - buffer_offset) {
    throw IoError(fmt::format("{}: bytes [{}, {}) outside the {}-byte data buffer", label, buffer_offset, buffer_offset + size, buffer_size()));
  }
}

void Writer::write_bytes(uint64_t buffer_offset, std::span<const uint8_t> bytes) {
  check_writable(buffer_offset, bytes.size());
  const std::string& label = partial_path_.native();
  const uint64_t offset = layout_->data_offset + buffer_offset;
  const DirectWriter::Range pages = direct_->pages_inside(offset, bytes.size());
  if (pages.empty() || !direct_->write(bytes, offset, pages)) {
    pwrite_full(fd_, bytes.data(), bytes.size(), offset, label);
    unsynced_ = true;
    note_written(offset, bytes.size());
    return;
  }
  pwrite_full(fd_, bytes.data(), pages.begin - offset, offset, label);
  pwrite_full(fd_, bytes.data() + (pages.end - offset), offset + bytes.size() - pages.end, pages.end, label);
  unsynced_ = true;
}

void Writer::note_written(uint64_t offset, uint64_t size) {
  writeback_begin_ = std::min(writeback_begin_, offset);
  writeback_end_ = std::max(writeback_end_, offset + size);
}

// A hint, not a guarantee (sync() makes the bytes durable): the disk starts on them now,
// while the next chunks are computed, instead of at the batch's fsync, which then waits
// for the rest only. Without it a 50K-tensor job's writes sat in the page cache until
// each shard's fsync, and the last fsyncs ran on after the compute (~0.1 s of 0.9 s).
void Writer::start_writeback() {
  if (writeback_end_ <= writeback_begin_ || fd_ < 0) return;
  ::sync_file_range(fd_, off64_t(writeback_begin_), off64_t(writeback_end_ - writeback_begin_), SYNC_FILE_RANGE_WRITE);
  writeback_begin_ = UINT64_MAX;
  writeback_end_ = 0;
}

void Writer::write_gathered(uint64_t buffer_offset, std::span<const std::span<const uint8_t>> pieces) {
  // Runs of pieces smaller together than a direct write go buffered in one pwritev each,
  // as each would alone; a piece that large goes through write_bytes (its whole pages
  // skip the page cache).
  size_t run_begin = 0;
  uint64_t run_offset = buffer_offset, run_bytes = 0;
  const auto write_run = [&](size_t run_end) {
    if (run_end == run_begin) return;
    check_writable(run_offset, run_bytes);
    pwritev_full(fd_, pieces.subspan(run_begin, run_end - run_begin), layout_->data_offset + run_offset, partial_path_.native());
    unsynced_ = true;
    note_written(layout_->data_offset + run_offset, run_bytes);
  };
  for (size_t i = 0; i < pieces.size(); ++i) {
    const uint64_t size = pieces[i].size();
    if (size >= DirectWriter::kMinBytes || run_bytes + size >= DirectWriter::kMinBytes) {
      write_run(i);
      run_begin = i;
      run_offset = buffer_offset;
      run_bytes = 0;
    }
    if (size >= DirectWriter::kMinBytes) {
      write_bytes(buffer_offset, pieces[i]);
      run_begin = i + 1;
      run_offset = buffer_offset + size;
    } else {
      run_bytes += size;
    }
    buffer_offset += size;
  }
  write_run(pieces.size());
}

void Writer::sync() {
  if (fd_ < 0) throw IoError(fmt::format("{}: sync before open()", partial_path_.string()));
  unsynced_ = false;
  // After a failed fsync the kernel may have dropped the dirty pages: the shard is lost.
  if (::fsync(fd_) != 0) throw IoError(fmt::format("{}: fsync failed, the shard must be rewritten: {}", partial_path_.string(), errno_text(errno)));
}

void Writer::finish() { fsync_folder(finish_file()); }

std::filesystem::path Writer::finish_file() {
  if (unsynced_) sync();
  direct_.reset();
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) throw IoError(fmt::format("{}: close failed: {}", partial_path_.string(), errno_text(errno)));
  if (::rename(partial_path_.c_str(), final_path_.c_str()) != 0) {
    throw IoError(fmt::format("{}: rename to {} failed: {}", partial_path_.string(), final_path_.string(), errno_text(errno)));
  }
  return folder_of(final_path_);
}

} // namespace shardq::io
