// The work side of a rank, threads in a row so that disk and compute overlap:
//   reader   - takes the next batch of assigned items and reads their source rows
//              (pread), staying at most one batch per compute thread ahead of them,
//   compute  - `threads` of them (run.threads), each running the stage on the items of a
//              batch already read: several chunks are in flight at once, never pieces of
//              one, so a chunk's bytes and figures do not depend on the thread count,
//   writer   - ChunkWriter: pwrites this rank's chunks and fsyncs them in batches.
// Results go back to the rank's main thread (which alone talks MPI) through a queue.
// A batch is one item when items are large, up to kBatchItems when they are small (a
// plan of 50K tiny tensors): threads hand each other batches, not items, so a tiny
// chunk does not pay several thread wake-ups.
// Memory: at most 2 x threads batches of source rows (one computing and one read ahead
// per thread) and one batch of output buffers per thread, plus the writer's queue.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "pipeline/chunk_writer.h"
#include "pipeline/io/contiguous_runs.h"
#include "pipeline/link.h"
#include "pipeline/output_files.h"
#include "pipeline/plan.h"
#include "pipeline/work.h"
#include "stages/codec.h"

namespace shardq {

struct Outgoing {
  int dest = 0;
  Tag tag{};
  std::vector<uint8_t> bytes;
};

class Worker {
 public:
  Worker(const Plan& plan, OutputFiles& outputs, int rank, int threads);
  ~Worker();

  // An assign's items; none (rank 0 has nothing to hand out now) lets the writer sync what
  // it wrote at once (ChunkWriter::set_draining), more restores its batching.
  void push(const std::vector<WorkItem>& items);
  int threads() const { return threads_; }
  size_t load() const;          // items queued, being read, read or computing
  uint64_t queued_bytes() const; // source bytes of the items not yet computing
  const ChunkWriter& writer() const { return *writer_; }
  void install_factors(int set, std::shared_ptr<const LayerFactors> factors);
  // A chunk another rank computed, for a shard this rank writes (reported once durable):
  // the task's output buffers back to back.
  void write_received(const ChunkResult& result, std::span<const uint8_t> buffers);
  void cancel();       // drop the computing item (if it can be dropped) and everything not yet computed
  std::optional<Outgoing> pop_result();
  // Returns when a result (or a failure) is waiting, or after `timeout`.
  void wait_for_result(std::chrono::microseconds timeout);
  void rethrow_if_failed();
  void stop();

 private:
  // Source rows of one chunk as read from disk, one buffer per task input (inputs a
  // reduction does not read stay empty).
  struct SourceRows {
    std::vector<std::vector<uint8_t>> inputs;
  };
  struct ReadItem {
    WorkItem item;
    std::unique_ptr<SourceRows> rows; // reduce and encode only
  };
  using ReadBatch = std::vector<ReadItem>;

  void read_loop();
  void compute_loop();
  void fail(std::exception_ptr failure);
  ReadBatch take_batch(); // the next items from queue_ (lock held)
  void process(ReadItem& read, EncodedChunk& out, std::vector<ChunkOut>& written);
  void do_reduce(const WorkItem& item, const SourceRows& rows);
  void do_factor(const WorkItem& item);
  // A chunk for this rank's writer is appended to `written` (pushed once per batch).
  void do_encode(const WorkItem& item, SourceRows& rows, EncodedChunk& out, std::vector<ChunkOut>& written);
  void emit(int dest, Tag tag, std::vector<uint8_t> bytes);
  // One input's rows to read: its shard, where in the data buffer, into which bytes.
  using PieceRead = io::Transfer<const io::Reader*, uint8_t>;
  void plan_reads(const WorkItem& item, SourceRows& rows, std::vector<PieceRead>& pieces) const;
  void read_batch(ReadBatch& batch) const;
  ChunkInput chunk_input(const WorkItem& item, const SourceRows& rows) const;
  const std::vector<float>& factor_source(int set);

  const Plan& plan_;
  OutputFiles& outputs_;
  int rank_;
  int threads_;
  std::mutex factor_sources_mutex_; // held while a set's source is read (once per set)
  std::map<int, std::vector<float>> factor_sources_; // per factor set: the dequantized linear
  std::map<int, std::shared_ptr<const LayerFactors>> factors_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::condition_variable result_ready_; // the main thread's wait
  std::deque<WorkItem> queue_;                         // assigned, not yet read
  std::deque<ReadBatch> ready_;                        // read, not yet computed
  std::vector<std::unique_ptr<SourceRows>> free_rows_; // buffers to read into
  std::deque<Outgoing> results_;
  uint64_t queued_bytes_ = 0; // source bytes in queue_, the batch being read and ready_
  size_t reading_items_ = 0;   // in the batch being read
  size_t ready_items_ = 0;     // in ready_
  size_t computing_items_ = 0; // in the batches being computed
  bool stopping_ = false;
  std::atomic<bool> cancel_{false};
  std::exception_ptr failure_;
  std::unique_ptr<ChunkWriter> writer_;
  std::thread reader_thread_;
  std::vector<std::thread> compute_threads_;
};

} // namespace shardq
