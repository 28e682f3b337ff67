// Whole small files (config, index, report): bounded reads and atomic replacement, so a
// kill at any instant leaves either the old or the new file, never a torn one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "pipeline/io/io_error.h"

namespace shardq::io {

// Writes PATH.tmp, fsyncs it, renames it over PATH and fsyncs the folder.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// write_file_atomic in two halves, so that the bytes reach the disk while other work runs
// and the file appears later: stage_file writes and fsyncs PATH.tmp (removed if that
// fails), commit_staged_file renames it over PATH and fsyncs the folder. Several files of
// one folder: rename_staged_file each, then one fsync_folder (posix_file.h) for them all.
inline std::filesystem::path staged_path(const std::filesystem::path& path) { return path.string() + ".tmp"; }
void stage_file(const std::filesystem::path& path, std::string_view bytes);
void rename_staged_file(const std::filesystem::path& path);
void commit_staged_file(const std::filesystem::path& path);

// The whole file, refusing one larger than max_bytes (untrusted JSON must not exhaust memory).
std::string read_file_bounded(const std::filesystem::path& path, uint64_t max_bytes);

} // namespace shardq::io
