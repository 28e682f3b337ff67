// The checkpoint's journal (docs/checkpoint.md "Journal"): between two whole saves (the
// HDF5 base), each save appends only what changed since the previous one (chunk and
// reduction records, finished steps, the run's clock) to PATH.journal, so a save costs in
// proportion to the work done since the last, not to the plan (50K tasks). A load reads
// the base and replays the journal records written after that base.
//
// File: magic "SHQJRNL1", u32 format version, u64 the base's generation, u64 xxh3 of the
// header; then records: u64 payload length, u64 xxh3 of the payload, the payload. A record
// cut short or failing its checksum (a kill -9 mid-append) ends the replay: everything
// before it holds, the save it belonged to never completed. A journal whose base
// generation is not the loaded base's (written for a newer base that was lost, or before
// the base was rewritten) is ignored whole.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/checkpoint.h"

namespace shardq {

// What changed since the previous save; the engine says which records it touched.
struct CheckpointChanges {
  std::vector<std::pair<uint32_t, uint64_t>> chunks;     // (task, chunk) of ChunkRecords
  std::vector<std::pair<uint32_t, uint64_t>> reductions; // (task, chunk) of ReduceRecords
  size_t finished_from = 0;                              // state.finished[finished_from..] are new
                                                         // (recorded: a replay puts them there)
  bool empty() const { return chunks.empty() && reductions.empty(); }
};

std::filesystem::path journal_file(const std::filesystem::path& checkpoint);

// Starts an empty journal for the base of `base_generation` (atomically: tmp + rename).
void reset_journal(const std::filesystem::path& checkpoint, uint64_t base_generation);

// Appends the changed records (and state's generation, clock and new finished steps) and
// makes them durable (fdatasync). Throws PipelineError naming the file on any failure.
// Returns the journal's size after the append.
uint64_t append_journal(const std::filesystem::path& checkpoint, const CheckpointState& state,
                        const CheckpointChanges& changes);

// Applies the journal of `checkpoint` to a state loaded from the base of that generation;
// returns how many records were applied, and in `note` why the replay stopped early (a
// torn or corrupt record), if it did.
size_t replay_journal(const std::filesystem::path& checkpoint, CheckpointState& state, std::string& note);

} // namespace shardq
