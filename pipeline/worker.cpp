#include "pipeline/worker.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "kernels/gptq.h"
#include "pipeline/io/contiguous_runs.h"
#include "pipeline/pipeline_error.h"
#include "pipeline/test_hooks.h"
#include "stages/amax.h"
#include "stages/factors.h"
#include "stages/stage_error.h"

namespace shardq {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A batch ends at this many items or source bytes: small chunks travel together, a large
// one alone (its own bytes reach the budget). Tasks whose tensors interleave in a shard
// (W8A8's shared tasks: every expert's w1 in one, every w2 in the next) write back to back
// only when the writer gets them together: at 8 MB a batch holds a layer's, and the
// many-tensor job makes 1.1K pwritev calls (2.9K at 1 MB).
constexpr size_t kBatchItems = 256;
constexpr uint64_t kBatchBytes = 8ull << 20;
// Pieces of a batch this close in a shard are read in one call, the bytes between them
// into scratch: a few KB more to copy cost less than a syscall.
constexpr size_t kReadGapBytes = 16 << 10;

std::span<const uint8_t> as_bytes(const std::vector<double>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(double)};
}

} // namespace

Worker::Worker(const Plan& plan, OutputFiles& outputs, int rank, int threads)
    : plan_(plan), outputs_(outputs), rank_(rank), threads_(threads) {
  gptq_pin_blas_threads();
  writer_ = std::make_unique<ChunkWriter>(
      plan, outputs, [this](const std::vector<ChunkResult>& results) { emit(0, Tag::chunk_done, encode_array(results)); });
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

void Worker::push(const std::vector<WorkItem>& items) {
  writer_->set_draining(items.empty()); // none: rank 0 has nothing left to hand out for now
  {
    std::lock_guard lock(mutex_);
    for (const auto& item : items) {
      queue_.push_back(item);
      queued_bytes_ += item_source_bytes(plan_, item);
    }
  }
  changed_.notify_all();
}

size_t Worker::load() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + ready_items_ + reading_items_ + computing_items_;
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
  std::vector<ChunkOut> chunks(1, ChunkOut{result, writer_->recycled()});
  ChunkBytes& bytes = chunks[0].bytes;
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
  writer_->push(chunks);
}

void Worker::cancel() {
  std::lock_guard lock(mutex_);
  cancel_ = true;
  // Everything not yet computing goes back to rank 0 in one message.
  std::vector<WorkItem> dropped(queue_.begin(), queue_.end());
  queue_.clear();
  for (auto& batch : ready_) {
    for (auto& read : batch) {
      dropped.push_back(read.item);
      if (read.rows) free_rows_.push_back(std::move(read.rows));
    }
  }
  ready_.clear();
  ready_items_ = 0;
  if (!dropped.empty()) results_.push_back({0, Tag::dropped, encode_array(dropped)});
  queued_bytes_ = 0; // the batch being read is dropped by the reader
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
  reading_items_ = 0;
  computing_items_ = 0;
  result_ready_.notify_one();
}

// The next items of the queue, up to kBatchItems or kBatchBytes of source rows, each with
// a buffer for its rows. A factor item computes for long: it goes alone, so that the
// threads share a set's items.
Worker::ReadBatch Worker::take_batch() {
  ReadBatch batch;
  uint64_t bytes = 0;
  while (!queue_.empty() && batch.size() < kBatchItems) {
    const WorkItem item = queue_.front();
    const uint64_t item_bytes = item_source_bytes(plan_, item);
    const bool alone = item.kind == WorkKind::factor;
    if (!batch.empty() && (alone || bytes + item_bytes > kBatchBytes)) break;
    queue_.pop_front();
    bytes += item_bytes;
    ReadItem& read = batch.emplace_back();
    read.item = item;
    if (item.kind == WorkKind::reduce || item.kind == WorkKind::encode) {
      if (free_rows_.empty()) free_rows_.push_back(std::make_unique<SourceRows>());
      read.rows = std::move(free_rows_.back());
      free_rows_.pop_back();
    }
    if (alone) break;
  }
  reading_items_ = batch.size();
  return batch;
}

// Reads ahead of the compute threads, one batch per thread at most: the next batch's
// source rows are in memory by the time a thread is free.
void Worker::read_loop() {
  for (;;) {
    ReadBatch batch;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || (!queue_.empty() && ready_.size() < size_t(threads_)); });
      if (stopping_) return;
      batch = take_batch();
    }
    try {
      read_batch(batch);
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    {
      std::lock_guard lock(mutex_);
      reading_items_ = 0;
      if (cancel_) {
        std::vector<WorkItem> dropped;
        for (auto& read : batch) {
          queued_bytes_ -= std::min(queued_bytes_, item_source_bytes(plan_, read.item));
          dropped.push_back(read.item);
          if (read.rows) free_rows_.push_back(std::move(read.rows));
        }
        results_.push_back({0, Tag::dropped, encode_array(dropped)});
      } else {
        ready_items_ += batch.size();
        ready_.push_back(std::move(batch));
      }
    }
    changed_.notify_all();
  }
}

