// The write side of a rank: a thread that pwrites finished chunks into this rank's output
// shards and makes them durable in batches. A chunk is reported (on_durable) only after an
// fsync that covers it, so the checkpoint never records a chunk the disk may not hold;
// one fsync of each shard written since the last covers everything in it, so the disk
// sees large writes while the compute thread goes on with the next chunk. Batches are
// timed to the checkpoint (which records at most every 0.5 s), not to each chunk: a plan
// of 50K small chunks costs a few fsyncs per second, not several per chunk. Before the
// first chunk it writes the copied tensors and constants of the shards this rank
// finalizes (OutputFiles::write_fixed_entries), so finalizing is left the scalars and rename.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "pipeline/output_files.h"
#include "pipeline/work.h"

namespace shardq {

// The output buffers of one encoded chunk (one per task output); recycled between chunks.
struct ChunkBytes {
  std::vector<std::vector<uint8_t>> buffers;
  uint64_t size() const;
};

// A chunk to write: what rank 0 records, and its bytes.
struct ChunkOut {
  ChunkResult result;
  ChunkBytes bytes;
  uint64_t size = 0; // bytes.size(), set by push: a shared task's chunk has hundreds of buffers to add up
};

class ChunkWriter {
 public:
  // The chunks one round of fsyncs made durable, in the order they were written.
  using OnDurable = std::function<void(const std::vector<ChunkResult>&)>;

  ChunkWriter(const Plan& plan, OutputFiles& outputs, OnDurable on_durable);
  ~ChunkWriter();

  // Queues chunks for writing (a compute thread's batch at once); waits while the queue
  // holds kMaxQueuedBytes already (back-pressure on big chunks; small ones never wait on an
  // fsync in progress, since rank 0's main loop queues the chunks other ranks send it).
  // Leaves `chunks` empty, its capacity kept for the caller's next batch.
  void push(std::vector<ChunkOut>& chunks);
  // Draining: fsync as soon as the queue is written instead of batching syncs over
  // kSyncDelay. Set while rank 0 has no work to hand this rank (the job's last chunks
  // then reach the checkpoint, and the shards their rename, without waiting out the delay).
  void set_draining(bool draining);
  // Buffers of an already written chunk, to fill again (empty ones when none is free).
  ChunkBytes recycled();
  void rethrow_if_failed();
  // The most bytes the queue held at once, its limit and the largest chunk queued (for the
  // run's back-pressure line).
  uint64_t peak_queued_bytes() const;
  uint64_t max_queued_bytes() const { return max_queued_bytes_; }
  uint64_t largest_chunk_bytes() const;
  void stop(); // writes and syncs what is queued, then ends the thread

 private:
  void run();
  // Keeps a written chunk's buffers for the workers (up to kFreeBytes of them).
  void recycle(ChunkBytes bytes, uint64_t size);
  // fsyncs the shards written since the last sync, then reports their chunks.
  void make_durable(std::vector<ChunkResult>& unsynced, std::set<size_t>& unsynced_shards);

  const Plan& plan_;
  OutputFiles& outputs_;
  OnDurable on_durable_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<ChunkOut> queue_;
  const uint64_t max_queued_bytes_;
  uint64_t queued_bytes_ = 0;
  uint64_t peak_queued_bytes_ = 0;
  uint64_t largest_chunk_bytes_ = 0;
  std::vector<std::pair<ChunkBytes, uint64_t>> free_; // and their sizes
  uint64_t free_bytes_ = 0;
  bool stopping_ = false;
  bool draining_ = false;
  std::exception_ptr failure_;
  std::thread thread_;
};

} // namespace shardq
