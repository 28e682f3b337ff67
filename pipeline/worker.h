// The work side of a rank, threads in a row so that disk and compute overlap:
//   reader   - takes the next assigned item and reads its source rows (pread), staying
//              at most one item per compute thread ahead of them,
//   compute  - `threads` of them (run.threads), each running the stage on an item
//              already read: several chunks are in flight at once, never pieces of one,
//              so a chunk's bytes and figures do not depend on the thread count,
//   writer   - ChunkWriter: pwrites this rank's chunks and fsyncs them in batches.
// Results go back to the rank's main thread (which alone talks MPI) through a queue.
// Memory: at most 2 x threads chunks of source rows (one computing and one read ahead
// per thread) and one chunk of output buffers per thread, plus the writer's queue.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "pipeline/chunk_writer.h"
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

  void push(const WorkItem& item);
  int threads() const { return threads_; }
  size_t load() const;          // items queued, being read, read or computing
  uint64_t queued_bytes() const; // source bytes of the items not yet computing
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

  void read_loop();
  void compute_loop();
  void fail(std::exception_ptr failure);
  void process(ReadItem& read, EncodedChunk& out);
  void do_reduce(const WorkItem& item, const SourceRows& rows);
  void do_factor(const WorkItem& item);
  void do_encode(const WorkItem& item, SourceRows& rows, EncodedChunk& out);
  void emit(int dest, Tag tag, std::vector<uint8_t> bytes);
  void read_rows(const WorkItem& item, SourceRows& rows) const;
  ChunkInput chunk_input(const WorkItem& item, const SourceRows& rows) const;
  const io::Reader& reader_of(const std::string& tensor) const;
  const std::vector<float>& factor_source(int set);

  const Plan& plan_;
  OutputFiles& outputs_;
  int rank_;
  int threads_;
  std::vector<const io::Reader*> readers_; // per source shard (the plan's, opened once)
  std::mutex factor_sources_mutex_; // held while a set's source is read (once per set)
  std::map<int, std::vector<float>> factor_sources_; // per factor set: the dequantized linear
  std::map<int, std::shared_ptr<const LayerFactors>> factors_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::condition_variable result_ready_; // the main thread's wait
  std::deque<WorkItem> queue_;                         // assigned, not yet read
  std::deque<ReadItem> ready_;                         // read, not yet computed
  std::vector<std::unique_ptr<SourceRows>> free_rows_; // buffers to read into
  std::deque<Outgoing> results_;
  uint64_t queued_bytes_ = 0; // source bytes in queue_, the item being read and ready_
  bool reading_ = false;
  int computing_ = 0; // compute threads busy
  bool stopping_ = false;
  std::atomic<bool> cancel_{false};
  std::exception_ptr failure_;
  std::unique_ptr<ChunkWriter> writer_;
  std::thread reader_thread_;
  std::vector<std::thread> compute_threads_;
};

} // namespace shardq