void Worker::compute_loop() {
  EncodedChunk out;             // this thread's output buffers, reused from chunk to chunk
  std::vector<ChunkOut> written; // the batch's chunks for this rank's writer
  for (;;) {
    ReadBatch batch;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
      if (stopping_) return;
      batch = std::move(ready_.front());
      ready_.pop_front();
      ready_items_ -= batch.size();
      for (const auto& read : batch) queued_bytes_ -= std::min(queued_bytes_, item_source_bytes(plan_, read.item));
      computing_items_ += batch.size();
    }
    changed_.notify_all(); // the reader may read the next batch
    try {
      for (auto& read : batch) {
        if (cancel_) emit(0, Tag::dropped, encode_array(std::vector<WorkItem>{read.item}));
        else process(read, out, written);
      }
      if (!written.empty()) writer_->push(written);
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    std::lock_guard lock(mutex_);
    computing_items_ -= std::min(computing_items_, batch.size());
    for (auto& read : batch) {
      if (read.rows) free_rows_.push_back(std::move(read.rows));
    }
  }
}

void Worker::process(ReadItem& read, EncodedChunk& out, std::vector<ChunkOut>& written) {
  try {
    switch (read.item.kind) {
      case WorkKind::reduce: do_reduce(read.item, *read.rows); break;
      case WorkKind::factor: do_factor(read.item); break;
      case WorkKind::encode: do_encode(read.item, *read.rows, out, written); break;
      case WorkKind::wait: break;
    }
  } catch (const StageError& e) {
    // A stage names the tensor, row and column of bad source data; the file is known here.
    if (read.item.kind != WorkKind::reduce && read.item.kind != WorkKind::encode) throw;
    const Task& task = plan_.tasks()[size_t(read.item.task)];
    throw PipelineError(fmt::format("{}: {}", (plan_.src / plan_.shards[task.shard].file).string(), e.what()));
  }
}

// Encode items need every input row; reductions only the inputs they read whole (an amax
// reads the scales and then the few rows of codes that can decide it).
void Worker::plan_reads(const WorkItem& item, SourceRows& rows, std::vector<PieceRead>& pieces) const {
  const Task& task = plan_.tasks()[size_t(item.task)];
  const uint64_t chunk = uint64_t(item.index), first = task.chunk_first_row(chunk), count = task.chunk_rows(chunk);
  rows.inputs.resize(task.inputs.size());
  const auto& sources = plan_.task_sources[size_t(item.task)];
  const std::vector<size_t> reduced = item.kind == WorkKind::reduce ? reduction_inputs(task.codec) : std::vector<size_t>{};
  for (size_t i = 0; i < task.inputs.size(); ++i) {
    if (item.kind == WorkKind::reduce && std::find(reduced.begin(), reduced.end(), i) == reduced.end()) {
      rows.inputs[i].clear();
      continue;
    }
    const io::Reader& reader = *sources[i].reader;
    const io::TensorInfo& tensor = *sources[i].tensor;
    const uint64_t input_count = task.input_row_count(i, first, count);
    // A resize zero-fills only what the buffer grows by (the read overwrites all of it): a
    // reused buffer of the same size costs nothing here.
    rows.inputs[i].resize(input_count * sources[i].row_bytes);
    const uint64_t offset = reader.rows_offset(tensor, task.input_first_row(i, first), input_count, rows.inputs[i].size());
    pieces.push_back({&reader, offset, rows.inputs[i]});
  }
}

// A batch's source rows; pieces that lie back to back in a shard, or nearly (the tensors
// of consecutive small tasks, or of tasks that interleave), come in one preadv.
void Worker::read_batch(ReadBatch& batch) const {
  thread_local std::vector<uint8_t> gap(kReadGapBytes);
  std::vector<PieceRead> pieces;
  for (auto& read : batch) {
    if (read.rows) plan_reads(read.item, *read.rows, pieces);
  }
  io::for_each_near_run(pieces, std::span(gap), [](const io::Reader* reader, uint64_t offset, std::span<const std::span<uint8_t>> run) {
    reader->read_gathered(offset, run);
  });
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
  const auto& sources = plan_.task_sources[size_t(item.task)];
  const auto read_input_rows = [&](size_t i, uint64_t first, uint64_t count, std::span<uint8_t> out) {
    sources[i].reader->read_rows(*sources[i].tensor, input.first_row + first, count, out);
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

void Worker::do_encode(const WorkItem& item, SourceRows& rows, EncodedChunk& out, std::vector<ChunkOut>& written) {
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
    emit(0, Tag::dropped, encode_array(std::vector<WorkItem>{item}));
    return;
  }
  test_chunk_delay();
  ChunkResult result{item.task, item.index, chunk_checksum(out.buffers), seconds_since(start), rank_, out.stats};
  if (outputs_.writes_shard(task.shard)) {
    // The writer reports the chunk once it is durable; its buffers come back for the next.
    ChunkOut& chunk = written.emplace_back(ChunkOut{result, writer_->recycled()});
    std::swap(chunk.bytes.buffers, out.buffers);
  } else {
    emit(outputs_.writer_of(task.shard), Tag::chunk_data, encode(result, out.buffers));
  }
}

} // namespace shardq
