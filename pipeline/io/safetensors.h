// safetensors shards: a validating pread-only Reader and a planned, pwrite-based Writer.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/io/io_error.h"
#include "stages/name_index.h"
#include "stages/tensor.h"

namespace shardq::io {

using shardq::Dtype;
using shardq::dtype_bits;
using shardq::dtype_name;
using shardq::parse_dtype;
using shardq::TensorSpec;

struct TensorInfo {
  std::string name;
  Dtype dtype;
  std::vector<uint64_t> shape;
  uint64_t begin = 0; // offsets relative to the data buffer, end exclusive
  uint64_t end = 0;
  uint64_t numel() const;
  uint64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  uint64_t row_bytes() const; // bytes of one row (whole tensor for scalars)
};

// Opens a shard, validates its header completely (length cap 100 MB, JSON, known dtypes,
// numel * bits / 8 == end - begin without overflow, contiguous from 0, file size) and reads
// byte ranges with pread only.
class Reader {
 public:
  explicit Reader(const std::filesystem::path& path);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; } // in offset order
  const TensorInfo& tensor(std::string_view name) const;               // throws if absent
  const TensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t data_offset() const { return data_offset_; } // absolute offset of the buffer
  uint64_t file_size() const { return file_size_; }
  // XXH3-64 of the header's bytes as read (JSON text, metadata included): what a run's
  // fingerprint keeps of the source, hashed here while the bytes are hot.
  uint64_t header_hash() const { return header_hash_; }

  // Rows [first_row, first_row + row_count) of a tensor into out (row_count * row_bytes);
  // throws when the range leaves the tensor or rows are not whole bytes (e.g. F4 [r, odd]).
  void read_rows(const TensorInfo& tensor, uint64_t first_row, uint64_t row_count, std::span<uint8_t> out) const;
  // Where in the data buffer those rows start, checked as read_rows checks them (out_size:
  // the bytes the caller will read them into).
  uint64_t rows_offset(const TensorInfo& tensor, uint64_t first_row, uint64_t row_count, uint64_t out_size) const;
  // Raw bytes at a data-buffer-relative offset.
  void read_bytes(uint64_t buffer_offset, std::span<uint8_t> out) const;
  // Pieces back to back from buffer_offset, in one preadv (many small tensors at once).
  void read_gathered(uint64_t buffer_offset, std::span<const std::span<uint8_t>> pieces) const;

 private:
  void check_readable(uint64_t buffer_offset, uint64_t size) const; // inside the data buffer

  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t header_hash_ = 0;
  std::vector<TensorInfo> tensors_;
  NameIndex by_name_; // into tensors_
  std::map<std::string, std::string> metadata_;
};

// Parses and validates a header (the bytes after the 8-byte length) against the file size;
// the one entry point for untrusted headers, shared by Reader and the fuzzer. The tensors
// come in offset order; `by_name`, if given, is set to index them by name.
std::vector<TensorInfo> parse_header(std::string_view header_json, uint64_t header_length, uint64_t file_size,
                                     const std::string& file_label, std::map<std::string, std::string>* metadata,
                                     NameIndex* by_name = nullptr);

class DirectWriter;

// A shard's planned layout: the tensors at their offsets, where the data buffer starts,
// and the header bytes (padded) that say so.
struct FileLayout {
  std::vector<TensorInfo> tensors;
  uint64_t data_offset = 0;
  std::string header;
  NameIndex by_name; // into tensors

  const TensorInfo* find(std::string_view name) const;
  uint64_t buffer_size() const { return tensors.empty() ? 0 : tensors.back().end; } // bytes of the data buffer
  uint64_t file_size() const { return data_offset + buffer_size(); }                 // the whole file's
};

