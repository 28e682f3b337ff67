#include "pipeline/coordinator.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "pipeline/io/atomic_file.h"
#include "pipeline/io/config.h"
#include "pipeline/io/index.h"
#include "pipeline/io/posix_file.h"
#include "pipeline/pipeline_error.h"
#include "pipeline/report.h"
#include "pipeline/signals.h"
#include "pipeline/test_hooks.h"

namespace shardq {
namespace {

constexpr double kSaveIntervalSeconds = 0.5;
// Items one assign message may carry: bounds the message and one rank's share of the
// queue when tasks are tiny.
constexpr int32_t kMaxItemsPerAssign = 512;

// Source bytes per row over the whole plan (the progress line's GB/s); the inputs'
// header entries were found at plan time (no lookup by name for 100K inputs).
uint64_t source_bytes_per_row(const Plan& plan) {
  uint64_t bytes = 0;
  for (size_t t = 0; t < plan.tasks().size(); ++t) {
    const Task& task = plan.tasks()[t];
    const auto& inputs = plan.task_sources[t];
    for (size_t i = 0; i < inputs.size(); ++i) bytes += task.input_row_count(i, 0, task.rows) * inputs[i].row_bytes;
  }
  const uint64_t rows = plan.total_rows();
  return rows ? bytes / rows : 0;
}

const Blob* find_blob(const CheckpointState& state, const std::string& name) {
  for (const auto& blob : state.blobs) if (blob.name == name) return &blob;
  return nullptr;
}

} // namespace

std::string gram_blob_name(const FactorSet& set) { return "gram:" + set.name; }
std::string factor_blob_name(const FactorSet& set) { return "factor:" + set.name; }

CheckpointState fresh_state(const Plan& plan) {
  CheckpointState state;
  state.fingerprint = plan.fingerprint;
  for (const auto& task : plan.tasks()) {
    TaskRecord record;
    record.name = task.name;
    record.rows = task.rows;
    record.rows_per_chunk = task.rows_per_chunk;
    record.stacked_tensors = task.stacked_tensors;
    if (codec_reduces(task.codec)) record.reductions.resize(task.chunks());
    record.chunks.resize(task.chunks());
    state.tasks.push_back(std::move(record));
  }
  return state;
}

Coordinator::Coordinator(const Plan& plan, Link& link, const OutputFiles& outputs, CheckpointState state,
                         std::filesystem::path checkpoint_path, std::vector<RankInfo> ranks,
                         std::future<std::string> index_text)
    : plan_(plan), link_(link), outputs_(outputs), state_(std::move(state)),
      checkpoint_path_(std::move(checkpoint_path)), ranks_(std::move(ranks)),
      last_save_(std::chrono::steady_clock::now()), elapsed_before_(state_.elapsed_seconds),
      start_(std::chrono::steady_clock::now()),
      progress_(plan.total_rows(), source_bytes_per_row(plan), int(ranks_.size())) {
  const auto& tasks = plan_.tasks();
  task_enqueued_.assign(tasks.size(), 0);
  group_pending_.assign(plan_.group_tasks.size(), 0);
  uint64_t skipped = 0;
  for (size_t t = 0; t < tasks.size(); ++t) {
    const auto& record = state_.tasks[t];
    for (size_t c = 0; c < record.reductions.size(); ++c) {
      if (record.reductions[c].done) continue;
      reduce_queue_.emplace_back(t, c);
      ++group_pending_[tasks[t].group];
    }
    for (uint64_t c = 0; c < record.chunks.size(); ++c) {
      if (record.chunks[c].state == kChunkDone) skipped += tasks[t].tensor_rows(tasks[t].chunk_rows(c));
      else ++chunks_pending_;
    }
  }
  group_reduced_.resize(group_pending_.size());
  for (size_t g = 0; g < group_pending_.size(); ++g) {
    group_reduced_[g] = group_pending_[g] == 0;
    groups_pending_ += group_pending_[g] == 0 ? 0 : 1;
  }
  set_tasks_.resize(plan_.factor_sets().size());
  for (size_t t = 0; t < tasks.size(); ++t) {
    if (tasks[t].factor_set >= 0) set_tasks_[size_t(tasks[t].factor_set)].push_back(t);
  }
  for (size_t s = 0; s < plan_.factor_sets().size(); ++s) {
    const FactorSet& set = plan_.factor_sets()[s];
    const bool stored = find_blob(state_, factor_blob_name(set)) != nullptr;
    factor_done_.emplace_back(size_t(set.items), stored ? 1 : 0);
    for (int item = 0; item < set.items && !stored; ++item) factor_queue_.emplace_back(s, item);
  }
  shard_finished_.assign(plan_.shards.size(), 0);
  for (size_t s = 0; s < plan_.shards.size(); ++s) {
    shard_finished_[s] = is_finished("shard:" + plan_.shards[s].file);
    if (plan_.shards[s].changed && !shard_finished_[s]) ++shards_unfinished_;
  }
  progress_.set_done(skipped);
  blobs_digest_ = blobs_digest(state_.blobs);
  for (size_t t = 0; t < tasks.size(); ++t) enqueue_if_ready(t);
  if (!is_finished("index")) {
    index_staged_ = std::async(std::launch::async, [&plan = plan_, text = std::move(index_text)]() mutable {
      io::stage_file(plan.dst / io::kIndexFileName, text.valid() ? text.get() : output_index_text(plan));
    });
  }
  save(true);
}

bool Coordinator::group_reduced(size_t group) const { return group_reduced_[group] != 0; }

float Coordinator::group_value(size_t group) const {
  float value = 0.0f;
  for (size_t t : plan_.group_tasks[group]) {
    for (const auto& record : state_.tasks[t].reductions) value = std::max(value, record.value);
  }
  return value;
}

bool Coordinator::factors_ready(int set) const {
  if (set < 0) return true;
  const auto& done = factor_done_[size_t(set)];
  return std::all_of(done.begin(), done.end(), [](uint8_t d) { return d != 0; });
}

// A task's chunks are handed out once its group is reduced and its factors are in.
void Coordinator::enqueue_if_ready(size_t t) {
  const Task& task = plan_.tasks()[t];
  if (task_enqueued_[t] || !group_reduced(task.group) || !factors_ready(task.factor_set)) return;
  task_enqueued_[t] = 1;
  const auto& chunks = state_.tasks[t].chunks;
  for (uint64_t c = 0; c < chunks.size(); ++c) {
    if (chunks[c].state != kChunkDone) encode_queue_.emplace_back(t, c);
  }
}

bool Coordinator::is_finished(const std::string& step) const {
  return std::find(state_.finished.begin(), state_.finished.end(), step) != state_.finished.end();
}

void Coordinator::mark_finished(const std::string& step, bool forced) {
  state_.finished.push_back(step);
  dirty_ = true;
  if (forced) save(true);
}

void Coordinator::mark_shard_finished(size_t shard, bool forced) {
  shard_finished_[shard] = 1;
  --shards_unfinished_;
  mark_finished("shard:" + plan_.shards[shard].file, forced);
}

WorkItem Coordinator::next_item(int rank) {
  if (interrupting_) return {};
  const auto take = [](std::deque<ItemKey>& queue) {
    const ItemKey key = queue.front();
    queue.pop_front();
    return key;
  };
  if (!reduce_queue_.empty()) {
    const auto [task, chunk] = take(reduce_queue_);
    return {WorkKind::reduce, int32_t(task), int64_t(chunk), 0.0f};
  }
  if (!factor_queue_.empty()) {
    const auto [set, item] = take(factor_queue_);
    return {WorkKind::factor, int32_t(set), int64_t(item), 0.0f};
  }
  if (!encode_queue_.empty()) {
    const auto [task, chunk] = take(encode_queue_);
    const Task& spec = plan_.tasks()[task];
    send_factors_once(rank, spec.factor_set);
    const float reduction = codec_reduces(spec.codec) ? group_value(spec.group) : 0.0f;
    return {WorkKind::encode, int32_t(task), int64_t(chunk), reduction};
  }
  return {};
}

void Coordinator::send_factors_once(int rank, int set) {
  if (set < 0 || factors_sent_.count({rank, set})) return;
  factors_sent_.insert({rank, set});
  const FactorSet& factor_set = plan_.factor_sets()[size_t(set)];
  const auto bytes = [](const Blob* blob) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(blob->values.data()), blob->values.size() * sizeof(double));
  };
  link_.send(rank, Tag::factors,
             encode(int32_t(set), {bytes(find_blob(state_, gram_blob_name(factor_set))),
                                   bytes(find_blob(state_, factor_blob_name(factor_set)))}));
}

