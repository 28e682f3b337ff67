#include "pipeline/worker.h"

#include <fmt/format.h>

#include <chrono>

#include "kernels/gptq.h"
#include "pipeline/pipeline_error.h"
#include "pipeline/test_hooks.h"
#include "stages/amax.h"
#include "stages/factors.h"

namespace shardq {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::span<const uint8_t> as_bytes(const std::vector<double>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(double)};
}

} // namespace

Worker::Worker(const Plan& plan, OutputFiles& outputs, int rank, int threads)
    : plan_(plan), outputs_(outputs), rank_(rank), threads_(threads) {
  for (const auto& shard : plan.shards) readers_.push_back(&plan.source_readers->get(shard.file));
  gptq_pin_blas_threads();
  writer_ = std::make_unique<ChunkWriter>(plan, outputs,
                                          [this](const ChunkResult& result) { emit(0, Tag::chunk_done, encode(result)); });
  reader_thread_ = std::thread([this] { read_loop(); });
  for (int t = 0; t < threads_; ++t) compute_threads_.emplace_back([this] { compute_loop(); });
}

Worker::~Worker() { stop(); }

void Worker::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (reader_thread_.joinable()) reader_thread_.join();
  for (auto& thread : compute_threads_) {
    if (thread.joinable()) thread.join();
  }
  writer_->stop();
}

void Worker::push(const WorkItem& item) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(item);
    queued_bytes_ += item_source_bytes(plan_, item);
  }
  changed_.notify_all();
}

size_t Worker::load() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + ready_.size() + (reading_ ? 1 : 0) + size_t(computing_);
}

uint64_t Worker::queued_bytes() const {
  std::lock_guard lock(mutex_);
  return queued_bytes_;
}

void Worker::install_factors(int set, std::shared_ptr<const LayerFactors> factors) {
  std::lock_guard lock(mutex_);
  factors_[set] = std::move(factors);
}

void Worker::write_received(const ChunkResult& result, std::span<const uint8_t> buffers) {
  const Task& task = plan_.tasks()[size_t(result.task)];
  const uint64_t rows = task.chunk_rows(uint64_t(result.chunk));
  ChunkBytes bytes = writer_->recycled();
  bytes.buffers.resize(task.outputs.size());
  size_t at = 0;
  for (size_t o = 0; o < task.outputs.size(); ++o) {
    const size_t size = rows * tensor_row_bytes(task.outputs[o]);
    if (at + size > buffers.size()) {
      throw PipelineError(fmt::format("rank {}: chunk {} of {} arrived with {} bytes, fewer than its outputs need", rank_,
                                      result.chunk, task.name, buffers.size()));
    }
    bytes.buffers[o].assign(buffers.begin() + long(at), buffers.begin() + long(at + size));
    at += size;
  }
  writer_->push(result, std::move(bytes));
}

void Worker::cancel() {
  std::lock_guard lock(mutex_);
  cancel_ = true;
  // Everything not yet computing goes back to rank 0 in one message.
  std::vector<WorkItem> dropped(queue_.begin(), queue_.end());
  queue_.clear();
  for (auto& read : ready_) {
    dropped.push_back(read.item);
    if (read.rows) free_rows_.push_back(std::move(read.rows));
  }
  ready_.clear();
  if (!dropped.empty()) results_.push_back({0, Tag::dropped, encode_items(dropped)});
  queued_bytes_ = 0; // the item being read is dropped by the reader
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
  reading_ = false;
  computing_ = 0;
  result_ready_.notify_one();
}

// Reads ahead of the compute threads, one item per thread at most: the next item's
// source rows are in memory by the time a thread is free.
void Worker::read_loop() {
  for (;;) {
    ReadItem read;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || (!queue_.empty() && ready_.size() < size_t(threads_)); });
      if (stopping_) return;
      read.item = queue_.front();
      queue_.pop_front();
      reading_ = true;
      if (read.item.kind == WorkKind::reduce || read.item.kind == WorkKind::encode) {
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
        queued_bytes_ -= std::min(queued_bytes_, item_source_bytes(plan_, read.item));
        results_.push_back({0, Tag::dropped, encode_items({read.item})});
        if (read.rows) free_rows_.push_back(std::move(read.rows));
      } else {
        ready_.push_back(std::move(read));
      }
    }
    changed_.notify_all();
  }
}

void Worker::compute_loop() {
  EncodedChunk out; // this thread's output buffers, reused from chunk to chunk
  for (;;) {
    ReadItem read;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
      if (stopping_) return;
      read = std::move(ready_.front());
      ready_.pop_front();
      queued_bytes_ -= std::min(queued_bytes_, item_source_bytes(plan_, read.item));
      ++computing_;
    }
    changed_.notify_all(); // the reader may read the next item
    try {
      if (cancel_) emit(0, Tag::dropped, encode_items({read.item}));
      else process(read, out);
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    std::lock_guard lock(mutex_);
    --computing_;
    if (read.rows) free_rows_.push_back(std::move(read.rows));
  }
}

