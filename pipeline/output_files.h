// The output shards this rank writes: opened once before work starts, written by pwrite
// from one writer thread (first the copied tensors and constants, then the chunks),
// fsynced in batches (ChunkWriter), finalized (scalars, fsync, rename) by one rank.
#pragma once

#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <vector>

#include "pipeline/io/safetensors.h"
#include "pipeline/plan.h"

namespace shardq {

// One chunk's bytes to write: its task's rows [first_row, first_row + rows), one buffer
// per task output.
struct ChunkWrite {
  size_t task = 0;
  uint64_t first_row = 0, rows = 0;
  const std::vector<std::vector<uint8_t>>* buffers = nullptr;
};

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

  // Chunks' output buffers at their planned places; durable only after sync() of their
  // shards. Pieces that lie back to back in a shard (the small tensors of a batch of
  // chunks, one after another in the layout) go in one pwritev.
  void write_chunks(std::span<const ChunkWrite> chunks);
  void sync(const std::set<size_t>& shards); // fsync these shards (this rank holds them open)

  // Copies the unchanged tensors and writes the constants of the shards this rank
  // finalizes: what needs no result of the run, written while the chunks compute (the
  // writer thread calls it first). Once per run; finalize waits for it.
  void write_fixed_entries();
  // Writes the group scalars (in layout order), fsyncs, renames; returns the folder whose
  // fsync makes the rename durable (the caller's: once for the shards finalized together).
  std::filesystem::path finalize(size_t shard, std::span<const float> group_scalars);

 private:
  io::Writer& writer(size_t shard) const;
  bool holds(size_t shard) const; // open here (not finalized before)
  void copy_tensor(io::Writer& out, const io::Reader& source, const ShardEntry& entry, const io::TensorInfo& to) const;
  const Plan& plan_;
  int rank_;
  bool direct_;
  // The map is shared by the main thread (finalize) and the writer thread (sync); a
  // shard's Writer itself is used by one thread at a time.
  mutable std::mutex writers_mutex_;
  std::map<size_t, std::unique_ptr<io::Writer>> writers_;
  std::promise<void> fixed_entries_written_;
  std::shared_future<void> fixed_entries_ = fixed_entries_written_.get_future().share(); // or their error
};

} // namespace shardq
