#include "pipeline/output_files.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "pipeline/pipeline_error.h"
#include "pipeline/signals.h"
#include "stages/quantize.h"
#include "stages/write.h"

namespace shardq {
namespace {

constexpr uint64_t kCopyBytes = 64ull << 20;

std::unique_ptr<io::Writer> make_writer(const Plan& plan, size_t shard) {
  const ShardPlan& s = plan.shards[shard];
  return std::make_unique<io::Writer>(plan.dst / s.file, s.specs, s.metadata);
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

io::Writer& OutputFiles::writer(size_t shard) const {
  std::lock_guard lock(writers_mutex_);
  const auto it = writers_.find(shard);
  if (it == writers_.end()) {
    throw PipelineError(fmt::format("rank {}: {}: this rank does not hold the shard open", rank_, plan_.shards[shard].file));
  }
  return *it->second;
}

void OutputFiles::write_chunk_bytes(const TablePlan& table, uint64_t first_row, uint64_t rows,
                                    std::span<const uint8_t> packed, std::span<const uint8_t> scales) {
  io::Writer& out = writer(table.shard);
  for (const auto& piece : plan_chunk_writes(packed, scales, first_row, rows, weight_slot(plan_, table), scale_slot(plan_, table))) {
    out.write_bytes(piece.offset, piece.bytes);
  }
}

void OutputFiles::sync_all() {
  std::lock_guard lock(writers_mutex_);
  for (auto& [shard, out] : writers_) out->sync();
}

void OutputFiles::read_chunk(const TablePlan& table, uint64_t first_row, uint64_t rows, std::span<uint8_t> packed,
                             std::span<uint8_t> scales) const {
  const auto path = writer(table.shard).partial_path();
  io::Reader reader(path);
  reader.read_rows(reader.tensor(table.out_weight), first_row, rows, packed);
  reader.read_rows(reader.tensor(table.out_scale), first_row, rows, scales);
}

void OutputFiles::finalize(size_t shard, std::span<const float> global_scales) {
  const ShardPlan& plan_shard = plan_.shards[shard];
  io::Writer& out = writer(shard);
  io::Reader source(plan_.src / plan_shard.file);
  std::vector<uint8_t> buffer;
  for (const auto& copy : plan_shard.copies) {
    const io::TensorInfo& from = source.tensor(copy.name);
    const io::TensorInfo& to = plan_shard.planned(copy.name);
    for (uint64_t at = 0; at < from.end - from.begin; at += kCopyBytes) {
      buffer.resize(std::min(kCopyBytes, from.end - from.begin - at));
      source.read_bytes(from.begin + at, buffer);
      out.write_bytes(to.begin + at, buffer);
    }
  }
  for (size_t i = 0; i < plan_shard.tables.size(); ++i) {
    const float global_scale = global_scales[i];
    uint8_t bytes[4];
    std::memcpy(bytes, &global_scale, 4); // F32 little-endian (the only byte order we build for)
    out.write_bytes(plan_shard.planned(plan_.tables[plan_shard.tables[i]].out_global_scale).begin, bytes);
  }
  crash_point("finalize");
  out.finish();
  std::lock_guard lock(writers_mutex_);
  writers_.erase(shard);
}

} // namespace shardq
