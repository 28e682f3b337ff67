// Rank 0's scheduler: hands out (phase, task, chunk) work on demand, several items a message, records results in
// the checkpoint, finalizes shards when their chunks are durable, writes index, config,
// side files and report last, and turns a stop signal into a flushed checkpoint and exit 75.
#pragma once

#include <array>
#include <chrono>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/checkpoint.h"
#include "pipeline/checkpoint_journal.h"
#include "pipeline/link.h"
#include "pipeline/output_files.h"
#include "pipeline/plan.h"
#include "pipeline/progress.h"
#include "pipeline/work.h"

namespace shardq {

// The names of a factor set's two blobs in the checkpoint.
std::string gram_blob_name(const FactorSet& set);
std::string factor_blob_name(const FactorSet& set);

// A fresh checkpoint state for the plan: every task's reductions and chunks pending.
CheckpointState fresh_state(const Plan& plan);

class Coordinator {
 public:
  // ranks: each rank's host and compute threads (the report, progress and status show them).
  // index_text: the output index's text if it is being rendered already (else the
  // coordinator renders it, when its checkpoint has not recorded the index written).
  Coordinator(const Plan& plan, Link& link, const OutputFiles& outputs, CheckpointState state,
              std::filesystem::path checkpoint_path, std::vector<RankInfo> ranks,
              std::future<std::string> index_text = {});

  void on_request(const WorkRequest& request);
  void on_reduce(const ReduceResult& result);
  void on_factor(const Message& message);
  void on_chunk_done(const ChunkResult& result);
  void on_dropped(const std::vector<WorkItem>& items); // back in front of their queues, in order
  void on_finalized(int shard);
  void on_interrupt();
  void tick(); // saves, progress, finalization and the end of the run

  bool interrupting() const { return interrupting_; }

 private:
  using ItemKey = std::pair<size_t, uint64_t>; // (task or factor set, chunk or item)
  bool group_reduced(size_t group) const;
  float group_value(size_t group) const;
  bool factors_ready(int set) const;
  void enqueue_if_ready(size_t task);
  WorkItem next_item(int rank);
  void send_factors_once(int rank, int set);
  void finalize_ready_shards();
  void finish_run();
  // force: now, whatever the time since the last; rank_figures: also the figures beside
  // the checkpoint (when due, or now if forced).
  void save(bool force, bool rank_figures = true);
  double typical_append_seconds() const; // the median of the recent journal appends (0 before any)
  void write_rank_figures(bool force);
  bool is_finished(const std::string& step) const;
  // Records a finished step; forced: saved now (otherwise with the next save).
  void mark_finished(const std::string& step, bool forced);
  void mark_shard_finished(size_t shard, bool forced);

  const Plan& plan_;
  Link& link_;
  const OutputFiles& outputs_;
  CheckpointState state_;
  std::filesystem::path checkpoint_path_;
  std::vector<RankInfo> ranks_;
  std::chrono::steady_clock::time_point last_rank_figures_{};

  // Work not yet handed out, per phase, in plan order; dropped items go back in front.
  std::deque<ItemKey> reduce_queue_, factor_queue_, encode_queue_;
  std::vector<uint8_t> task_enqueued_;   // encode chunks queued (the task's inputs are ready)
  std::vector<std::vector<size_t>> set_tasks_; // factor set -> the tasks that need it
  uint64_t chunks_pending_ = 0;          // encode chunks not yet recorded done
  uint64_t groups_pending_ = 0;          // groups whose reduction is not complete
  std::vector<uint8_t> group_reduced_;   // cached: every reduction of the group recorded
  std::vector<uint64_t> group_pending_;  // reductions still missing per group
  std::map<int, std::pair<std::vector<double>, std::vector<double>>> partial_factors_; // set -> gram, upper
  std::vector<std::vector<uint8_t>> factor_done_;
  std::set<std::pair<int, int>> factors_sent_; // (rank, set)
  std::set<size_t> finalizing_;
  std::vector<uint8_t> shard_finished_; // per shard: "shard:<file>" is in state_.finished
  size_t shards_unfinished_ = 0;        // changed shards not yet finished
  int in_flight_ = 0;
  bool interrupting_ = false;
  bool ended_ = false;
  // The output index, rendered from the plan and written to its .tmp file (io::stage_file)
  // on a thread of its own while the chunks run: ~0.1 s of CPU and an 8 MB write for 50K
  // tensors that finish_run would otherwise wait for; it only renames the file. The thread
  // reads the plan only (the source shards through ShardReaders::opened).
  std::future<void> index_staged_;
  bool dirty_ = false;
  uint64_t blobs_digest_ = 0; // blobs_digest(state_.blobs), kept as they change
  // Saves append what changed to the journal; a whole base is written first, when blobs
  // change, and once the journal outgrows the base (so a save costs what changed).
  CheckpointChanges changes_;
  bool base_due_ = true;
  uint64_t base_bytes_ = 0, journal_bytes_ = 0;
  std::chrono::steady_clock::time_point last_save_;
  // The last few journal appends' durations: saves are spaced by their median, so that one
  // append stalled behind the disk's writeback does not silence saves for 20 times its length.
  std::array<double, 5> append_seconds_{};
  size_t appends_ = 0;
  double elapsed_before_ = 0;
  std::chrono::steady_clock::time_point start_;
  Progress progress_;
};

} // namespace shardq
