// The few POSIX file calls pipeline/io builds on, made whole: reads and writes loop over
// short transfers and EINTR, every failure throws IoError naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace shardq::io {

std::string errno_text(int error);

// Reads exactly `size` bytes at `offset`; a file that ends first is an error.
void pread_full(int fd, uint8_t* out, uint64_t size, uint64_t offset, const std::string& label);
void pwrite_full(int fd, const uint8_t* bytes, uint64_t size, uint64_t offset, const std::string& label);
// The pieces back to back from `offset`, in as few pwritev / preadv calls as IOV_MAX allows.
void pwritev_full(int fd, std::span<const std::span<const uint8_t>> pieces, uint64_t offset, const std::string& label);
void preadv_full(int fd, std::span<const std::span<uint8_t>> pieces, uint64_t offset, const std::string& label);

// Makes a rename or create inside `folder` durable.
void fsync_folder(const std::filesystem::path& folder);

// The folder holding `path` ("." for a bare name).
std::filesystem::path folder_of(const std::filesystem::path& path);

} // namespace shardq::io
