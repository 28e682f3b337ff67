// The write side of a rank: a thread that pwrites finished chunks into this rank's output
// shards and makes them durable in batches. A chunk is reported (on_durable) only after an
// fsync that covers it, so the checkpoint never records a chunk the disk may not hold;
// one fsync of each shard written since the last covers everything in it, so the disk
// sees large writes while the compute thread goes on with the next chunk. Batches are
// timed to the checkpoint (which records at most every 0.5 s), not to each chunk: a plan
// of 50K small chunks costs a few fsyncs per second, not several per chunk.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "pipeline/output_files.h"
#include "pipeline/work.h"

namespace shardq {

// The output buffers of one encoded chunk (one per task output); recycled between chunks.
struct ChunkBytes {
  std::vector<std::vector<uint8_t>> buffers;
  uint64_t size() const;
};

class ChunkWriter {
 public:
  using OnDurable = std::function<void(const ChunkResult&)>;

  ChunkWriter(const Plan& plan, OutputFiles& outputs, OnDurable on_durable);
  ~ChunkWriter();

  // Queues a chunk for writing; waits while the queue holds kMaxQueuedBytes already
  // (back-pressure on big chunks; small ones never wait on an fsync in progress, since
  // rank 0's main loop queues the chunks other ranks send it).
  void push(const ChunkResult& result, ChunkBytes bytes);
  // Buffers of an already written chunk, to fill again (empty ones when none is free).
  ChunkBytes recycled();
  void rethrow_if_failed();
  void stop(); // writes and syncs what is queued, then ends the thread

 private:
  struct Pending {
    ChunkResult result;
    ChunkBytes bytes;
  };
  void run();
  // Keeps a written chunk's buffers for the workers (up to kFreeBuffers of them).
  void recycle(ChunkBytes bytes);
  // fsyncs the shards written since the last sync, then reports their chunks.
  void make_durable(std::vector<ChunkResult>& unsynced, std::set<size_t>& unsynced_shards);

  const Plan& plan_;
  OutputFiles& outputs_;
  OnDurable on_durable_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Pending> queue_;
  uint64_t queued_bytes_ = 0;
  std::vector<ChunkBytes> free_;
  bool stopping_ = false;
  std::exception_ptr failure_;
  std::thread thread_;
};

} // namespace shardq
