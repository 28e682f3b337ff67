#include "pipeline/run.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "kernels/gptq.h"
#include "pipeline/checkpoint.h"
#include "pipeline/coordinator.h"
#include "pipeline/io/atomic_file.h"
#include "pipeline/io/posix_file.h"
#include "pipeline/link.h"
#include "pipeline/output_files.h"
#include "pipeline/pipeline_error.h"
#include "pipeline/plan.h"
#include "pipeline/rank_failures.h"
#include "pipeline/run_lock.h"
#include "pipeline/signals.h"
#include "pipeline/test_hooks.h"
#include "pipeline/worker.h"
#include "stages/factors.h"
#include "stages/codec.h"
#include "stages/recipes/recipe.h"

namespace shardq {
namespace {

constexpr auto kWaitRetry = std::chrono::milliseconds(20);
// Idle, the main thread waits for its worker's next result, or this long for messages from
// other ranks: on a node whose cores all compute, each wakeup takes a core from a compute
// thread (a 500 us nap cost a few percent of a -np 2 run here).
constexpr auto kIdleWait = std::chrono::milliseconds(2);
// While messages are in flight: large ones move a fragment or a few per progress call.
constexpr auto kTransferSleep = std::chrono::microseconds(50);

std::string toml_string(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

Job job_from_args(const RunArgs& args) {
  std::vector<std::string> overrides = args.overrides;
  if (!args.src.empty()) overrides.push_back("job.src=" + toml_string(args.src));
  if (!args.dst.empty()) overrides.push_back("job.dst=" + toml_string(args.dst));
  if (!args.checkpoint.empty()) overrides.push_back("run.checkpoint=" + toml_string(args.checkpoint));
  return load_job(args.job_file, overrides);
}

// `to` becomes the file `from` names, after every symlink on the way: a source of links (a
// Hugging Face cache snapshot's point into ../../blobs) must not give the output links that
// dangle, or resolve, wherever the output lies. A hard link where it can be, else an
// absolute symlink (another file system). A `to` already that file is kept (a resume);
// anything else there, e.g. a link an older shardq made, is replaced: the plan names it.
void link_file(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code error;
  const std::filesystem::path target = std::filesystem::canonical(from, error);
  if (error) throw PipelineError(fmt::format("{}: cannot be followed to a file ({})", from.string(), error.message()));
  if (std::filesystem::exists(std::filesystem::symlink_status(to))) {
    if (std::filesystem::equivalent(target, to, error)) return;
    std::filesystem::remove(to);
  }
  std::filesystem::create_directories(to.parent_path());
  std::filesystem::create_hard_link(target, to, error);
  if (!error) return;
  // Another file system (EXDEV), or hard links not allowed here (protected_hardlinks on a
  // shared folder): the output then depends on the source staying where it is.
  spdlog::warn("{}: not hard-linked ({}); a symlink to {} instead", to.string(), error.message(), target.string());
  std::filesystem::create_symlink(target, to);
}

// The files dst takes from src as they are: unchanged shards and the other files.
std::vector<std::string> linked_files(const Plan& plan) {
  std::vector<std::string> files;
  for (const auto& shard : plan.shards) {
    if (!shard.changed) files.push_back(shard.file);
  }
  files.insert(files.end(), plan.other_files.begin(), plan.other_files.end());
  return files;
}

void link_unchanged(const Plan& plan) {
  for (const auto& file : linked_files(plan)) link_file(plan.src / file, plan.dst / file);
}

// Shard files in dst that this output does not name (another checkpoint's, an earlier
// run's of another source) would sit beside it, read by any loader that globs the folder.
// They are not shardq's to delete, --force or not.
void refuse_foreign_shards(const Plan& plan) {
  std::vector<std::string> named;
  for (const auto& shard : plan.shards) named.push_back(shard.file);
  const auto foreign = io::shard_files_outside(plan.dst, named);
  if (foreign.empty()) return;
  throw PipelineError(fmt::format("{}: .safetensors files that this output does not name (its shards are {}'s): {}; "
                                  "remove them or choose another dst",
                                  plan.dst.string(), plan.src.string(), fmt::join(foreign, ", ")));
}

bool output_complete(const Plan& plan, const std::optional<LoadResult>& loaded) {
  if (!std::filesystem::exists(plan.dst / io::kIndexFileName)) return false;
  // Without a checkpoint, the report (written last) tells a finished output from one
  // killed while writing index, config and report.
  if (!loaded) return std::filesystem::exists(plan.dst / plan.report_file());
  const auto& finished = loaded->state.finished;
  return std::find(finished.begin(), finished.end(), "report") != finished.end();
}

// The reports first, every recipe's (an output holding a report must hold everything
// else, and another product's report beside this one's files would name the folder wrong).
void remove_outputs(const Plan& plan) {
  std::vector<std::string> files;
  for (const std::string& recipe : recipe_names()) files.push_back(report_file_of(recipe));
  files.push_back(std::string(io::kIndexFileName));
  for (const std::string& file : files_of_finished_step("config", side_file_names(plan))) files.push_back(file);
  for (const std::string& file : files) {
    std::filesystem::remove(plan.dst / file);
    std::filesystem::remove(io::staged_path(plan.dst / file)); // staged during a run, renamed at its end
  }
  for (const auto& shard : plan.shards) {
    if (!shard.changed) continue;
    std::filesystem::remove(plan.dst / shard.file);
    std::filesystem::remove(plan.dst / (shard.file + ".partial"));
  }
}

// A shard no longer finished: its rename and the steps after it (index, config, report).
void forget_shard_finished(const ShardPlan& shard, CheckpointState& state) {
  const std::string shard_step = "shard:" + shard.file;
  std::erase_if(state.finished, [&](const std::string& s) {
    return s == shard_step || s == "index" || s == "config" || s == "report";
  });
}

// A done chunk whose bytes no longer match its checksum is recomputed: its record and
// everything finished after it are undone.
void forget_damaged_chunk(const Plan& plan, const Task& task, ChunkRecord& record, CheckpointState& state) {
  record = ChunkRecord{};
  forget_shard_finished(plan.shards[task.shard], state);
}

bool has_size(const std::filesystem::path& path, uint64_t size) {
  std::error_code error;
  const uint64_t found = std::filesystem::file_size(path, error);
  return !error && found == size;
}

// What the checkpoint records done must still be on disk, or it is done again: a changed
// shard at its planned size, finished or as its .partial (else its done chunks and the
// steps after them are forgotten: a .partial recreated empty under chunks recorded done
// would hold zeros), and the closing files (else their step and the report's). A week's run
// must not end "complete already" on a shard someone deleted. Returns whether it forgot
// anything: that must be saved before any .partial is made anew (reopen_shards).
bool forget_what_is_not_on_disk(const Plan& plan, CheckpointState& state) {
  bool closing_lost = false;
  for (const ShardPlan& shard : plan.shards) {
    if (!shard.changed) continue;
    const auto final_path = plan.dst / shard.file;
    const auto partial_path = std::filesystem::path(final_path.string() + ".partial");
    const uint64_t size = shard.layout.file_size();
    if (has_size(final_path, size)) continue;
    const std::string shard_step = "shard:" + shard.file;
    if (std::erase(state.finished, shard_step) > 0) closing_lost = true;
    if (std::filesystem::exists(final_path)) {
      spdlog::warn("{}: not its planned size ({} bytes): made again", final_path.string(), size);
      std::filesystem::remove(final_path);
    }
    if (has_size(partial_path, size)) continue;
    uint64_t forgotten = 0;
    for (size_t t : shard.tasks) {
      for (ChunkRecord& record : state.tasks[t].chunks) {
        if (record.state != kChunkDone) continue;
        forget_damaged_chunk(plan, plan.tasks()[t], record, state);
        ++forgotten;
      }
    }
    if (forgotten == 0) continue;
    closing_lost = true;
    spdlog::warn("{}: missing, or not its planned size, under {} chunks the checkpoint records done: they are computed "
                 "again", shard.file, forgotten);
  }
  const std::vector<std::string> side_files = side_file_names(plan);
  for (const std::string step : {"index", "config"}) {
    const std::vector<std::string> files = files_of_finished_step(step, side_files);
    const bool present = std::all_of(files.begin(), files.end(), [&](const std::string& f) { return std::filesystem::exists(plan.dst / f); });
    if (present || std::find(state.finished.begin(), state.finished.end(), step) == state.finished.end()) continue;
    spdlog::warn("{}: {} missing: written again", plan.dst.string(), fmt::join(files, ", "));
    std::erase(state.finished, step);
    closing_lost = true;
  }
  if (closing_lost || !std::filesystem::exists(plan.dst / plan.report_file())) {
    // The report goes first: an output holding a report holds everything else.
    std::filesystem::remove(plan.dst / plan.report_file());
    if (std::erase(state.finished, std::string("report")) > 0) closing_lost = true;
  }
  return closing_lost;
}

// No checkpoint, but shards of an earlier run in dst: that run kept its checkpoint elsewhere
// (--checkpoint), or lost it. Finished shards are refused (nothing records their chunks);
// .partial files are started over, said aloud: their progress may sit in that checkpoint.
void check_no_run_without_checkpoint(const Plan& plan, const std::filesystem::path& checkpoint_path) {
  std::vector<std::string> finished, partial;
  for (const ShardPlan& shard : plan.shards) {
    if (!shard.changed) continue;
    if (std::filesystem::exists(plan.dst / shard.file)) finished.push_back(shard.file);
    if (std::filesystem::exists(plan.dst / (shard.file + ".partial"))) partial.push_back(shard.file + ".partial");
  }
  if (!finished.empty()) {
    throw PipelineError(fmt::format("{}: holds {} finished shard(s) of an earlier run ({}) but no checkpoint at {} records "
                                    "them: pass the --checkpoint that run used, or --fresh to start over",
                                    plan.dst.string(), finished.size(), finished.front(), checkpoint_path.string()));
  }
  if (!partial.empty()) {
    spdlog::warn("{}: no checkpoint at {}: {} .partial file(s) of an earlier run ({}) are started over; if that run "
                 "kept its checkpoint elsewhere, stop this one and pass its --checkpoint",
                 plan.dst.string(), checkpoint_path.string(), partial.size(), partial.front());
  }
}

// The first shard of the plan that dst lacks, or "": a report beside missing shards is an
// output damaged since, not a complete one.
std::string first_missing_shard(const Plan& plan) {
  for (const auto& shard : plan.shards) {
    if (!std::filesystem::exists(plan.dst / shard.file)) return shard.file;
  }
  return "";
}

// Whether every file linked from the source is in dst.
bool links_present(const Plan& plan) {
  return std::ranges::all_of(linked_files(plan), [&](const std::string& file) { return std::filesystem::exists(plan.dst / file); });
}

// A shard is renamed only once a save records all of its chunks; resumed from an older
// generation (the newest lost), the checkpoint may still call some of them pending. Their
// figures are not in it, so the shard goes back to .partial (reopen_shards) and they are
// computed again (to the same bytes). Returns those shards' final paths.
std::vector<std::filesystem::path> shards_with_pending_chunks(const Plan& plan, CheckpointState& state) {
  std::vector<std::filesystem::path> reopened;
  for (const auto& shard : plan.shards) {
    const auto final_path = plan.dst / shard.file;
    if (!shard.changed || !std::filesystem::exists(final_path)) continue;
    const bool pending = std::any_of(shard.tasks.begin(), shard.tasks.end(), [&](size_t t) {
      const auto& chunks = state.tasks[t].chunks;
      return std::any_of(chunks.begin(), chunks.end(), [](const ChunkRecord& c) { return c.state != kChunkDone; });
    });
    if (!pending) continue;
    spdlog::warn("{}: renamed after the checkpoint generation resumed from: back to .partial, its pending chunks redone",
                 final_path.string());
    forget_shard_finished(shard, state);
    reopened.push_back(final_path);
  }
  return reopened;
}

// A stop signal while rank 0 prepares (the --verify-done pass reads every finished chunk:
// minutes on a real output, as long as Slurm's warning before the time limit): nothing is
// changed on disk yet, so every rank exits 75 at once and the pass starts again.
struct StoppedDuringSetup {};

// --verify-done: re-read every chunk recorded done and compare its checksum. Returns the
// finalized shards that hold a damaged chunk (to go back to .partial once the state that
// forgets the chunk is saved).
std::vector<std::filesystem::path> verify_done_chunks(const Plan& plan, CheckpointState& state) {
  std::vector<std::filesystem::path> damaged_final;
  spdlog::info("--verify-done: re-reading the finished chunks");
  for (size_t t = 0; t < plan.tasks().size(); ++t) {
    if (stop_requested()) throw StoppedDuringSetup{};
    const Task& task = plan.tasks()[t];
    const auto final_path = plan.dst / plan.shards[task.shard].file;
    const auto path = std::filesystem::exists(final_path) ? final_path : std::filesystem::path(final_path.string() + ".partial");
    if (!std::filesystem::exists(path)) continue;
    io::Reader reader(path);
    std::vector<std::vector<uint8_t>> buffers(task.outputs.size());
    bool damaged = false;
    for (uint64_t c = 0; c < task.chunks(); ++c) {
      auto& record = state.tasks[t].chunks[c];
      if (record.state != kChunkDone) continue;
      test_chunk_delay();
      const uint64_t first = task.chunk_first_row(c), rows = task.chunk_rows(c);
      for (size_t o = 0; o < task.outputs.size(); ++o) {
        buffers[o].resize(rows * tensor_row_bytes(task.outputs[o]));
        reader.read_rows(reader.tensor(task.outputs[o].name), first, rows, buffers[o]);
      }
      if (chunk_checksum(buffers) != record.checksum) {
        spdlog::warn("{}: chunk {} (rows {}..{}) does not match its checksum: recomputing it", task.name, c, first,
                     first + rows);
        forget_damaged_chunk(plan, task, record, state);
        damaged = true;
      }
    }
    if (damaged && path == final_path && std::find(damaged_final.begin(), damaged_final.end(), path) == damaged_final.end()) {
      damaged_final.push_back(path);
    }
  }
  return damaged_final;
}

// What a resume forgot (lost files, damaged or pending chunks) reaches the checkpoint
// before any shard goes back to .partial and before create_all makes a lost .partial anew
// (zeros at its planned size): killed in between, the next run must not find those chunks
// recorded done, nor a shard recorded finished that is no longer under its final name. The
// report goes first: an output holding a report holds everything else.
void reopen_shards(const Plan& plan, const std::filesystem::path& checkpoint_path, CheckpointState& state,
                   const std::vector<std::filesystem::path>& finished_to_reopen) {
  std::filesystem::remove(plan.dst / plan.report_file());
  io::fsync_folder(plan.dst);
  ++state.generation;
  save_checkpoint(checkpoint_path, state);
  for (const auto& path : finished_to_reopen) std::filesystem::rename(path, path.string() + ".partial");
}

// Rank 0's preparation; returns the checkpoint state to continue from, or nullopt when
// the checkpoint says this job's output is complete already (the same command again,
// e.g. a job killed after its last save and requeued, has nothing left to do).
std::optional<CheckpointState> prepare_rank0(const Plan& plan, const RunArgs& args,
                                             const std::filesystem::path& checkpoint_path, OutputFiles& outputs) {
  std::filesystem::create_directories(plan.dst);
  refuse_foreign_shards(plan);
  std::filesystem::create_directories(checkpoint_path.parent_path());
  std::optional<LoadResult> loaded;
  if (!args.fresh && !args.force) loaded = load_checkpoint(checkpoint_path);
  if (loaded && loaded->fell_back) {
    spdlog::warn("{}", loaded->note);
    set_aside_unusable_newest(checkpoint_path);
  } else if (loaded && !loaded->note.empty()) {
    spdlog::info("{}", loaded->note); // a save cut short by the kill: its chunks are redone
  }
  const std::string mismatch = loaded ? fingerprint_mismatch(loaded->state, plan.fingerprint) : "";
  // Checked before "complete already": a damaged chunk of a complete output undoes the
  // steps after it (the report among them), and the run then mends it.
  const bool forgotten = loaded && mismatch.empty() && forget_what_is_not_on_disk(plan, loaded->state);
  if (loaded && mismatch.empty() && args.verify_done) {
    const std::vector<std::filesystem::path> damaged = verify_done_chunks(plan, loaded->state);
    if (!damaged.empty()) reopen_shards(plan, checkpoint_path, loaded->state, damaged);
  }
  if (!args.force && output_complete(plan, loaded) && (!loaded || !mismatch.empty() || links_present(plan))) {
    if (!loaded || !mismatch.empty()) {
      // --fresh does not read the checkpoint: its refusal says what --fresh is for.
      const std::string why = loaded       ? fmt::format(" of another job ({} {})", checkpoint_path.string(), mismatch)
                              : args.fresh ? std::string(" (--fresh starts an unfinished output over)")
                                           : fmt::format(" (no checkpoint at {} says whose)", checkpoint_path.string());
      const std::string missing = first_missing_shard(plan);
      if (!missing.empty()) {
        throw PipelineError(fmt::format("{}: holds the report of a finished output but not its {} (damaged or partly "
                                        "removed since){}; pass --force to make it again",
                                        plan.dst.string(), missing, why));
      }
      throw PipelineError(fmt::format("{}: holds a complete output already{}; pass --force to overwrite it",
                                      plan.dst.string(), why));
    }
    spdlog::info("{}: complete already (checkpoint {} records every step); nothing to do (--force redoes it)",
                 plan.dst.string(), checkpoint_path.string());
    return std::nullopt;
  }
  if (!mismatch.empty()) throw PipelineError(fmt::format("{}: {}; use --fresh to start over", checkpoint_path.string(), mismatch));
  if (!loaded && !args.fresh && !args.force) check_no_run_without_checkpoint(plan, checkpoint_path);
  // Starting over: shards finalized by an earlier run must not pass for this run's, nor
  // the earlier checkpoint for this run's (it goes first: it records chunks of the files
  // about to be rewritten).
  if (args.force || args.fresh) {
    remove_checkpoint(checkpoint_path);
    remove_outputs(plan);
  }
  CheckpointState state = fresh_state(plan);
  if (loaded) {
    state = std::move(loaded->state);
    spdlog::info("resuming from {} (generation {})", checkpoint_path.string(), state.generation);
  }
  for (const auto& set : plan.factor_sets()) {
    const bool stored = std::any_of(state.blobs.begin(), state.blobs.end(),
                                    [&](const Blob& b) { return b.name == factor_blob_name(set); });
    if (!stored) check_factor_source(plan, set); // refuse a bad linear before any work
  }
  if (loaded) {
    const std::vector<std::filesystem::path> pending = shards_with_pending_chunks(plan, state);
    if (forgotten || !pending.empty()) reopen_shards(plan, checkpoint_path, state, pending);
  }
  link_unchanged(plan);
  // Resuming (from either generation) keeps the .partial files; a fresh start rewrites them.
  outputs.create_all(loaded.has_value());
  crash_point("outputs");
  return state;
}

// Each rank plans from its own view of src (a node-local copy on each Spark): the plans must
// be of the same job, tool and source bytes, or their chunks would not fit together. Rank 0
// compares each rank's fingerprint with its own, field by field (the paths aside: a copy
// may lie at another path on its node), and returns the first difference, or "".
std::string fingerprint_difference_across_ranks(const Link& link, const Plan& plan) {
  constexpr size_t kMaxFields = 32;
  struct Entry {
    uint32_t fields = 0;
    uint64_t hash[kMaxFields] = {};
    char host[64] = {};
  } mine;
  std::vector<const std::pair<std::string, std::string>*> compared;
  for (const auto& field : plan.fingerprint) {
    if (field.first != "src" && field.first != "dst") compared.push_back(&field);
  }
  mine.fields = uint32_t(compared.size());
  for (size_t i = 0; i < compared.size(); ++i) {
    const std::string text = compared[i]->first + '=' + compared[i]->second;
    mine.hash[std::min(i, kMaxFields - 1)] ^= XXH3_64bits(text.data(), text.size()); // more fields share the last slot
  }
  copy_to_field(link.host_name(), mine.host);
  const std::vector<Entry> entries = link.gather(mine);
  for (size_t rank = 1; rank < entries.size(); ++rank) {
    const Entry& other = entries[rank];
    if (other.fields != mine.fields) {
      return fmt::format("rank {} ({}) planned {} fingerprint fields, rank 0 ({}) {}: another shardq?", rank, other.host,
                         other.fields, mine.host, mine.fields);
    }
    for (size_t i = 0; i < std::min(compared.size(), kMaxFields); ++i) {
      if (other.hash[i] == mine.hash[i]) continue;
      return fmt::format("rank {} ({}) planned another '{}' than rank 0 ({}: {}): the ranks must run the same shardq "
                         "on the same job and source bytes (a node-local copy that differs?)",
                         rank, other.host, compared[i]->first, mine.host, compared[i]->second);
    }
  }
  return "";
}

// --dst must be one folder that every rank sees (docs/cluster.md): a node-local folder on
// each node would keep each shard on the node that wrote it, under rank 0's index naming
// them all. Rank 0 writes a probe of a name no rank has looked up before (an NFS client
// caches a name's absence) and every rank reads it back (check_in_ranks).
struct DstProbe {
  std::filesystem::path path;
  int nonce = 0;
};

DstProbe write_dst_probe(const Link& link, const std::filesystem::path& dst) {
  const auto path_of = [&](int nonce) { return dst / ".shardq" / fmt::format("shared-probe.{}", nonce); };
  DstProbe probe;
  if (link.rank() == 0) { // written (and closed) before the broadcast lets any rank look
    probe.nonce = int(std::random_device{}() & 0x7fffffff);
    io::write_file_atomic(path_of(probe.nonce), std::to_string(probe.nonce)); // a full disk is named as such
  }
  probe.nonce = link.broadcast(probe.nonce);
  probe.path = path_of(probe.nonce);
  return probe;
}

bool sees_dst_probe(const DstProbe& probe) {
  std::string text;
  std::ifstream(probe.path) >> text;
  return text == std::to_string(probe.nonce);
}

// What rank 0 learns of every rank once the outputs are prepared, in one gather.
struct RankCheckIn {
  std::vector<RankInfo> ranks; // rank 0: every rank's host and threads; the others: empty
  std::string dst_not_shared;  // rank 0: the first rank that does not see its probe, or ""
};

RankCheckIn check_in_ranks(const Link& link, const std::filesystem::path& dst, int threads) {
  struct Entry {
    char host[256] = {};
    int threads = 0;
    int sees_dst = 1;
  } mine;
  copy_to_field(link.host_name(), mine.host);
  mine.threads = threads;
  std::optional<DstProbe> probe;
  if (link.size() > 1) probe = write_dst_probe(link, dst);
  if (probe) mine.sees_dst = sees_dst_probe(*probe) ? 1 : 0;
  const std::vector<Entry> entries = link.gather(mine);
  RankCheckIn check_in;
  if (link.rank() != 0) return check_in;
  if (probe) std::filesystem::remove(probe->path);
  for (size_t rank = 0; rank < entries.size(); ++rank) {
    check_in.ranks.push_back({std::string(entries[rank].host), entries[rank].threads});
    if (entries[rank].sees_dst || !check_in.dst_not_shared.empty()) continue;
    check_in.dst_not_shared = fmt::format("{}: rank {} ({}) does not see the file rank 0 ({}) wrote there: --dst must be "
                                          "one folder that every node mounts (NFS), not a folder of each node's own",
                                          dst.string(), rank, entries[rank].host, mine.host);
  }
  return check_in;
}

// The heap a plan of this source takes at the run's peak, from the size of its index and what
// the recipe makes of each tensor (Recipe::plan_heap_per_index_byte). Jobs that would fault
// in little reserve nothing; the largest stop at kMaxHeapReserve. Populating ahead pays only
// for a large plan: on the real-count fixture it saved nvfp4-1017's run (a task per expert)
// 50-80 ms and cost w8a8-int8's (small linears share tasks) ~30 ms.
constexpr uint64_t kMinHeapReserve = uint64_t(64) << 20;
constexpr uint64_t kMaxHeapReserve = uint64_t(1) << 30;

// Started before the plan, which the memory is for (RunArgs::reserve_heap).
std::jthread reserve_plan_heap(const RunArgs& args, const Job& job) {
  if (!args.reserve_heap) return {};
  const uint64_t heap_per_index_byte = make_recipe(job.recipe)->plan_heap_per_index_byte();
  if (heap_per_index_byte == 0) return {};
  std::error_code error;
  const uint64_t index_bytes = std::filesystem::file_size(std::filesystem::path(job.src) / io::kIndexFileName, error);
  if (error) return {}; // make_plan names the missing index
  const uint64_t bytes = std::min(index_bytes * heap_per_index_byte, kMaxHeapReserve);
  return bytes < kMinHeapReserve ? std::jthread() : args.reserve_heap(bytes);
}

// A finished run's plan and checkpoint state: for a 50K-tensor job some 100K small objects
// (~200 MB) that take tens of ms to free one by one, after the output is complete. The
// process ends once run_job returns (once per process) and the OS takes the memory back
// whole, so they are kept, reachable from here (no leak checker reports them).
const Plan* kept_plan = nullptr;
const Coordinator* kept_coordinator = nullptr;
void keep_until_exit(std::unique_ptr<const Plan> plan, std::unique_ptr<Coordinator> coordinator) {
  kept_plan = plan.release();
  kept_coordinator = coordinator.release();
}

struct RankLoop {
  const Plan& plan;
  Link& link;
  OutputFiles& outputs;
  Worker& worker;
  Coordinator* coordinator; // rank 0 only
  bool request_pending = false;
  bool told_interrupt = false;
  std::set<std::filesystem::path> renamed_folders{}; // renamed shards' folders, not yet fsynced
  std::vector<int32_t> renamed_shards{};             // their shards, to report finalized after
  int exit_code = -1;
  int stopped_ranks = 0; // rank 0: the other ranks whose last message has come
  std::chrono::steady_clock::time_point next_request{};
  const uint64_t max_unsent_bytes = test_limit("SHARDQ_TEST_MAX_UNSENT_BYTES", kMaxUnsentBytes);

  void handle(const Message& m) {
    // After the stop nothing is answered: a message that crossed it on the wire (an idle
    // rank's request, say) is received and dropped (rank 0 receives until every rank's
    // last message, see shut_down).
    if (exit_code >= 0 && m.tag != Tag::stopped) {
      spdlog::debug("after the stop: dropped a {} message from rank {}", tag_name(m.tag), m.source);
      return;
    }
    switch (m.tag) {
      case Tag::request: coordinator->on_request(decode<WorkRequest>(m.bytes)); break;
      case Tag::assign: {
        request_pending = false;
        const auto items = decode_array<WorkItem>(m.bytes, "work item");
        if (items.empty()) next_request = std::chrono::steady_clock::now() + kWaitRetry;
        worker.push(items);
        break;
      }
      case Tag::reduce_result: coordinator->on_reduce(decode<ReduceResult>(m.bytes)); break;
      case Tag::factor_result: coordinator->on_factor(m); break;
      case Tag::chunk_done:
        for (const auto& result : decode_array<ChunkResult>(m.bytes, "chunk_done")) coordinator->on_chunk_done(result);
        break;
      case Tag::dropped: coordinator->on_dropped(decode_array<WorkItem>(m.bytes, "work item")); break;
      case Tag::finalized: coordinator->on_finalized(decode<int32_t>(m.bytes)); break;
      case Tag::interrupt: coordinator->on_interrupt(); break;
      case Tag::chunk_data: write_received_chunk(m); break;
      case Tag::finalize: finalize_shard(m); break;
      case Tag::factors: install_factors(m); break;
      case Tag::cancel: worker.cancel(); break;
      case Tag::stop: exit_code = decode<int32_t>(m.bytes); break;
      case Tag::stopped: ++stopped_ranks; break;
    }
  }

  void request_work() {
    const auto request = work_to_request({int32_t(link.rank()), size_t(worker.threads()), worker.load(),
                                          worker.queued_bytes(), link.unsent_bytes(), max_unsent_bytes});
    if (!request) return;
    request_pending = true;
    link.send(0, Tag::request, encode(*request));
  }

  void write_received_chunk(const Message& m) {
    const auto result = decode<ChunkResult>(m.bytes);
    worker.write_received(result, payload(m.bytes, sizeof(ChunkResult))); // chunk_done once durable
  }

  // Rank 0 asks for every shard's finalize at once: each is renamed as its message comes,
  // and the folders' fsyncs (one per folder, not one per shard: 0.2-0.4 ms each on a local
  // disk, a round trip on NFS) come before any of them is reported finalized.
  void finalize_shard(const Message& m) {
    const auto message = decode<FinalizeShard>(m.bytes);
    const auto body = payload(m.bytes, sizeof(FinalizeShard));
    std::vector<float> scalars(size_t(message.scalars));
    std::memcpy(scalars.data(), body.data(), std::min(body.size(), scalars.size() * sizeof(float)));
    renamed_folders.insert(outputs.finalize(size_t(message.shard), scalars));
    renamed_shards.push_back(message.shard);
  }

  void report_finalized() {
    if (renamed_shards.empty()) return;
    for (const auto& folder : renamed_folders) io::fsync_folder(folder);
    for (const int32_t shard : renamed_shards) link.send(0, Tag::finalized, encode(shard));
    renamed_folders.clear();
    renamed_shards.clear();
  }

  void install_factors(const Message& m) {
    const auto set_index = decode<int32_t>(m.bytes);
    const FactorSet& set = plan.factor_sets()[size_t(set_index)];
    const auto body = payload(m.bytes, sizeof(int32_t));
    const size_t matrix = size_t(set.dim) * size_t(set.dim), items = size_t(set.items);
    const double* gram = reinterpret_cast<const double*>(body.data());
    const double* upper = gram + items * matrix;
    auto factors = std::make_shared<LayerFactors>();
    factors->layer = set.layer;
    for (size_t c = 0; c < items; ++c) {
      factors->roots.push_back(gram_root(gram + c * matrix, set.layer, int(c)));
      factors->upper.push_back(gptq_factor_fp32(upper + c * matrix));
    }
    worker.install_factors(set_index, std::move(factors));
  }

  // How close this rank came to its memory limits: what waited to leave it (chunks for
  // other ranks' shards, factor sets) and what waited for its writer.
  void log_back_pressure() const {
    const ChunkWriter& writer = worker.writer();
    spdlog::debug("back-pressure: peak unsent {} B (limit {} B, largest message {} B, {} B sent), "
                  "peak write queue {} B (limit {} B, largest chunk {} B)",
                  link.peak_unsent_bytes(), max_unsent_bytes, link.largest_message_bytes(), link.sent_bytes(),
                  writer.peak_queued_bytes(), writer.max_queued_bytes(), writer.largest_chunk_bytes());
  }

  // The shutdown handshake. MPI wants every message received before MPI_Finalize, and a
  // message can cross rank 0's stop on the wire (an idle rank's request sent just before
  // the stop reached it): Open MPI then hung at the end, a rank's connection to rank 0
  // left half used. So each rank's last message to rank 0 says "stopped", and rank 0
  // receives (and drops) until it has one from every rank: messages between two ranks
  // arrive in the order they were sent, so nothing sent before it is left behind.
  void shut_down() {
    link.drain();
    if (link.rank() != 0) {
      if (test_crossing_request()) link.send(0, Tag::request, encode(WorkRequest{int32_t(link.rank())}));
      link.send(0, Tag::stopped, {});
    } else {
      while (stopped_ranks < link.size() - 1) {
        auto message = link.poll();
        if (message) handle(*message);
        else std::this_thread::sleep_for(kTransferSleep);
      }
    }
    link.drain();
  }

  int run() {
    while (exit_code < 0) {
      bool busy = false;
      if (stop_requested() && !told_interrupt) {
        told_interrupt = true;
        link.send(0, Tag::interrupt, {});
      }
      while (auto message = link.poll()) {
        handle(*message);
        busy = true;
      }
      report_finalized();
      while (auto out = worker.pop_result()) {
        link.send(out->dest, out->tag, std::move(out->bytes));
        busy = true;
      }
      // After the results are sent, so that the request sees them unsent: results that
      // piled up while this loop waited on its writer (an owner's full queue) are neither
      // the worker's items nor unsent bytes until then, and asking before would hold
      // them on top of a full new set of items. Not once rank 0 has said stop (handled
      // above): the loop ends this turn, and rank 0 would only drop the request (it is
      // received, by the shutdown handshake, so it cannot hang the run's end either).
      if (exit_code < 0 && !told_interrupt && !request_pending && std::chrono::steady_clock::now() >= next_request) {
        request_work();
      }
      worker.rethrow_if_failed();
      if (coordinator) coordinator->tick();
      link.progress();
      if (busy) continue;
      if (link.transferring()) std::this_thread::sleep_for(kTransferSleep);
      else worker.wait_for_result(kIdleWait);
    }
    worker.stop();
    shut_down();
    log_back_pressure();
    // Rank 0 has told the user the checkpoint is saved and how to resume; each rank's own
    // stop is for the debug log (under mpirun only the first non-zero code reaches the caller).
    if (exit_code == kExitInterrupted) spdlog::debug("stopped for a signal: exit {}", exit_code);
    return exit_code;
  }
};

} // namespace

int run_job(const RunArgs& args) {
  Link link;
  spdlog::set_pattern(fmt::format("[%H:%M:%S.%e] [rank {}] [%l] %v", link.rank()));
  if (const char* level = std::getenv("SHARDQ_LOG")) spdlog::set_level(spdlog::level::from_str(level));

  const auto started = std::chrono::steady_clock::now();
  const auto seconds_since_start = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
  // Every rank reads the job and plans from its own view of src: a failure there is agreed
  // on, printed once and naming the rank unless all failed alike.
  std::optional<const Job> job_read;
  std::jthread heap_populating;
  std::unique_ptr<const Plan> plan_owner;
  on_every_rank(link, [&] {
    job_read.emplace(job_from_args(args));
    check_dst_can_be_a_folder(job_read->dst); // before the plan resolves it
    heap_populating = reserve_plan_heap(args, *job_read);
    plan_owner = std::make_unique<const Plan>(make_plan(*job_read, link.size()));
  });
  const Job& job = *job_read;
  const Plan& plan = *plan_owner;
  spdlog::debug("planned in {:.3f} s", seconds_since_start());
  if (link.rank() == 0) {
    for (const std::string& warning : plan.recipe_plan.warnings) spdlog::warn("{}", warning);
  }
  const std::filesystem::path checkpoint_path = job.checkpoint_path();
  // A first run (no checkpoint yet) renders the output index on a thread of its own while
  // rank 0 prepares the outputs and saves the first checkpoint, which leave a core idle;
  // a resume leaves it to the coordinator, which renders it only if it is not written yet.
  std::future<std::string> index_text;
  if (link.rank() == 0 && !std::filesystem::exists(checkpoint_path)) {
    index_text = std::async(std::launch::async, [&plan] { return output_index_text(plan); });
  }
  OutputFiles outputs(plan, link.rank(), job.write_mode == "direct");

  std::optional<RunLock> lock; // rank 0: one run per dst and checkpoint, until run_job returns
  std::optional<CheckpointState> state;
  enum Setup : int { kSetupReady, kSetupFailed, kSetupComplete, kSetupStopped };
  int setup = kSetupReady;
  std::string setup_error;
  const std::string rank_difference = fingerprint_difference_across_ranks(link, plan);
  if (link.rank() == 0) {
    try {
      if (!rank_difference.empty()) throw PipelineError(rank_difference);
      check_dst_apart(job.src, "src", job.dst);
      if (!job.input_scales_from.empty()) check_dst_apart(job.input_scales_from, "reference", job.dst);
      lock.emplace(job.dst, checkpoint_path);
      state = prepare_rank0(plan, args, checkpoint_path, outputs);
      if (!state) setup = kSetupComplete;
    } catch (const StoppedDuringSetup&) {
      setup = kSetupStopped;
    } catch (const std::exception& e) {
      setup = kSetupFailed;
      setup_error = e.what();
    }
  }
  setup = link.broadcast(setup);
  spdlog::debug("outputs and checkpoint prepared at {:.3f} s", seconds_since_start());
  if (setup == kSetupComplete) return kExitOk;
  if (setup == kSetupStopped) {
    if (link.rank() == 0) spdlog::warn("stopped while preparing, before any change: nothing to save (exit 75)");
    return kExitInterrupted;
  }
  if (setup == kSetupFailed) throw FailedOnRanks(link.rank() == 0 ? setup_error : "");
  const int threads = job.compute_threads();
  RankCheckIn check_in = check_in_ranks(link, job.dst, threads);
  if (link.broadcast(check_in.dst_not_shared.empty() ? 1 : 0) == 0) {
    throw FailedOnRanks(link.rank() == 0 ? check_in.dst_not_shared : "");
  }
  outputs.open_mine();
  spdlog::info("{}: {} ranks x {} threads, {} tasks, {} rows per chunk, write mode {}, from {} to {}", job.recipe, link.size(),
               threads, plan.tasks().size(), job.rows_per_chunk, job.write_mode, job.src, job.dst);

  Worker worker(plan, outputs, link.rank(), threads);
  std::unique_ptr<Coordinator> coordinator;
  if (link.rank() == 0) {
    coordinator = std::make_unique<Coordinator>(plan, link, outputs, std::move(*state), checkpoint_path, std::move(check_in.ranks),
                                                std::move(index_text));
    spdlog::debug("first checkpoint saved at {:.3f} s", seconds_since_start());
  }
  RankLoop loop{plan, link, outputs, worker, coordinator.get()};
  const int code = loop.run();
  keep_until_exit(std::move(plan_owner), std::move(coordinator));
  return code;
}

} // namespace shardq
