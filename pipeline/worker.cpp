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

constexpr size_t kReadAhead = 1; // items read and waiting for the compute thread

std::span<const uint8_t> as_bytes(const std::vector<double>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(double)};
}

} // namespace

Worker::Worker(const Plan& plan, OutputFiles& outputs, int rank) : plan_(plan), outputs_(outputs), rank_(rank) {
  for (const auto& shard : plan.shards) readers_.push_back(std::make_unique<io::Reader>(plan.src / shard.file));
  gptq_pin_blas_threads();
  writer_ = std::make_unique<ChunkWriter>(plan, outputs,
                                          [this](const ChunkResult& result) { emit(0, Tag::chunk_done, encode(result)); });
  reader_thread_ = std::thread([this] { read_loop(); });
  compute_thread_ = std::thread([this] { compute_loop(); });
}

Worker::~Worker() { stop(); }

void Worker::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (reader_thread_.joinable()) reader_thread_.join();
  if (compute_thread_.joinable()) compute_thread_.join();
  writer_->stop();
}

void Worker::push(const WorkItem& item) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(item);
  }
  changed_.notify_all();
}

size_t Worker::load() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + ready_.size() + (reading_ ? 1 : 0) + (computing_ ? 1 : 0);
}

void Worker::install_factors(size_t table, std::shared_ptr<const LayerFactors> factors) {
  std::lock_guard lock(mutex_);
  factors_[table] = std::move(factors);
}

void Worker::write_received(const ChunkResult& result, std::span<const uint8_t> packed, std::span<const uint8_t> scales) {
  ChunkBytes bytes = writer_->recycled();
  bytes.packed.assign(packed.begin(), packed.end());
  bytes.scales.assign(scales.begin(), scales.end());
  writer_->push(result, std::move(bytes));
}

void Worker::cancel() {
  std::lock_guard lock(mutex_);
  cancel_ = true;
  for (const auto& item : queue_) results_.push_back({0, Tag::dropped, encode(item)});
  queue_.clear();
  for (auto& read : ready_) {
    results_.push_back({0, Tag::dropped, encode(read.item)});
    if (read.rows) free_rows_.push_back(std::move(read.rows));
  }
  ready_.clear();
}

std::optional<Outgoing> Worker::pop_result() {
  std::lock_guard lock(mutex_);
  if (results_.empty()) return std::nullopt;
  Outgoing out = std::move(results_.front());
  results_.pop_front();
  return out;
}

void Worker::rethrow_if_failed() {
  writer_->rethrow_if_failed();
  std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
}

void Worker::wait_for_result(std::chrono::microseconds timeout) {
  std::unique_lock lock(mutex_);
  result_ready_.wait_for(lock, timeout, [&] { return !results_.empty() || failure_; });
}

void Worker::emit(int dest, Tag tag, std::vector<uint8_t> bytes) {
  std::lock_guard lock(mutex_);
  results_.push_back({dest, tag, std::move(bytes)});
  result_ready_.notify_one();
}

void Worker::fail(std::exception_ptr failure) {
  std::lock_guard lock(mutex_);
  if (!failure_) failure_ = failure;
  reading_ = computing_ = false;
  result_ready_.notify_one();
}

// Reads one item ahead of the compute thread: its source rows are in memory by the time
// the current item is done.
void Worker::read_loop() {
  for (;;) {
    ReadItem read;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || (!queue_.empty() && ready_.size() < kReadAhead); });
      if (stopping_) return;
      read.item = queue_.front();
      queue_.pop_front();
      reading_ = true;
      if (read.item.kind == WorkKind::amax || read.item.kind == WorkKind::quantize) {
        if (free_rows_.empty()) free_rows_.push_back(std::make_unique<SourceRows>());
        read.rows = std::move(free_rows_.back());
        free_rows_.pop_back();
      }
    }
    try {
      if (read.rows) read_rows(read.item, *read.rows);
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    {
      std::lock_guard lock(mutex_);
      reading_ = false;
      if (cancel_) {
        results_.push_back({0, Tag::dropped, encode(read.item)});
        if (read.rows) free_rows_.push_back(std::move(read.rows));
      } else {
        ready_.push_back(std::move(read));
      }
    }
    changed_.notify_all();
  }
}

