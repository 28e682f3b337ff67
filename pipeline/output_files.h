// The output shards this rank writes: opened once before work starts, written by pwrite
// from one writer thread, fsynced in batches (ChunkWriter), finalized (copies, scalars, rename) by one rank.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <span>

#include "pipeline/io/safetensors.h"
#include "pipeline/plan.h"

namespace shardq {

class OutputFiles {
 public:
  OutputFiles(const Plan& plan, int rank, bool direct);

  bool writes_shard(size_t shard) const;
  int writer_of(size_t shard) const; // the rank that writes (and finalizes) it; direct: 0 finalizes
  bool direct() const { return direct_; }

  // Rank 0 first creates (or, resuming, reuses) every changed shard's .partial; then the
  // other ranks open the ones they write.
  void create_all(bool resume);
  void open_mine();

  // Chunk bytes at their planned places (pwrite); durable only after sync_all().
  void write_chunk_bytes(const TablePlan& table, uint64_t first_row, uint64_t rows, std::span<const uint8_t> packed,
                         std::span<const uint8_t> scales);
  void sync_all(); // fsync every shard this rank holds open
  // Reads a finished chunk back (for --verify-done).
  void read_chunk(const TablePlan& table, uint64_t first_row, uint64_t rows, std::span<uint8_t> packed,
                  std::span<uint8_t> scales) const;

  // Copies the unchanged tensors, writes each table's weight_scale_2, fsyncs, renames.
  void finalize(size_t shard, std::span<const float> global_scales);

 private:
  io::Writer& writer(size_t shard) const;
  const Plan& plan_;
  int rank_;
  bool direct_;
  // The map is shared by the main thread (finalize) and the writer thread (sync_all); a
  // shard's Writer itself is used by one thread at a time.
  mutable std::mutex writers_mutex_;
  std::map<size_t, std::unique_ptr<io::Writer>> writers_;
};

} // namespace shardq
