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

// The whole file, refusing one larger than max_bytes (untrusted JSON must not exhaust memory).
std::string read_file_bounded(const std::filesystem::path& path, uint64_t max_bytes);

} // namespace shardq::io
