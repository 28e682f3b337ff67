// config.json and other JSON documents we rewrite: key order is kept as read
// (nlohmann::ordered_json) so a diff against the source shows only what we changed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "pipeline/io/io_error.h"

namespace shardq::io {

// The largest JSON file read (index, config, report): refused beyond it before parsing.
inline constexpr uint64_t kMaxJsonFileBytes = 100'000'000;

// Reads a JSON object (duplicate keys and non-UTF-8 refused, 100 MB cap).
nlohmann::ordered_json read_json_object(const std::filesystem::path& path);

// Writes JSON indented by 2 with a trailing newline, atomically (write_file_atomic), or
// only its staged half (stage_file: committed later).
void write_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& json);
void stage_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& json);

inline nlohmann::ordered_json read_config(const std::filesystem::path& path) { return read_json_object(path); }

} // namespace shardq::io