// At least one item (if any is ready), then more while the request wants more items or
// more source bytes.
void Coordinator::on_request(const WorkRequest& request) {
  std::vector<WorkItem> items;
  uint64_t bytes = 0;
  while (items.empty() || int32_t(items.size()) < request.items ||
         (bytes < request.bytes && int32_t(items.size()) < kMaxItemsPerAssign)) {
    const WorkItem item = next_item(request.rank);
    if (item.kind == WorkKind::wait) break;
    bytes += item_source_bytes(plan_, item);
    items.push_back(item);
    spdlog::debug("assign {} task {} index {} -> rank {}", int(item.kind), item.task, item.index, request.rank);
  }
  in_flight_ += int(items.size());
  link_.send(request.rank, Tag::assign, encode_array(items));
}

void Coordinator::on_reduce(const ReduceResult& result) {
  --in_flight_;
  const size_t task = size_t(result.task);
  auto& record = state_.tasks[task].reductions[size_t(result.chunk)];
  // Counted once, as a chunk is (on_chunk_done): a group counted reduced one result early
  // would encode with a scale taken before all of its reductions were in.
  if (record.done) return;
  record.done = 1;
  record.value = result.value;
  changes_.reductions.emplace_back(uint32_t(task), uint64_t(result.chunk));
  const size_t group = plan_.tasks()[task].group;
  if (--group_pending_[group] == 0) {
    group_reduced_[group] = 1;
    --groups_pending_;
    for (size_t t : plan_.group_tasks[group]) enqueue_if_ready(t);
  }
  dirty_ = true;
  crash_point("reduce");
}

