// The checkpoint's file schema (docs/checkpoint.md "Layout"): which groups, attributes and
// columns hold a CheckpointState, written and read back through checkpoint_hdf5.h.
//
// Layout (h5dump shows it; libver bounds v18 so metadata blocks carry HDF5's own
// checksums and 1.8+ tools read it). Records are flat columns over all tasks, so a plan
// of 50K small tasks costs a few datasets, not 50K groups:
//   /                      attrs format_version u32, generation u64, checksum u64,
//                          elapsed_seconds f64, updated_unix i64
//   /fingerprint           one string attribute per field, in creation order
//   /tasks                 name str[T], rows u64[T], rows_per_chunk u64[T],
//                          stacked_tensors u32[T] (left out when all are 1), chunks u64[T],
//                          reductions u64[T] (counts per task, in order)
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
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "pipeline/checkpoint.h"
#include "pipeline/pipeline_error.h"

namespace shardq {

// What HDF5 cannot store faithfully or this format does not allow (NUL bytes in strings,
// empty or repeated fingerprint fields, repeated blob names, a blob whose size is not its
// shape's), refused before anything is written.
void validate_for_save(const std::filesystem::path& checkpoint, const CheckpointState& state);

// One generation of `state` into `file` (the blobs' names and digest, not their data).
void write_generation(const std::filesystem::path& file, const CheckpointState& state, uint64_t blobs_digest_value);

// The blob file: the blobs' arrays, names and digest.
void write_blob_file(const std::filesystem::path& file, const std::vector<Blob>& blobs, uint64_t digest);

// The digest recorded in a blob file, or nullopt when there is none or it is unreadable.
std::optional<uint64_t> stored_blobs_digest(const std::filesystem::path& file);

// A generation of another format version: never read, never a reason to fall back to
// .prev (which that shardq wrote too).
struct VersionMismatch : PipelineError {
  VersionMismatch(const std::filesystem::path& file, uint32_t version);
};

// One generation (`file`: PATH or PATH.prev of `checkpoint`), whole and checksum-verified,
// with the blobs of checkpoint's blob file; throws VersionMismatch, or PipelineError saying
// what is wrong.
CheckpointState read_generation(const std::filesystem::path& file, const std::filesystem::path& checkpoint);

} // namespace shardq
