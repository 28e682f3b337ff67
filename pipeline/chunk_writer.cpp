#include "pipeline/chunk_writer.h"

#include <algorithm>
#include <chrono>

#include "pipeline/test_hooks.h"

namespace shardq {
namespace {

// Bytes of chunks waiting to be written: enough to keep the disk busy while the next ones
// are computed (a couple of big chunks, thousands of small ones), few enough that memory
// stays bounded by chunk buffers. The writer takes the whole queue at once, so up to
// twice this is held: the queue and the chunks being written.
constexpr uint64_t kMaxQueuedBytes = 64ull << 20;
// An fsync at least this often (bytes written since the last), even while chunks keep
// coming: a stop or a crash loses at most this much finished work.
constexpr uint64_t kSyncBytes = 256ull << 20;
// Written chunks wait at most this long for their fsync. The checkpoint records durable
// chunks at most every 0.5 s, so syncing more often would only multiply fsyncs.
constexpr auto kSyncDelay = std::chrono::milliseconds(200);
// Bytes of chunk buffers kept for reuse: a few big chunks, or a compute batch of small
// ones (fresh buffers cost page faults and zero-filling).
constexpr uint64_t kFreeBytes = 16ull << 20;

} // namespace

uint64_t ChunkBytes::size() const {
  uint64_t bytes = 0;
  for (const auto& buffer : buffers) bytes += buffer.size();
  return bytes;
}

ChunkWriter::ChunkWriter(const Plan& plan, OutputFiles& outputs, OnDurable on_durable)
    : plan_(plan),
      outputs_(outputs),
      on_durable_(std::move(on_durable)),
      max_queued_bytes_(test_limit("SHARDQ_TEST_MAX_QUEUED_BYTES", kMaxQueuedBytes)),
      thread_([this] { run(); }) {}

ChunkWriter::~ChunkWriter() { stop(); }

void ChunkWriter::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ChunkWriter::push(std::vector<ChunkOut>& chunks) {
  for (auto& chunk : chunks) chunk.size = chunk.bytes.size();
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return queued_bytes_ < max_queued_bytes_ || failure_ || stopping_; });
  if (failure_) std::rethrow_exception(failure_);
  for (auto& chunk : chunks) {
    largest_chunk_bytes_ = std::max(largest_chunk_bytes_, chunk.size);
    queued_bytes_ += chunk.size;
    queue_.push_back(std::move(chunk));
  }
  peak_queued_bytes_ = std::max(peak_queued_bytes_, queued_bytes_);
  chunks.clear();
  changed_.notify_all();
}

ChunkBytes ChunkWriter::recycled() {
  std::lock_guard lock(mutex_);
  if (free_.empty()) return {};
  auto [bytes, size] = std::move(free_.back());
  free_.pop_back();
  free_bytes_ -= size;
  return std::move(bytes);
}

void ChunkWriter::set_draining(bool draining) {
  {
    std::lock_guard lock(mutex_);
    draining_ = draining;
  }
  changed_.notify_all();
}

uint64_t ChunkWriter::peak_queued_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_queued_bytes_;
}

uint64_t ChunkWriter::largest_chunk_bytes() const {
  std::lock_guard lock(mutex_);
  return largest_chunk_bytes_;
}

void ChunkWriter::rethrow_if_failed() {
  std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
}

void ChunkWriter::run() {
  std::vector<ChunkResult> unsynced;  // written, not yet covered by an fsync
  std::set<size_t> unsynced_shards;   // the shards they were written to
  uint64_t unsynced_bytes = 0;
  std::chrono::steady_clock::time_point sync_due; // when the oldest unsynced chunk must be synced
  // Swapped with the queue, then emptied: the queue keeps its capacity from batch to batch
  // (50K small chunks would otherwise regrow it, with page faults, every batch).
  std::vector<ChunkOut> taken;
  std::vector<ChunkWrite> writes;
  try {
    outputs_.write_fixed_entries(); // before any chunk: the disk starts on them at once
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        const auto ready = [&] { return stopping_ || !queue_.empty() || (draining_ && !unsynced.empty()); };
        if (unsynced.empty()) changed_.wait(lock, ready);
        else changed_.wait_until(lock, sync_due, ready);
        if (queue_.empty()) { // stopping (everything written), draining, or the oldest chunk is due
          const bool stopping = stopping_;
          lock.unlock();
          make_durable(unsynced, unsynced_shards);
          unsynced_bytes = 0;
          if (stopping) return;
          continue;
        }
        taken.swap(queue_);
        queued_bytes_ = 0;
        changed_.notify_all();
      }
      writes.clear();
      for (const auto& next : taken) {
        const Task& task = plan_.tasks()[size_t(next.result.task)];
        const uint64_t chunk = uint64_t(next.result.chunk);
        writes.push_back({size_t(next.result.task), task.chunk_first_row(chunk), task.chunk_rows(chunk), &next.bytes.buffers});
      }
      outputs_.write_chunks(writes);
      test_write_delay(writes.size());
      if (unsynced.empty()) sync_due = std::chrono::steady_clock::now() + kSyncDelay;
      for (auto& next : taken) {
        unsynced_bytes += next.size;
        unsynced_shards.insert(plan_.tasks()[size_t(next.result.task)].shard);
        unsynced.push_back(next.result);
        // The bytes are in the file once written: their buffers go back to the workers now,
        // not at the sync (fresh buffers would cost page faults and zero-filling).
        recycle(std::move(next.bytes), next.size);
      }
      taken.clear();
      // A slow disk gets fewer, larger syncs; a fast one still no more than one per delay.
      if (unsynced_bytes >= kSyncBytes || std::chrono::steady_clock::now() >= sync_due) {
        make_durable(unsynced, unsynced_shards);
        unsynced_bytes = 0;
      }
    }
  } catch (...) {
    std::lock_guard lock(mutex_);
    failure_ = std::current_exception();
    changed_.notify_all();
  }
}

void ChunkWriter::recycle(ChunkBytes bytes, uint64_t size) {
  std::lock_guard lock(mutex_);
  if (free_bytes_ + size > kFreeBytes) return;
  free_bytes_ += size;
  free_.emplace_back(std::move(bytes), size);
}

void ChunkWriter::make_durable(std::vector<ChunkResult>& unsynced, std::set<size_t>& unsynced_shards) {
  outputs_.sync(unsynced_shards);
  unsynced_shards.clear();
  if (!unsynced.empty()) on_durable_(unsynced);
  unsynced.clear();
}

} // namespace shardq
