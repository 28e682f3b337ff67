// The output shards this rank writes: opened once before work starts, written by pwrite
// from one writer thread, fsynced in batches (ChunkWriter), finalized (copies, scalars, rename) by one rank.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <vector>

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

  // A task's output buffers of one chunk at their planned places (pwrite); durable only
  // after sync() of its shard.
  void write_chunk_bytes(size_t task, uint64_t first_row, uint64_t rows,
                         const std::vector<std::vector<uint8_t>>& buffers);
  void sync(const std::set<size_t>& shards); // fsync these shards (this rank holds them open)

  // Copies the unchanged tensors, writes constants and the group scalars (in layout
  // order), fsyncs, renames.
  void finalize(size_t shard, std::span<const float> group_scalars);

 private:
  io::Writer& writer(size_t shard) const;
  void copy_tensor(io::Writer& out, const io::Reader& source, const ShardEntry& entry, const io::TensorInfo& to) const;
  const Plan& plan_;
  int rank_;
  bool direct_;
  // The map is shared by the main thread (finalize) and the writer thread (sync); a
  // shard's Writer itself is used by one thread at a time.
  mutable std::mutex writers_mutex_;
  std::map<size_t, std::unique_ptr<io::Writer>> writers_;
};

} // namespace shardq
