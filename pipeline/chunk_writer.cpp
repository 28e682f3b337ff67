#include "pipeline/chunk_writer.h"

namespace shardq {
namespace {

// Chunks waiting to be written: enough to keep the disk busy while the next ones are
// computed, few enough that memory stays bounded by chunk buffers.
constexpr size_t kMaxQueuedChunks = 2;
// An fsync at least this often (bytes written since the last), even while chunks keep
// coming: a stop or a crash loses at most this much finished work.
constexpr uint64_t kSyncBytes = 256ull << 20;

} // namespace

uint64_t ChunkBytes::size() const {
  uint64_t bytes = 0;
  for (const auto& buffer : buffers) bytes += buffer.size();
  return bytes;
}

ChunkWriter::ChunkWriter(const Plan& plan, OutputFiles& outputs, OnDurable on_durable)
    : plan_(plan), outputs_(outputs), on_durable_(std::move(on_durable)), thread_([this] { run(); }) {}

ChunkWriter::~ChunkWriter() { stop(); }

void ChunkWriter::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ChunkWriter::push(const ChunkResult& result, ChunkBytes bytes) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return queue_.size() < kMaxQueuedChunks || failure_ || stopping_; });
  if (failure_) std::rethrow_exception(failure_);
  queue_.push_back({result, std::move(bytes)});
  changed_.notify_all();
}

ChunkBytes ChunkWriter::recycled() {
  std::lock_guard lock(mutex_);
  if (free_.empty()) return {};
  ChunkBytes bytes = std::move(free_.back());
  free_.pop_back();
  return bytes;
}

void ChunkWriter::rethrow_if_failed() {
  std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
}

void ChunkWriter::run() {
  std::vector<Pending> unsynced; // written, not yet covered by an fsync
  uint64_t unsynced_bytes = 0;
  for (;;) {
    Pending next;
    bool queue_drained = false;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return; // stopping, everything written and synced
      next = std::move(queue_.front());
      queue_.pop_front();
      queue_drained = queue_.empty();
      changed_.notify_all();
    }
    try {
      const Task& task = plan_.tasks()[size_t(next.result.task)];
      const uint64_t chunk = uint64_t(next.result.chunk);
      outputs_.write_chunk_bytes(task, task.chunk_first_row(chunk), task.chunk_rows(chunk), next.bytes.buffers);
      unsynced_bytes += next.bytes.size();
      unsynced.push_back(std::move(next));
      // Sync once nothing else waits (the disk then catches up while the next chunk is
      // computed) or once enough has piled up: a slow disk gets fewer, larger syncs.
      if (!queue_drained && unsynced_bytes < kSyncBytes) continue;
      outputs_.sync_all();
    } catch (...) {
      std::lock_guard lock(mutex_);
      failure_ = std::current_exception();
      changed_.notify_all();
      return;
    }
    for (const auto& pending : unsynced) on_durable_(pending.result);
    std::lock_guard lock(mutex_);
    for (auto& pending : unsynced) free_.push_back(std::move(pending.bytes));
    unsynced.clear();
    unsynced_bytes = 0;
  }
}

} // namespace shardq
