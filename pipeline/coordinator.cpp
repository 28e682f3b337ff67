#include "pipeline/coordinator.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "kernels/formats.h"
#include "pipeline/io/config.h"
#include "pipeline/pipeline_error.h"
#include "pipeline/report.h"
#include "pipeline/signals.h"

namespace shardq {
namespace {

constexpr double kSaveIntervalSeconds = 0.5;
constexpr size_t kFactorMatrix = 256 * 256;

uint64_t total_rows(const Plan& plan) {
  uint64_t rows = 0;
  for (const auto& t : plan.tables) rows += t.rows;
  return rows;
}

} // namespace

Coordinator::Coordinator(const Plan& plan, Link& link, const OutputFiles& outputs, CheckpointState state,
                         std::filesystem::path checkpoint_path)
    : plan_(plan), link_(link), outputs_(outputs), state_(std::move(state)),
      checkpoint_path_(std::move(checkpoint_path)), last_save_(std::chrono::steady_clock::now()),
      elapsed_before_(state_.elapsed_seconds), start_(std::chrono::steady_clock::now()),
      progress_(total_rows(plan), uint64_t(plan.tables.empty() ? 0 : plan.tables[0].cols + plan.tables[0].cols / 32)) {
  uint64_t skipped = 0;
  for (size_t t = 0; t < plan_.tables.size(); ++t) {
    const auto chunks = plan_.tables[t].chunks();
    amax_assigned_.emplace_back(chunks, 0);
    chunk_assigned_.emplace_back(chunks, 0);
    factor_assigned_.emplace_back(plan_.layout->columns(), 0);
    factor_done_.emplace_back(plan_.layout->columns(), 0);
    for (uint64_t c = 0; c < chunks; ++c) {
      if (state_.tables[t].chunks[c].state == kChunkDone) skipped += plan_.tables[t].chunk_rows(c);
    }
    for (const auto& record : state_.factors) {
      if (record.layer == plan_.tables[t].layer) std::fill(factor_done_[t].begin(), factor_done_[t].end(), 1);
    }
  }
  progress_.set_done(skipped);
  factors_digest_ = factors_digest(state_.factors);
  save(true);
}

bool Coordinator::amax_complete(size_t table) const {
  const auto& chunks = state_.tables[table].amax_chunks;
  return std::all_of(chunks.begin(), chunks.end(), [](const AmaxRecord& r) { return r.done != 0; });
}

bool Coordinator::factors_complete(size_t table) const {
  if (!uses_factors()) return true;
  return std::all_of(factor_done_[table].begin(), factor_done_[table].end(), [](uint8_t d) { return d != 0; });
}

bool Coordinator::table_complete(size_t table) const {
  const auto& chunks = state_.tables[table].chunks;
  return std::all_of(chunks.begin(), chunks.end(), [](const ChunkRecord& r) { return r.state == kChunkDone; });
}

float Coordinator::global_scale(size_t table) const {
  float amax = 0.0f;
  for (const auto& record : state_.tables[table].amax_chunks) amax = std::max(amax, record.amax);
  return Nvfp4::global_scale(amax);
}

bool Coordinator::is_finished(const std::string& step) const {
  return std::find(state_.finished.begin(), state_.finished.end(), step) != state_.finished.end();
}

void Coordinator::mark_finished(const std::string& step) {
  state_.finished.push_back(step);
  save(true);
}

WorkItem Coordinator::next_item(int rank) {
  WorkItem item;
  if (interrupting_) return item;
  for (size_t t = 0; t < plan_.tables.size(); ++t) {
    for (size_t c = 0; c < amax_assigned_[t].size(); ++c) {
      if (!state_.tables[t].amax_chunks[c].done && !amax_assigned_[t][c]) {
        amax_assigned_[t][c] = 1;
        return {WorkKind::amax, int32_t(t), int64_t(c), 0.0f};
      }
    }
  }
  for (size_t t = 0; t < plan_.tables.size() && uses_factors(); ++t) {
    for (size_t c = 0; c < factor_done_[t].size(); ++c) {
      if (!factor_done_[t][c] && !factor_assigned_[t][c]) {
        factor_assigned_[t][c] = 1;
        return {WorkKind::factor, int32_t(t), int64_t(c), 0.0f};
      }
    }
  }
  for (size_t t = 0; t < plan_.tables.size(); ++t) {
    if (!amax_complete(t) || !factors_complete(t)) continue;
    for (size_t c = 0; c < chunk_assigned_[t].size(); ++c) {
      if (state_.tables[t].chunks[c].state != kChunkDone && !chunk_assigned_[t][c]) {
        chunk_assigned_[t][c] = 1;
        send_factors_once(rank, t);
        return {WorkKind::quantize, int32_t(t), int64_t(c), global_scale(t)};
      }
    }
  }
  return item;
}

void Coordinator::send_factors_once(int rank, size_t table) {
  if (!uses_factors() || factors_sent_.count({rank, table})) return;
  factors_sent_.insert({rank, table});
  const auto it = std::find_if(state_.factors.begin(), state_.factors.end(),
                               [&](const FactorRecord& r) { return r.layer == plan_.tables[table].layer; });
  const auto bytes = [](const std::vector<double>& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(double));
  };
  link_.send(rank, Tag::factors, encode(int32_t(table), {bytes(it->gram), bytes(it->upper)}));
}

