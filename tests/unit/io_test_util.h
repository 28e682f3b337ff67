// Small helpers shared by the pipeline/io unit tests: a scratch folder and raw file bytes.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace shardq::io::test {

// A fresh folder under the system temp dir, removed with everything in it at the end.
class ScratchDir {
 public:
  ScratchDir() {
    std::random_device seed;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("shardq_io_" + std::string(info ? info->name() : "test") + "_" + std::to_string(seed()));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_text(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The 8-byte little-endian length a safetensors file starts with.
inline std::string le64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char(uint8_t(value >> (8 * i)));
  return bytes;
}

// A safetensors file built by hand: length field (header.size() unless given), header
// text, then `buffer_bytes` zero bytes (sparse, so large buffers cost no disk).
inline void write_safetensors_raw(const std::filesystem::path& path, const std::string& header, uint64_t buffer_bytes,
                                  std::optional<uint64_t> length_field = std::nullopt) {
  write_text(path, le64(length_field.value_or(header.size())) + header);
  std::filesystem::resize_file(path, 8 + header.size() + buffer_bytes);
}

} // namespace shardq::io::test
