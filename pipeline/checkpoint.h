// The run checkpoint (docs/checkpoint.md): one HDF5 file written whole by
// rank 0 at every save, crash-atomic, with the previous generation kept as a fallback.
//
// Files: <path> (newest), <path>.prev (the generation before), <path>.tmp (a save in
// progress, never read). Each carries a format_version and a checksum attribute
// (xxh3-64 over a canonical serialization of the content), so a torn or bit-flipped
// generation is detected and the other one is used.
//
// HDF5 file locking is turned off for every open (H5Pset_file_locking, or
// HDF5_USE_FILE_LOCKING=FALSE on older libraries): locking fails on many NFS mounts, and
// `shardq status` must read the file while a run replaces it. Safety comes from never
// modifying a file in place: a save writes a new file and renames it over the old one.
//
// Serial HDF5 is not thread-safe: call these from one thread (rank 0's main thread).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/pipeline_error.h"
#include "stages/chunk_stats.h"

namespace shardq {

// 3: tasks x chunks (any recipe), reductions per chunk, factors as named blobs.
// 5: each task's stacked tensors (W8A8's shared tasks), so progress reads in tensor rows.
inline constexpr uint32_t kCheckpointFormatVersion = 5;

inline constexpr uint8_t kChunkPending = 0;
inline constexpr uint8_t kChunkDone = 1;

struct ChunkRecord {
  uint8_t state = kChunkPending; // kChunkPending or kChunkDone
  uint64_t checksum = 0;         // xxh3-64 of the chunk's output bytes
  ChunkStats stats;
  double seconds = 0;            // time spent on the chunk
  bool operator==(const ChunkRecord&) const = default;
};

// A chunk's part of its group's reduction: an exact max, so the group's value does not
// depend on the order the chunks came in.
struct ReduceRecord {
  uint8_t done = 0;
  float value = 0;
  bool operator==(const ReduceRecord&) const = default;
};

// One task of the plan; records are keyed by (task, chunk).
struct TaskRecord {
  std::string name;
  uint64_t rows = 0;
  uint64_t rows_per_chunk = 0;
  // Tensors whose rows each task row covers (Task::stacked_tensors): `status` counts rows
  // as the run's log and report do, without the plan.
  uint32_t stacked_tensors = 1;
  std::vector<ReduceRecord> reductions; // per chunk; empty when the task has no reduction
  std::vector<ChunkRecord> chunks;
  bool operator==(const TaskRecord&) const = default;
};

// A named array of doubles computed once per run (a factor set's Gram and factor
// matrices), stored in the blob file with its digest.
struct Blob {
  std::string name;
  std::vector<uint64_t> shape;
  std::vector<double> values;
  bool operator==(const Blob&) const = default;
};

struct CheckpointState {
  // Ordered fields that identify the job: job, source headers hash, tool version, ...
  std::vector<std::pair<std::string, std::string>> fingerprint;
  std::vector<TaskRecord> tasks;
  std::vector<Blob> blobs;
  std::vector<std::string> finished; // finished steps/files: "shard:<name>", "index", ...
  double elapsed_seconds = 0;
  uint64_t generation = 0; // stored as given: the caller counts saves
  int64_t updated_unix = 0;
  bool operator==(const CheckpointState&) const = default;
};

struct LoadResult {
  CheckpointState state;
  bool fell_back = false; // the newest generation was missing or corrupt; .prev was used
  std::string note;       // why it fell back, or where the journal's replay stopped (a kill
                          // mid-save); empty otherwise
};

// After load_checkpoint fell back to .prev: renames the unusable newest generation (if
// any) to PATH.corrupt, so that the next save keeps the good .prev instead of rotating
// the bad file into its place.
void set_aside_unusable_newest(const std::filesystem::path& path);

// Starting over (--fresh, --force): removes both generations and the journal, durably,
// before the outputs are rewritten. A kill before the new run's first save then leaves no
// checkpoint, never an older one whose done chunks the rewritten .partial files lack.
void remove_checkpoint(const std::filesystem::path& path);

// Writes `state` as the newest generation. At every instant of the save (kill -9
// included) <path> or <path>.prev holds a complete generation. Throws PipelineError
// naming the path and the object on any HDF5, fsync or rename failure, and for strings
// with NUL bytes or blobs whose size is not their shape's. Blobs go to blobs_file(path)
// first, and only when that file does not hold them already (once per factor set, in
// practice); the generation records their digest.
void save_checkpoint(const std::filesystem::path& path, const CheckpointState& state);

// The same with blobs_digest(state.blobs) at hand: a run's blobs are fixed once written,
// so the coordinator hashes them then, not at every save (~25 MB per Engram layer, which
// made the periodic saves a few percent of a core).
void save_checkpoint(const std::filesystem::path& path, const CheckpointState& state, uint64_t blobs_digest_value);

// nullopt when neither <path> nor <path>.prev exists. A corrupt newest generation falls
// back to .prev (fell_back, note); throws PipelineError "... is corrupt (...); use --fresh
// to start over" when no complete generation is left. A generation whose blob file is
// missing or holds other blobs counts as corrupt. A checkpoint of another format version
// is refused naming both versions, never read.
std::optional<LoadResult> load_checkpoint(const std::filesystem::path& path);

// "" when the fingerprints are equal; otherwise a message naming the first field that
// differs (or is missing on one side) with both values.
std::string fingerprint_mismatch(const CheckpointState& stored,
                                 const std::vector<std::pair<std::string, std::string>>& current);

// xxh3-64 over the canonical serialization of every field (the stored checksum; the
// blobs enter through blobs_digest).
uint64_t checkpoint_checksum(const CheckpointState& state);

// xxh3-64 over the blobs' names, shapes and values (stored in the generation and the file).
uint64_t blobs_digest(const std::vector<Blob>& blobs);

// Where save_checkpoint keeps the blobs of `checkpoint`: PATH.blobs (HDF5), written only
// when a save carries blobs the file does not hold yet.
std::filesystem::path blobs_file(const std::filesystem::path& checkpoint);

} // namespace shardq