void Coordinator::on_request(int rank) {
  const WorkItem item = next_item(rank);
  if (item.kind != WorkKind::wait) {
    ++in_flight_;
    spdlog::debug("assign {} table {} index {} -> rank {}", int(item.kind), item.table, item.index, rank);
  }
  link_.send(rank, Tag::assign, encode(item));
}

void Coordinator::on_amax(const AmaxResult& result) {
  --in_flight_;
  auto& record = state_.tables[size_t(result.table)].amax_chunks[size_t(result.chunk)];
  record.done = 1;
  record.amax = result.amax;
  dirty_ = true;
  crash_point("amax");
}

void Coordinator::on_factor(const Message& message) {
  --in_flight_;
  const auto header = decode<FactorResult>(message.bytes);
  const size_t table = size_t(header.table), column = size_t(header.column);
  auto& record = partial_factors_[table];
  if (record.gram.empty()) {
    record = {plan_.tables[table].layer, std::vector<double>(kFactorValues), std::vector<double>(kFactorValues)};
  }
  const auto body = payload(message.bytes, sizeof(FactorResult));
  std::memcpy(record.gram.data() + column * kFactorMatrix, body.data(), kFactorMatrix * sizeof(double));
  std::memcpy(record.upper.data() + column * kFactorMatrix, body.data() + kFactorMatrix * sizeof(double),
              kFactorMatrix * sizeof(double));
  factor_done_[table][column] = 1;
  // A layer's factors reach the checkpoint whole: a partial set is recomputed on resume.
  if (factors_complete(table)) {
    state_.factors.push_back(std::move(record));
    factors_digest_ = factors_digest(state_.factors);
    partial_factors_.erase(table);
    save(true);
    crash_point("factors");
  }
}

void Coordinator::on_chunk_done(const ChunkResult& result) {
  --in_flight_;
  auto& record = state_.tables[size_t(result.table)].chunks[size_t(result.chunk)];
  record.state = kChunkDone;
  record.checksum = result.checksum;
  record.stats = result.stats;
  record.seconds = result.seconds;
  progress_.add(plan_.tables[size_t(result.table)].chunk_rows(uint64_t(result.chunk)));
  dirty_ = true;
  crash_point("quantize");
}

void Coordinator::on_dropped(const WorkItem& item) {
  --in_flight_;
  const size_t t = size_t(item.table), i = size_t(item.index);
  if (item.kind == WorkKind::amax) amax_assigned_[t][i] = 0;
  if (item.kind == WorkKind::quantize) chunk_assigned_[t][i] = 0;
  if (item.kind == WorkKind::factor) factor_assigned_[t][i] = 0;
}

