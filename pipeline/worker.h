// The compute thread of a rank: reads source rows, runs the stages, writes its own
// chunks when this rank writes them, and hands results back to the rank's main thread
// (which alone talks MPI).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "pipeline/link.h"
#include "pipeline/output_files.h"
#include "pipeline/plan.h"
#include "pipeline/work.h"
#include "stages/quantize.h"

namespace shardq {

struct Outgoing {
  int dest = 0;
  Tag tag{};
  std::vector<uint8_t> bytes;
};

class Worker {
 public:
  Worker(const Plan& plan, OutputFiles& outputs, int rank);
  ~Worker();

  void push(const WorkItem& item);
  size_t load() const; // items queued or running
  void install_factors(size_t table, std::shared_ptr<const LayerFactors> factors);
  void cancel();       // drop the running item (if it can be dropped) and the queue
  std::optional<Outgoing> pop_result();
  void rethrow_if_failed();
  void stop();

 private:
  void run();
  void process(const WorkItem& item);
  void do_amax(const WorkItem& item);
  void do_factor(const WorkItem& item);
  void do_quantize(const WorkItem& item);
  void emit(int dest, Tag tag, std::vector<uint8_t> bytes);
  Fp8RowChunk read_chunk(const TablePlan& table, uint64_t chunk, std::vector<uint8_t>& codes,
                         std::vector<uint8_t>& scales) const;
  const std::vector<float>& wkv(size_t table);

  const Plan& plan_;
  OutputFiles& outputs_;
  int rank_;
  std::vector<std::unique_ptr<io::Reader>> readers_; // per source shard, opened once
  std::map<size_t, std::vector<float>> wkv_cache_;   // per table: dequantized wkv
  std::map<size_t, std::shared_ptr<const LayerFactors>> factors_;
  std::vector<uint8_t> codes_, scales_;
  Nvfp4Chunk chunk_out_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<WorkItem> queue_;
  std::deque<Outgoing> results_;
  bool running_item_ = false;
  bool stopping_ = false;
  std::atomic<bool> cancel_{false};
  std::exception_ptr failure_;
  std::thread thread_;
};

} // namespace shardq
