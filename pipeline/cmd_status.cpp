// `shardq status CHECKPOINT|DST`: a run's progress for people. Reads whichever complete
// generation is on disk (saves rename whole files, so this is safe during a run).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/checkpoint.h"
#include "pipeline/commands.h"
#include "pipeline/io/config.h"
#include "pipeline/io/index.h"
#include "pipeline/pipeline_error.h"
#include "pipeline/plan.h"
#include "pipeline/run_lock.h"
#include "pipeline/work.h"

namespace shardq {
namespace {

struct ChunkProgress {
  uint64_t chunks_done = 0, chunks = 0, rows_done = 0, rows = 0;
  double chunk_seconds = 0;
};

// Rows are tensor rows (a task row times the tensors it stacks), as the run's log and
// report count them.
uint64_t rows_of_chunk(const TaskRecord& t, size_t chunk) {
  const uint64_t first = uint64_t(chunk) * t.rows_per_chunk;
  return first >= t.rows ? 0 : std::min(t.rows_per_chunk, t.rows - first) * t.stacked_tensors;
}

ChunkProgress progress_of(const TaskRecord& t) {
  ChunkProgress p;
  p.chunks = t.chunks.size();
  p.rows = t.rows * t.stacked_tensors;
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    if (t.chunks[i].state != kChunkDone) continue;
    ++p.chunks_done;
    p.rows_done += rows_of_chunk(t, i);
    p.chunk_seconds += t.chunks[i].seconds;
  }
  return p;
}

double percent(uint64_t part, uint64_t whole) { return whole == 0 ? 100.0 : 100.0 * double(part) / double(whole); }

std::string duration(double seconds) {
  const auto s = uint64_t(std::max(0.0, seconds));
  return fmt::format("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60);
}

std::string utc_time(int64_t unix_seconds) {
  const std::time_t t = std::time_t(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buffer;
}

void print_header(const std::string& path, const LoadResult& loaded) {
  const CheckpointState& s = loaded.state;
  fmt::print("checkpoint: {} (generation {}, updated {})\n", path, s.generation, utc_time(s.updated_unix));
  // Also a journal record cut short or damaged: the figures below stop before it.
  if (!loaded.note.empty()) fmt::print("note: {}\n", loaded.note);
  fmt::print("fingerprint:{}\n", s.fingerprint.empty() ? " (none)" : "");
  for (const auto& [field, value] : s.fingerprint) fmt::print("  {}={}\n", field, value); // whole: what a mismatch names
}

// Plans of many small tasks (one per expert projection) are summed, not listed.
constexpr size_t kListedTasks = 32;

// Width of the name column: the longest task name, or "total".
size_t name_width(const CheckpointState& s) {
  size_t width = 5;
  for (const auto& t : s.tasks) width = std::max(width, t.name.size());
  return width;
}

void print_stages(const CheckpointState& s) {
  fmt::print("stages:\n");
  const size_t width = name_width(s);
  uint64_t done_total = 0, reductions_total = 0;
  for (const auto& t : s.tasks) {
    if (t.reductions.empty()) continue;
    const auto done = uint64_t(std::count_if(t.reductions.begin(), t.reductions.end(), [](const ReduceRecord& r) { return r.done != 0; }));
    done_total += done, reductions_total += t.reductions.size();
    if (s.tasks.size() <= kListedTasks) fmt::print("  {:<{}}  reduce {}/{} chunks\n", t.name, width, done, t.reductions.size());
  }
  if (s.tasks.size() > kListedTasks) fmt::print("  {} tasks  reduce {}/{} chunks\n", s.tasks.size(), done_total, reductions_total);
  std::string blobs;
  for (const auto& b : s.blobs) blobs += fmt::format("{}{}", blobs.empty() ? "" : ", ", b.name);
  fmt::print("  stored factors: {}\n", blobs.empty() ? "none" : blobs);
}

ChunkProgress print_chunks(const CheckpointState& s) {
  fmt::print("chunks:\n");
  const size_t width = name_width(s);
  ChunkProgress total;
  for (const auto& t : s.tasks) {
    const ChunkProgress p = progress_of(t);
    if (s.tasks.size() <= kListedTasks) {
      fmt::print("  {:<{}}  {}/{} chunks  {:.1f}%  {}/{} rows\n", t.name, width, p.chunks_done, p.chunks,
                 percent(p.chunks_done, p.chunks), p.rows_done, p.rows);
    }
    total.chunks_done += p.chunks_done, total.chunks += p.chunks;
    total.rows_done += p.rows_done, total.rows += p.rows, total.chunk_seconds += p.chunk_seconds;
  }
  fmt::print("  {:<{}}  {}/{} chunks  {:.1f}%  {}/{} rows\n", "total", width, total.chunks_done, total.chunks,
             percent(total.chunks_done, total.chunks), total.rows_done, total.rows);
  return total;
}

void print_rates(const CheckpointState& s, const ChunkProgress& total, bool files_missing, bool running) {
  fmt::print("elapsed: {}\n", duration(s.elapsed_seconds));
  const double chunk_rate = total.chunk_seconds > 0 ? double(total.rows_done) / total.chunk_seconds : 0;
  const double wall_rate = s.elapsed_seconds > 0 ? double(total.rows_done) / s.elapsed_seconds : 0;
  fmt::print("rows/s: {:.0f} per chunk-second (done rows / sum of chunk times), {:.0f} wall\n", chunk_rate, wall_rate);
  const uint64_t remaining = total.rows - std::min(total.rows, total.rows_done);
  if (remaining == 0 && files_missing)
    fmt::print("eta: unknown (every chunk done, but finished files are missing: see below)\n");
  else if (remaining == 0)
    fmt::print("eta: done\n");
  else if (wall_rate > 0)
    fmt::print("eta: {}{} ({} rows left at the wall rate)\n", running ? "" : "not running; once resumed, ",
               duration(double(remaining) / wall_rate), remaining);
  else
    fmt::print("eta: unknown ({} rows left, no rate yet)\n", remaining);
}

// The running (or last) run's ranks, from the figures rank 0 writes beside the checkpoint;
// read whole before anything is printed, so a malformed file names itself and prints nothing.
void print_ranks(const std::string& checkpoint) {
  const auto path = rank_figures_path(checkpoint);
  if (!std::filesystem::exists(path)) return;
  const auto figures = io::read_json_object(path);
  std::vector<std::string> lines;
  double seconds = 0;
  try {
    seconds = figures.value("run_seconds", 0.0);
    for (const auto& rank : figures.at("ranks")) {
      const auto rows = rank.at("rows").get<uint64_t>();
      lines.push_back(fmt::format("  rank {:>3}  {:<16}  {:>3} threads  {} rows  {:.0f} rows/s\n", rank.at("rank").get<int>(),
                                  rank.at("host").get<std::string>(), rank.at("threads").get<int>(), rows,
                                  seconds > 0 ? double(rows) / seconds : 0.0));
    }
  } catch (const nlohmann::json::exception& e) {
    throw PipelineError(fmt::format("{}: not the rank figures a run writes (run_seconds, ranks: rank, host, threads, "
                                    "rows): {}", path.string(), e.what()));
  }
  fmt::print("ranks (this run, {}):\n", duration(seconds));
  for (const auto& line : lines) fmt::print("{}", line);
}

// The finished steps' files no longer in the output folder: a run would take them back
// and make them again. Status does not plan, so a recipe's side files are not looked for.
std::vector<std::string> missing_finished_files(const CheckpointState& s) {
  const auto dst = std::find_if(s.fingerprint.begin(), s.fingerprint.end(), [](const auto& f) { return f.first == "dst"; });
  if (dst == s.fingerprint.end()) return {};
  std::vector<std::string> missing;
  for (const auto& step : s.finished) {
    for (const std::string& file : files_of_finished_step(step, {})) {
      if (!std::filesystem::exists(std::filesystem::path(dst->second) / file)) missing.push_back(file);
    }
  }
  return missing;
}

void print_finished(const CheckpointState& s, const std::vector<std::string>& missing) {
  std::string steps;
  for (const auto& step : s.finished) steps += (steps.empty() ? "" : ", ") + step;
  fmt::print("finished: {}\n", steps.empty() ? "(none)" : steps);
  if (!missing.empty()) {
    fmt::print("missing: {} (recorded finished, not in the output folder: the next run makes them again)\n",
               fmt::join(missing, ", "));
  }
}

// A checkpoint file's identity: a save renames a new file into place.
std::pair<uint64_t, int64_t> file_identity(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return {0, 0};
  return {uint64_t(info.st_ino), int64_t(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec};
}

// A run saves while status reads: a base read before a save and its journal read after it
// (begun anew for the next base) do not go together, and the progress would seem to go
// back. Read again while the file changed under the read (a few times: saves are seconds
// apart).
std::optional<LoadResult> load_steady(const std::string& path) {
  for (int attempt = 0;; ++attempt) {
    const auto before = file_identity(path);
    auto loaded = load_checkpoint(path);
    if (file_identity(path) == before || attempt == 4) return loaded;
  }
}

} // namespace

int cmd_status(const StatusArgs& args) {
  // An output folder stands for its own checkpoint (a run's default, <dst>/.shardq/checkpoint.h5).
  const std::string path = std::filesystem::is_directory(args.checkpoint)
                               ? (std::filesystem::path(args.checkpoint) / ".shardq" / "checkpoint.h5").string()
                               : args.checkpoint;
  std::optional<LoadResult> loaded;
  try {
    loaded = load_steady(path);
  } catch (const PipelineError& e) { // its advice (--fresh) is an option of run, not of status
    throw PipelineError(std::string(e.what()) + " (`shardq run ... --fresh`; status only reads)");
  }
  if (!loaded) throw PipelineError("no checkpoint at " + path + " (nor " + path + ".prev)");
  print_header(path, *loaded);
  RunActivity activity{true, ""}; // unknown: the ETA as for a running one
  try {
    activity = run_activity(path + ".lock");
  } catch (const PipelineError& e) { // status reports on the checkpoint whatever the lock says
    activity.line = std::string("unknown: ") + e.what();
  }
  fmt::print("run: {}\n", activity.line);
  print_stages(loaded->state);
  const ChunkProgress total = print_chunks(loaded->state);
  const std::vector<std::string> missing = missing_finished_files(loaded->state);
  print_rates(loaded->state, total, !missing.empty(), activity.running);
  print_ranks(path);
  print_finished(loaded->state, missing);
  std::fflush(stdout);
  return kExitOk;
}

} // namespace shardq