void Coordinator::on_finalized(int shard) {
  finalizing_.erase(size_t(shard));
  mark_finished("shard:" + plan_.shards[size_t(shard)].file);
}

void Coordinator::on_interrupt() {
  if (interrupting_) return;
  interrupting_ = true;
  spdlog::warn("stop requested: finishing in-flight work, flushing the checkpoint");
  link_.send_all(Tag::cancel, encode(int32_t(0)));
}

// Shards are renamed only once every table of the job is quantized and recorded: rows
// are checked for NaN codes as they are quantized, so a bad row late in the last table
// must still leave no file under its final name.
void Coordinator::finalize_ready_shards() {
  for (size_t t = 0; t < plan_.tables.size(); ++t)
    if (!table_complete(t)) return;
  for (size_t s = 0; s < plan_.shards.size(); ++s) {
    const ShardPlan& shard = plan_.shards[s];
    if (!shard.changed || finalizing_.count(s) || is_finished("shard:" + shard.file)) continue;
    if (std::filesystem::exists(plan_.dst / shard.file)) { // renamed just before a crash
      mark_finished("shard:" + shard.file);
      continue;
    }
    save(true); // every chunk of the shard is recorded before the rename
    FinalizeShard message{int32_t(s), int32_t(shard.tables.size()), {}};
    for (size_t i = 0; i < shard.tables.size(); ++i) message.global_scales[i] = global_scale(shard.tables[i]);
    finalizing_.insert(s);
    link_.send(outputs_.writer_of(s), Tag::finalize, encode(message));
  }
}

void Coordinator::finish_run() {
  if (!is_finished("index")) {
    crash_point("index");
    io::write_json_file(plan_.dst / kIndexFile, output_index(plan_));
    mark_finished("index");
  }
  if (!is_finished("config")) {
    crash_point("config");
    io::write_config(plan_.dst / kConfigFile, output_config(plan_));
    mark_finished("config");
  }
  if (!is_finished("report")) {
    crash_point("report");
    const double wall = elapsed_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    io::write_json_file(plan_.dst / kReportFile, build_report(plan_, state_, link_.size(), wall));
    mark_finished("report");
  }
  progress_.maybe_print("done", true);
  progress_.finish();
  link_.send_all(Tag::stop, encode(int32_t(0)));
  ended_ = true;
}

void Coordinator::save(bool force) {
  const auto now = std::chrono::steady_clock::now();
  // A save rewrites the whole generation (the GPTQ factors stay in their write-once
  // file): space saves so that they never take more than ~5% of the run.
  const double interval = std::max(kSaveIntervalSeconds, 20.0 * last_save_seconds_);
  if (!force && (!dirty_ || std::chrono::duration<double>(now - last_save_).count() < interval)) return;
  state_.elapsed_seconds = elapsed_before_ + std::chrono::duration<double>(now - start_).count();
  ++state_.generation;
  state_.updated_unix = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  save_checkpoint(checkpoint_path_, state_, factors_digest_);
  crash_point("save");
  dirty_ = false;
  last_save_ = std::chrono::steady_clock::now();
  last_save_seconds_ = std::chrono::duration<double>(last_save_ - now).count();
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
  bool all_amax = true;
  for (size_t t = 0; t < plan_.tables.size(); ++t) all_amax = all_amax && amax_complete(t);
  progress_.maybe_print(all_amax ? "quantize" : "amax");
  finalize_ready_shards();
  const bool all_shards = std::all_of(plan_.shards.begin(), plan_.shards.end(), [&](const ShardPlan& s) {
    return !s.changed || is_finished("shard:" + s.file);
  });
  if (all_shards && in_flight_ == 0) finish_run();
}

} // namespace shardq
