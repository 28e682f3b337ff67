#include "pipeline/output_files.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "pipeline/io/contiguous_runs.h"
#include "pipeline/pipeline_error.h"
#include "pipeline/test_hooks.h"
#include "stages/write.h"

namespace shardq {
namespace {

constexpr uint64_t kCopyBytes = 64ull << 20;

std::unique_ptr<io::Writer> make_writer(const Plan& plan, size_t shard) {
  const ShardPlan& s = plan.shards[shard];
  return std::make_unique<io::Writer>(plan.dst / s.file, s.layout);
}

} // namespace

OutputFiles::OutputFiles(const Plan& plan, int rank, bool direct) : plan_(plan), rank_(rank), direct_(direct) {}

bool OutputFiles::writes_shard(size_t shard) const {
  return plan_.shards[shard].changed && (direct_ || plan_.shards[shard].owner == rank_);
}

int OutputFiles::writer_of(size_t shard) const { return direct_ ? 0 : plan_.shards[shard].owner; }

void OutputFiles::create_all(bool resume) {
  for (size_t s = 0; s < plan_.shards.size(); ++s) {
    if (!plan_.shards[s].changed) continue;
    if (std::filesystem::exists(plan_.dst / plan_.shards[s].file)) continue; // finalized before
    auto writer = make_writer(plan_, s);
    writer->open(resume);
    if (writes_shard(s)) {
      std::lock_guard lock(writers_mutex_);
      writers_[s] = std::move(writer);
    }
  }
}

void OutputFiles::open_mine() {
  for (size_t s = 0; s < plan_.shards.size(); ++s) {
    if (!writes_shard(s) || writers_.count(s) || std::filesystem::exists(plan_.dst / plan_.shards[s].file)) continue;
    auto writer = make_writer(plan_, s);
    writer->open(true);
    std::lock_guard lock(writers_mutex_);
    writers_[s] = std::move(writer);
  }
}

bool OutputFiles::holds(size_t shard) const {
  std::lock_guard lock(writers_mutex_);
  return writers_.count(shard) != 0;
}

io::Writer& OutputFiles::writer(size_t shard) const {
  std::lock_guard lock(writers_mutex_);
  const auto it = writers_.find(shard);
  if (it == writers_.end()) {
    throw PipelineError(fmt::format("rank {}: {}: this rank does not hold the shard open", rank_, plan_.shards[shard].file));
  }
  return *it->second;
}

void OutputFiles::write_chunks(std::span<const ChunkWrite> chunks) {
  std::vector<io::Transfer<size_t, const uint8_t>> pieces; // shard, offset in its data buffer, bytes
  for (const ChunkWrite& chunk : chunks) {
    const Task& task = plan_.tasks()[chunk.task];
    for (size_t o = 0; o < task.outputs.size(); ++o) {
      const auto slot = task_output_slot(plan_, chunk.task, o);
      const WritePiece piece = plan_rows_write(chunk.buffers->at(o), chunk.first_row, chunk.rows, slot, task.outputs[o].name);
      pieces.push_back({task.shard, piece.offset, piece.bytes});
    }
  }
  std::set<size_t> shards;
  io::for_each_contiguous_run(pieces, [&](size_t shard, uint64_t offset, std::span<const std::span<const uint8_t>> run) {
    writer(shard).write_gathered(offset, run);
    shards.insert(shard);
  });
  for (size_t shard : shards) writer(shard).start_writeback();
}

void OutputFiles::sync(const std::set<size_t>& shards) {
  for (size_t shard : shards) writer(shard).sync();
}

void OutputFiles::copy_tensor(io::Writer& out, const io::Reader& source, const ShardEntry& entry,
                              const io::TensorInfo& to) const {
  const io::TensorInfo& from = source.tensor(entry.from);
  if (from.end - from.begin != to.end - to.begin) {
    throw PipelineError(fmt::format("{}: tensor '{}' has {} bytes, its planned copy '{}' {}", source.path().string(),
                                    entry.from, from.end - from.begin, entry.spec.name, to.end - to.begin));
  }
  std::vector<uint8_t> buffer;
  for (uint64_t at = 0; at < from.end - from.begin; at += kCopyBytes) {
    buffer.resize(std::min(kCopyBytes, from.end - from.begin - at));
    source.read_bytes(from.begin + at, buffer);
    out.write_bytes(to.begin + at, buffer);
  }
}

void OutputFiles::write_fixed_entries() {
  try {
    for (size_t shard = 0; shard < plan_.shards.size(); ++shard) {
      const ShardPlan& plan_shard = plan_.shards[shard];
      if (writer_of(shard) != rank_ || !holds(shard)) continue; // finalized by another rank, or before
      io::Writer& out = writer(shard);
      const io::Reader& source = plan_.source_readers->opened(plan_shard.file);
      for (size_t e = 0; e < plan_shard.entries.size(); ++e) {
        const ShardEntry& entry = plan_shard.entries[e];
        const io::TensorInfo& to = plan_shard.layout.tensors[e];
        if (entry.source == EntrySource::copy) copy_tensor(out, source, entry, to);
        if (entry.source == EntrySource::constant) out.write_bytes(to.begin, entry.bytes);
      }
      out.start_writeback();
    }
    fixed_entries_written_.set_value();
  } catch (...) {
    fixed_entries_written_.set_exception(std::current_exception());
    throw;
  }
}

std::filesystem::path OutputFiles::finalize(size_t shard, std::span<const float> group_scalars) {
  fixed_entries_.get(); // rethrows the writer thread's error
  const ShardPlan& plan_shard = plan_.shards[shard];
  io::Writer& out = writer(shard);
  size_t next_scalar = 0;
  for (size_t e : plan_shard.group_scalar_entries) {
    if (next_scalar >= group_scalars.size()) {
      throw PipelineError(fmt::format("{}: fewer group scalars received than planned", plan_shard.file));
    }
    uint8_t bytes[4];
    std::memcpy(bytes, &group_scalars[next_scalar++], 4); // F32 little-endian (the only byte order we build for)
    out.write_bytes(plan_shard.layout.tensors[e].begin, bytes);
  }
  if (next_scalar != group_scalars.size()) {
    throw PipelineError(fmt::format("{}: {} group scalars received, {} planned", plan_shard.file, group_scalars.size(), next_scalar));
  }
  crash_point("finalize");
  std::filesystem::path folder = out.finish_file();
  std::lock_guard lock(writers_mutex_);
  writers_.erase(shard);
  return folder;
}

} // namespace shardq
