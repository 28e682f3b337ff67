// Rank 0's scheduler: hands out (stage, table, chunk) work on demand, records results in
// the checkpoint, finalizes shards when their chunks are durable, writes index, config
// and report last, and turns a stop signal into a flushed checkpoint and exit 75.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "pipeline/checkpoint.h"
#include "pipeline/link.h"
#include "pipeline/output_files.h"
#include "pipeline/plan.h"
#include "pipeline/progress.h"
#include "pipeline/work.h"

namespace shardq {

class Coordinator {
 public:
  Coordinator(const Plan& plan, Link& link, const OutputFiles& outputs, CheckpointState state,
              std::filesystem::path checkpoint_path);

  void on_request(int rank);
  void on_amax(const AmaxResult& result);
  void on_factor(const Message& message);
  void on_chunk_done(const ChunkResult& result);
  void on_dropped(const WorkItem& item);
  void on_finalized(int shard);
  void on_interrupt();
  void tick(); // saves, progress, finalization and the end of the run

  bool interrupting() const { return interrupting_; }

 private:
  bool uses_factors() const { return plan_.job.uses_gptq(); }
  bool amax_complete(size_t table) const;
  bool factors_complete(size_t table) const;
  bool table_complete(size_t table) const;
  float global_scale(size_t table) const;
  WorkItem next_item(int rank);
  void send_factors_once(int rank, size_t table);
  void finalize_ready_shards();
  void finish_run();
  void save(bool force);
  bool is_finished(const std::string& step) const;
  void mark_finished(const std::string& step);

  const Plan& plan_;
  Link& link_;
  const OutputFiles& outputs_;
  CheckpointState state_;
  std::filesystem::path checkpoint_path_;

  std::vector<std::vector<uint8_t>> amax_assigned_, chunk_assigned_, factor_assigned_, factor_done_;
  std::set<std::pair<int, size_t>> factors_sent_;
  std::map<size_t, FactorRecord> partial_factors_; // per table, until all columns are in
  std::set<size_t> finalizing_;
  int in_flight_ = 0;
  bool interrupting_ = false;
  bool ended_ = false;
  bool dirty_ = false;
  uint64_t factors_digest_ = 0; // factors_digest(state_.factors), kept as they change
  std::chrono::steady_clock::time_point last_save_;
  double last_save_seconds_ = 0;
  double elapsed_before_ = 0;
  std::chrono::steady_clock::time_point start_;
  Progress progress_;
};

} // namespace shardq