void Coordinator::on_factor(const Message& message) {
  --in_flight_;
  const auto header = decode<FactorResult>(message.bytes);
  const FactorSet& set = plan_.factor_sets()[size_t(header.set)];
  const size_t matrix = size_t(set.dim) * size_t(set.dim), values = matrix * size_t(set.items);
  auto& [gram, upper] = partial_factors_[header.set];
  if (gram.empty()) {
    gram.resize(values);
    upper.resize(values);
  }
  const auto body = payload(message.bytes, sizeof(FactorResult));
  std::memcpy(gram.data() + size_t(header.item) * matrix, body.data(), matrix * sizeof(double));
  std::memcpy(upper.data() + size_t(header.item) * matrix, body.data() + matrix * sizeof(double), matrix * sizeof(double));
  factor_done_[size_t(header.set)][size_t(header.item)] = 1;
  // A set's factors reach the checkpoint whole: a partial set is recomputed on resume.
  if (factors_ready(header.set)) {
    const std::vector<uint64_t> shape = {uint64_t(set.items), uint64_t(set.dim), uint64_t(set.dim)};
    state_.blobs.push_back({gram_blob_name(set), shape, std::move(gram)});
    state_.blobs.push_back({factor_blob_name(set), shape, std::move(upper)});
    blobs_digest_ = blobs_digest(state_.blobs);
    base_due_ = true;
    partial_factors_.erase(header.set);
    save(true);
    crash_point("factors");
    for (size_t t : set_tasks_[size_t(header.set)]) enqueue_if_ready(t);
  }
}

