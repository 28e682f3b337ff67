#include "pipeline/worker.h"

#include <fmt/format.h>

#include <chrono>

#include "kernels/gptq.h"
#include "pipeline/pipeline_error.h"
#include "pipeline/signals.h"
#include "stages/amax.h"
#include "stages/factors.h"
#include "stages/pack.h"

namespace shardq {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::span<const uint8_t> as_bytes(const std::vector<double>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(double)};
}

} // namespace

Worker::Worker(const Plan& plan, OutputFiles& outputs, int rank) : plan_(plan), outputs_(outputs), rank_(rank) {
  for (const auto& shard : plan.shards) readers_.push_back(std::make_unique<io::Reader>(plan.src / shard.file));
  gptq_pin_blas_threads();
  thread_ = std::thread([this] { run(); });
}

Worker::~Worker() { stop(); }

void Worker::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Worker::push(const WorkItem& item) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(item);
  }
  wake_.notify_all();
}

size_t Worker::load() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + (running_item_ ? 1 : 0);
}

void Worker::install_factors(size_t table, std::shared_ptr<const LayerFactors> factors) {
  std::lock_guard lock(mutex_);
  factors_[table] = std::move(factors);
}

void Worker::cancel() {
  std::lock_guard lock(mutex_);
  cancel_ = true;
  for (const auto& item : queue_) results_.push_back({0, Tag::dropped, encode(item)});
  queue_.clear();
}

std::optional<Outgoing> Worker::pop_result() {
  std::lock_guard lock(mutex_);
  if (results_.empty()) return std::nullopt;
  Outgoing out = std::move(results_.front());
  results_.pop_front();
  return out;
}

void Worker::rethrow_if_failed() {
  std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
}

void Worker::emit(int dest, Tag tag, std::vector<uint8_t> bytes) {
  std::lock_guard lock(mutex_);
  results_.push_back({dest, tag, std::move(bytes)});
}

void Worker::run() {
  for (;;) {
    WorkItem item;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      item = queue_.front();
      queue_.pop_front();
      running_item_ = true;
    }
    try {
      process(item);
    } catch (...) {
      std::lock_guard lock(mutex_);
      failure_ = std::current_exception();
      running_item_ = false;
      return;
    }
    std::lock_guard lock(mutex_);
    running_item_ = false;
  }
}

void Worker::process(const WorkItem& item) {
  switch (item.kind) {
    case WorkKind::amax: do_amax(item); break;
    case WorkKind::factor: do_factor(item); break;
    case WorkKind::quantize: do_quantize(item); break;
    case WorkKind::wait: break;
  }
}

Fp8RowChunk Worker::read_chunk(const TablePlan& table, uint64_t chunk, std::vector<uint8_t>& codes,
                               std::vector<uint8_t>& scales) const {
  const io::Reader& reader = *readers_[table.shard];
  const uint64_t first = table.chunk_first_row(chunk), rows = table.chunk_rows(chunk);
  const io::TensorInfo& weight = reader.tensor(table.source_weight);
  const io::TensorInfo& scale = reader.tensor(table.source_scale);
  codes.resize(rows * weight.row_bytes());
  scales.resize(rows * scale.row_bytes());
  reader.read_rows(weight, first, rows, codes);
  reader.read_rows(scale, first, rows, scales);
  return {table.source_weight, first, rows, table.cols, codes, scales, table.source_scale};
}

void Worker::do_amax(const WorkItem& item) {
  const auto start = std::chrono::steady_clock::now();
  const TablePlan& table = plan_.tables[size_t(item.table)];
  const float amax = amax_fp8_chunk(read_chunk(table, uint64_t(item.index), codes_, scales_));
  emit(0, Tag::amax_result, encode(AmaxResult{item.table, item.index, amax, seconds_since(start)}));
}

const std::vector<float>& Worker::wkv(size_t table) {
  auto it = wkv_cache_.find(table);
  if (it != wkv_cache_.end()) return it->second;
  return wkv_cache_[table] = read_dequantized_wkv(plan_, plan_.tables[table].layer);
}

void Worker::do_factor(const WorkItem& item) {
  const size_t table = size_t(item.table);
  const auto& weights = wkv(table);
  const int in_cols = plan_.layout->columns() * kHashColumnWidth;
  const int out_rows = int(weights.size() / size_t(in_cols));
  const HashColumnFactor factor = compute_column_factor(weights.data(), out_rows, in_cols, int(item.index),
                                                       plan_.job.gptq_damp, plan_.tables[table].layer);
  emit(0, Tag::factor_result, encode(FactorResult{item.table, int32_t(item.index)}, {as_bytes(factor.gram), as_bytes(factor.upper)}));
}

void Worker::do_quantize(const WorkItem& item) {
  const auto start = std::chrono::steady_clock::now();
  const size_t table_index = size_t(item.table);
  const TablePlan& table = plan_.tables[table_index];
  const Fp8RowChunk chunk = read_chunk(table, uint64_t(item.index), codes_, scales_);
  QuantizeParams params = make_quantize_params(parse_quant_method(plan_.job.method), int(plan_.job.mse_candidates),
                                               plan_.job.mse_alpha_min, item.global_scale);
  params.gptq_block = int(plan_.job.gptq_block);
  params.layer = table.layer;
  params.layout = plan_.layout.get();
  {
    std::lock_guard lock(mutex_);
    const auto it = factors_.find(table_index);
    if (it != factors_.end()) params.factors = it->second.get();
  }
  check_fp8_chunk(chunk);
  if (!quantize_chunk_nvfp4(chunk, params, chunk_out_, &cancel_)) {
    emit(0, Tag::dropped, encode(item));
    return;
  }
  test_chunk_delay();
  ChunkResult result{item.table, item.index, chunk_checksum(chunk_out_), 0.0, rank_, chunk_out_.stats};
  const int writer = outputs_.writer_of(table.shard);
  if (outputs_.writes_shard(table.shard)) {
    outputs_.write_chunk(table, chunk.first_row, chunk.rows, chunk_out_.packed, chunk_out_.scales);
    result.seconds = seconds_since(start);
    emit(0, Tag::chunk_done, encode(result));
  } else {
    result.seconds = seconds_since(start);
    emit(writer, Tag::chunk_data, encode(result, {chunk_out_.packed, chunk_out_.scales}));
  }
}

} // namespace shardq