void Worker::process(ReadItem& read, EncodedChunk& out) {
  switch (read.item.kind) {
    case WorkKind::reduce: do_reduce(read.item, *read.rows); break;
    case WorkKind::factor: do_factor(read.item); break;
    case WorkKind::encode: do_encode(read.item, *read.rows, out); break;
    case WorkKind::wait: break;
  }
}

const io::Reader& Worker::reader_of(const std::string& tensor) const { return *readers_[plan_.source.at(tensor).shard]; }

// Encode items need every input row; reductions only the inputs they read whole (an amax
// reads the scales and then the few rows of codes that can decide it).
void Worker::read_rows(const WorkItem& item, SourceRows& rows) const {
  const Task& task = plan_.tasks()[size_t(item.task)];
  const uint64_t chunk = uint64_t(item.index), first = task.chunk_first_row(chunk), count = task.chunk_rows(chunk);
  rows.inputs.resize(task.inputs.size());
  std::vector<bool> wanted(task.inputs.size(), item.kind != WorkKind::reduce);
  if (item.kind == WorkKind::reduce)
    for (size_t i : reduction_inputs(task.codec)) wanted[i] = true;
  for (size_t i = 0; i < task.inputs.size(); ++i) {
    if (!wanted[i]) {
      rows.inputs[i].clear();
      continue;
    }
    const io::Reader& reader = reader_of(task.inputs[i]);
    const io::TensorInfo& tensor = reader.tensor(task.inputs[i]);
    const uint64_t input_count = task.input_row_count(i, first, count);
    // A resize zero-fills only what the buffer grows by (the read overwrites all of it): a
    // reused buffer of the same size costs nothing here.
    rows.inputs[i].resize(input_count * tensor.row_bytes());
    reader.read_rows(tensor, task.input_first_row(i, first), input_count, rows.inputs[i]);
  }
}

ChunkInput Worker::chunk_input(const WorkItem& item, const SourceRows& rows) const {
  const Task& task = plan_.tasks()[size_t(item.task)];
  const uint64_t chunk = uint64_t(item.index);
  ChunkInput input{task, task.chunk_first_row(chunk), task.chunk_rows(chunk), {}};
  for (const auto& buffer : rows.inputs) input.inputs.emplace_back(buffer);
  return input;
}

void Worker::do_reduce(const WorkItem& item, const SourceRows& rows) {
  const auto start = std::chrono::steady_clock::now();
  const ChunkInput input = chunk_input(item, rows);
  const auto read_input_rows = [&](size_t i, uint64_t first, uint64_t count, std::span<uint8_t> out) {
    const io::Reader& reader = reader_of(input.task.inputs[i]);
    reader.read_rows(reader.tensor(input.task.inputs[i]), input.first_row + first, count, out);
  };
  const float value = reduce_chunk(input, read_input_rows);
  emit(0, Tag::reduce_result, encode(ReduceResult{item.task, item.index, value, seconds_since(start)}));
}

// The first thread to need a set reads it; the others wait for it (a map's elements stay
// where they are, so the reference outlives the lock).
const std::vector<float>& Worker::factor_source(int set) {
  std::lock_guard lock(factor_sources_mutex_);
  auto it = factor_sources_.find(set);
  if (it != factor_sources_.end()) return it->second;
  return factor_sources_[set] = read_factor_source(plan_, plan_.factor_sets()[size_t(set)]);
}

void Worker::do_factor(const WorkItem& item) {
  const FactorSet& set = plan_.factor_sets()[size_t(item.task)];
  const auto& weights = factor_source(item.task);
  const int in_cols = set.items * set.dim;
  const int out_rows = int(weights.size() / size_t(in_cols));
  const HashColumnFactor factor =
      compute_column_factor(weights.data(), out_rows, in_cols, int(item.index), plan_.params.gptq_damp, set.layer);
  emit(0, Tag::factor_result,
       encode(FactorResult{item.task, int32_t(item.index)}, {as_bytes(factor.gram), as_bytes(factor.upper)}));
}

void Worker::do_encode(const WorkItem& item, SourceRows& rows, EncodedChunk& out) {
  const auto start = std::chrono::steady_clock::now();
  ChunkInput input = chunk_input(item, rows);
  input.input_buffers = &rows.inputs; // the rows are not needed after this item
  const Task& task = input.task;
  EncodeContext context{plan_.recipe_plan.codec_params, item.reduction, nullptr};
  if (task.factor_set >= 0) {
    std::lock_guard lock(mutex_);
    const auto it = factors_.find(task.factor_set);
    if (it != factors_.end()) context.factors = it->second.get();
  }
  if (!encode_chunk(input, context, out, &cancel_)) {
    emit(0, Tag::dropped, encode_items({item}));
    return;
  }
  test_chunk_delay();
  ChunkResult result{item.task, item.index, chunk_checksum(out.buffers), seconds_since(start), rank_, out.stats};
  if (outputs_.writes_shard(task.shard)) {
    // The writer reports the chunk once it is durable; its buffers come back for the next.
    ChunkBytes bytes = writer_->recycled();
    std::swap(bytes.buffers, out.buffers);
    writer_->push(result, std::move(bytes));
  } else {
    emit(outputs_.writer_of(task.shard), Tag::chunk_data, encode(result, out.buffers));
  }
}

} // namespace shardq