// The whole layout is planned up front from (name, dtype, shape) in order; the header is
// padded with spaces so the data buffer starts at a 4096-aligned offset. Bytes go in by
// pwrite at planned offsets (any order, any thread); finish() fsyncs and renames
// NAME.partial -> NAME and fsyncs the folder. The whole pages inside a large write skip
// the page cache (DirectWriter).
class Writer {
 public:
  static constexpr uint64_t kAlignment = 4096;

  Writer(const std::filesystem::path& final_path, std::vector<TensorSpec> specs,
         const std::map<std::string, std::string>& metadata = {});
  // A layout planned earlier (by plan()) and kept by the caller for as long as the Writer
  // lives: a job plans every shard up front and keeps the plan (a copy per shard cost ~10 ms
  // for 50K tensors).
  Writer(const std::filesystem::path& final_path, const FileLayout& layout);
  Writer(const std::filesystem::path& final_path, FileLayout&& layout) = delete; // would dangle
  ~Writer(); // closes; an unfinished .partial stays for resume, never renamed
  Writer(Writer&& other) noexcept;
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Plans the layout without touching the disk (sizes, offsets, header bytes).
  static FileLayout plan(std::vector<TensorSpec> specs, const std::map<std::string, std::string>& metadata);

  const std::filesystem::path& partial_path() const { return partial_path_; }
  const std::vector<TensorInfo>& tensors() const { return layout_->tensors; }
  const TensorInfo& tensor(std::string_view name) const;
  uint64_t data_offset() const { return layout_->data_offset; }
  uint64_t file_size() const;
  uint64_t buffer_size() const; // bytes of the data buffer (sum of tensor bytes)

  // Opens NAME.partial: creates and sizes it (posix_fallocate where possible, else
  // ftruncate), writes the header; with resume = true reuses an existing .partial.
  void open(bool resume);
  // bytes must be whole rows of the tensor, starting at first_row, inside the tensor.
  void write_rows(const TensorInfo& tensor, uint64_t first_row, std::span<const uint8_t> bytes);
  void write_bytes(uint64_t buffer_offset, std::span<const uint8_t> bytes);
  // Pieces that lie back to back from buffer_offset: one pwritev for many small ones.
  void write_gathered(uint64_t buffer_offset, std::span<const std::span<const uint8_t>> pieces);
  // Asks the disk to start on what was written through the page cache since the last
  // call, by one sync_file_range over its span (a batch of interleaved small tensors is
  // hundreds of runs; their gaps, written later, are simply not dirty yet).
  void start_writeback();
  void sync();   // fsync the data written so far; any error is fatal for the shard
  bool has_unsynced_bytes() const { return unsynced_; } // written since the last sync (or never synced)
  void finish(); // finish_file, then fsync the folder
  // sync (unless nothing was written since the last one), close (checked), rename to the
  // final name; returns the folder whose fsync makes the rename durable (the caller's,
  // once for the shards it renames together).
  std::filesystem::path finish_file();

 private:
  void reserve_space(); // statvfs check, then posix_fallocate (ftruncate where unsupported)
  void check_writable(uint64_t buffer_offset, uint64_t size) const; // open, and inside the data buffer
  void note_written(uint64_t offset, uint64_t size); // through the page cache: for start_writeback

  std::filesystem::path final_path_;
  std::filesystem::path partial_path_;
  std::unique_ptr<const FileLayout> owned_layout_; // planned from specs here; else the caller's
  const FileLayout* layout_;
  int fd_ = -1;
  std::unique_ptr<DirectWriter> direct_; // the page-aligned middle of large writes
  uint64_t writeback_begin_ = UINT64_MAX, writeback_end_ = 0; // file bytes written since start_writeback
  // Bytes written since the last sync (set after each write, cleared before each fsync,
  // so a write racing a sync leaves it set). A job syncs a shard's last chunks before
  // recording them done; an fsync of the clean file at finish_file still flushed the
  // disk's cache (~0.2 ms a shard here: 44 fewer fsyncs saved the many-tensor job 7-9.5 ms).
  std::atomic<bool> unsynced_{true};
};

} // namespace shardq::io