void Coordinator::on_chunk_done(const ChunkResult& result) {
  --in_flight_;
  auto& record = state_.tasks[size_t(result.task)].chunks[size_t(result.chunk)];
  if (record.state != kChunkDone) --chunks_pending_;
  record.state = kChunkDone;
  record.checksum = result.checksum;
  record.stats = result.stats;
  record.seconds = result.seconds;
  changes_.chunks.emplace_back(uint32_t(result.task), uint64_t(result.chunk));
  const Task& task = plan_.tasks()[size_t(result.task)];
  progress_.add(task.tensor_rows(task.chunk_rows(uint64_t(result.chunk))), result.rank);
  dirty_ = true;
  crash_point("quantize");
}

void Coordinator::on_dropped(const std::vector<WorkItem>& items) {
  in_flight_ -= int(items.size());
  for (auto item = items.rbegin(); item != items.rend(); ++item) { // the first ends up in front
    const ItemKey key{size_t(item->task), uint64_t(item->index)};
    if (item->kind == WorkKind::reduce) reduce_queue_.push_front(key);
    if (item->kind == WorkKind::encode) encode_queue_.push_front(key);
    if (item->kind == WorkKind::factor) factor_queue_.push_front(key);
  }
}

void Coordinator::on_finalized(int shard) {
  finalizing_.erase(size_t(shard));
  // Saved with the next save: a renamed shard the checkpoint does not record is found
  // under its final name on resume (finalize_ready_shards) and recorded then.
  mark_shard_finished(size_t(shard), false);
}

void Coordinator::on_interrupt() {
  if (interrupting_) return;
  interrupting_ = true;
  spdlog::info("stop requested: finishing in-flight work, flushing the checkpoint");
  link_.send_all(Tag::cancel, {});
}

// Shards are renamed only once every task of the job is encoded and recorded: rows are
// checked for NaN codes as they are encoded, so a bad row late in the last task must
// still leave no file under its final name.
void Coordinator::finalize_ready_shards() {
  if (chunks_pending_ > 0 || shards_unfinished_ == finalizing_.size()) return;
  bool saved = false;
  for (size_t s = 0; s < plan_.shards.size(); ++s) {
    const ShardPlan& shard = plan_.shards[s];
    if (!shard.changed || finalizing_.count(s) || shard_finished_[s]) continue;
    if (std::filesystem::exists(plan_.dst / shard.file)) { // renamed just before a crash
      mark_shard_finished(s, true);
      continue;
    }
    if (!saved) save(true, false); // every chunk is recorded before the first rename (the rank figures come with the last save)
    saved = true;
    std::vector<float> scalars;
    for (size_t e : shard.group_scalar_entries) {
      const Task& task = plan_.tasks()[shard.entries[e].task];
      scalars.push_back(group_scalar(task.codec, group_value(task.group)));
    }
    const std::span<const uint8_t> scalar_bytes(reinterpret_cast<const uint8_t*>(scalars.data()), scalars.size() * sizeof(float));
    finalizing_.insert(s);
    link_.send(outputs_.writer_of(s), Tag::finalize, encode(FinalizeShard{int32_t(s), int32_t(scalars.size())}, {scalar_bytes}));
  }
}

// The index, config (with the recipe's side files) and report, each written and fsynced
// under its staged name, then renamed: the report last, after one folder fsync for the
// others, so that an output holding a report holds them too. One save then records the
// three steps (a crash before it leaves them to be written again on resume).
void Coordinator::finish_run() {
  std::vector<std::filesystem::path> staged;
  if (!is_finished("index")) {
    crash_point("index");
    index_staged_.get();
    staged.push_back(plan_.dst / io::kIndexFileName);
  }
  if (!is_finished("config")) {
    crash_point("config");
    staged.push_back(plan_.dst / kConfigFile);
    io::stage_json_file(staged.back(), plan_.recipe_plan.config);
    for (const auto& [file, json] : plan_.recipe_plan.side_files) {
      staged.push_back(plan_.dst / file);
      io::stage_json_file(staged.back(), json);
    }
  }
  for (const auto& path : staged) io::rename_staged_file(path);
  if (!staged.empty()) io::fsync_folder(plan_.dst);
  for (const char* step : {"index", "config"}) {
    if (!is_finished(step)) mark_finished(step, false);
  }
  if (!is_finished("report")) {
    crash_point("report");
    const double wall = elapsed_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    io::write_json_file(plan_.dst / plan_.report_file(), build_report(plan_, state_, ranks_, wall));
    mark_finished("report", false);
  }
  save(true);
  progress_.maybe_print("done", true);
  progress_.finish();
  link_.send_all(Tag::stop, encode(int32_t(0)));
  ended_ = true;
}