void Worker::compute_loop() {
  for (;;) {
    ReadItem read;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
      if (stopping_) return;
      read = std::move(ready_.front());
      ready_.pop_front();
      computing_ = true;
    }
    changed_.notify_all(); // the reader may read the next item
    try {
      if (cancel_) emit(0, Tag::dropped, encode(read.item));
      else process(read);
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    std::lock_guard lock(mutex_);
    computing_ = false;
    if (read.rows) free_rows_.push_back(std::move(read.rows));
  }
}

void Worker::process(ReadItem& read) {
  switch (read.item.kind) {
    case WorkKind::amax: do_amax(read.item, *read.rows); break;
    case WorkKind::factor: do_factor(read.item); break;
    case WorkKind::quantize: do_quantize(read.item, *read.rows); break;
    case WorkKind::wait: break;
  }
}

// Quantize items need every row; amax items only the scales (the stage reads the few rows
// it needs itself).
void Worker::read_rows(const WorkItem& item, SourceRows& rows) const {
  const TablePlan& table = plan_.tables[size_t(item.table)];
  const io::Reader& reader = *readers_[table.shard];
  const uint64_t chunk = uint64_t(item.index), first = table.chunk_first_row(chunk), count = table.chunk_rows(chunk);
  const io::TensorInfo& scale = reader.tensor(table.source_scale);
  rows.scales.resize(count * scale.row_bytes());
  reader.read_rows(scale, first, count, rows.scales);
  if (item.kind == WorkKind::amax) {
    rows.codes.clear(); // the stage reads the codes it needs itself
    return;
  }
  const io::TensorInfo& weight = reader.tensor(table.source_weight);
  rows.codes.resize(count * weight.row_bytes());
  reader.read_rows(weight, first, count, rows.codes);
}

Fp8RowChunk Worker::chunk_view(const WorkItem& item, const SourceRows& rows) const {
  const TablePlan& table = plan_.tables[size_t(item.table)];
  const uint64_t chunk = uint64_t(item.index);
  return {table.source_weight, table.chunk_first_row(chunk), table.chunk_rows(chunk), table.cols, rows.codes, rows.scales,
          table.source_scale};
}

void Worker::do_amax(const WorkItem& item, const SourceRows& rows) {
  const auto start = std::chrono::steady_clock::now();
  const TablePlan& table = plan_.tables[size_t(item.table)];
  const io::Reader& reader = *readers_[table.shard];
  const io::TensorInfo& weight = reader.tensor(table.source_weight);
  const uint64_t first_row = table.chunk_first_row(uint64_t(item.index));
  const auto read_codes = [&](uint64_t first, uint64_t count, std::span<uint8_t> codes) {
    reader.read_rows(weight, first_row + first, count, codes);
  };
  const float amax = amax_fp8_chunk_from_scales(chunk_view(item, rows), read_codes);
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

void Worker::do_quantize(const WorkItem& item, const SourceRows& rows) {
  const auto start = std::chrono::steady_clock::now();
  const size_t table_index = size_t(item.table);
  const TablePlan& table = plan_.tables[table_index];
  const Fp8RowChunk chunk = chunk_view(item, rows);
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
  ChunkResult result{item.table, item.index, chunk_checksum(chunk_out_), seconds_since(start), rank_, chunk_out_.stats};
  if (outputs_.writes_shard(table.shard)) {
    // The writer reports the chunk once it is durable; its buffers come back for the next.
    ChunkBytes bytes = writer_->recycled();
    std::swap(bytes.packed, chunk_out_.packed);
    std::swap(bytes.scales, chunk_out_.scales);
    writer_->push(result, std::move(bytes));
  } else {
    emit(outputs_.writer_of(table.shard), Tag::chunk_data, encode(result, {chunk_out_.packed, chunk_out_.scales}));
  }
}

} // namespace shardq