void Coordinator::save(bool force, bool rank_figures) {
  const auto now = std::chrono::steady_clock::now();
  // Space saves so that they take no more than ~5% of the run. Paced by the journal
  // appends only: a base rewrite (at the start, when blobs change, once the journal
  // outgrows the base) is paid for by the appends before it, and pacing by it would leave
  // the first seconds of a large plan unrecorded.
  const double interval = std::max(kSaveIntervalSeconds, 20.0 * typical_append_seconds());
  if (!force && (!dirty_ || std::chrono::duration<double>(now - last_save_).count() < interval)) return;
  state_.elapsed_seconds = elapsed_before_ + std::chrono::duration<double>(now - start_).count();
  ++state_.generation;
  state_.updated_unix = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const bool base = base_due_;
  if (base) {
    save_checkpoint(checkpoint_path_, state_, blobs_digest_);
    base_bytes_ = std::filesystem::file_size(checkpoint_path_);
    journal_bytes_ = 0;
    base_due_ = false;
  } else {
    journal_bytes_ = append_journal(checkpoint_path_, state_, changes_);
    base_due_ = journal_bytes_ > base_bytes_;
  }
  changes_ = CheckpointChanges{};
  changes_.finished_from = state_.finished.size();
  crash_point("save");
  if (rank_figures) write_rank_figures(force);
  dirty_ = false;
  last_save_ = std::chrono::steady_clock::now();
  if (!base) append_seconds_[appends_++ % append_seconds_.size()] = std::chrono::duration<double>(last_save_ - now).count();
}

double Coordinator::typical_append_seconds() const {
  const size_t known = std::min(appends_, append_seconds_.size());
  if (known == 0) return 0.0;
  auto sorted = append_seconds_;
  std::sort(sorted.begin(), sorted.begin() + long(known));
  return sorted[(known - 1) / 2]; // the lower median: of two, a stall is the one left out
}

// For `shardq status`: each rank's host, threads and rows this run, beside the checkpoint
// (not part of it: a resume starts them over). Every few seconds, or with a forced save.
void Coordinator::write_rank_figures(bool force) {
  constexpr double kIntervalSeconds = 5.0;
  const auto now = std::chrono::steady_clock::now();
  if (!force && std::chrono::duration<double>(now - last_rank_figures_).count() < kIntervalSeconds) return;
  last_rank_figures_ = now;
  nlohmann::ordered_json figures;
  figures["generation"] = state_.generation;
  figures["run_seconds"] = std::chrono::duration<double>(now - start_).count();
  figures["ranks"] = nlohmann::ordered_json::array();
  for (size_t r = 0; r < ranks_.size(); ++r) {
    figures["ranks"].push_back({{"rank", r}, {"host", ranks_[r].host}, {"threads", ranks_[r].threads},
                                {"rows", progress_.rank_rows()[r]}});
  }
  io::write_json_file(rank_figures_path(checkpoint_path_), figures);
}

void Coordinator::tick() {
  if (ended_) return;
  if (stop_requested()) on_interrupt();
  if (interrupting_) {
    if (in_flight_ > 0 || !finalizing_.empty()) return;
    save(true);
    progress_.finish();
    spdlog::warn("interrupted: checkpoint {} is saved; run the same command to resume", checkpoint_path_.string());
    link_.send_all(Tag::stop, encode(int32_t(75)));
    ended_ = true;
    return;
  }
  save(false);
  progress_.maybe_print(groups_pending_ == 0 ? "encode" : "reduce");
  finalize_ready_shards();
  if (shards_unfinished_ == 0 && in_flight_ == 0) finish_run();
}

} // namespace shardq
