// shardq entry point: parses the CLI and turns any error into one line and an exit code.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "fixture/fixture.h"
#include "pipeline/commands.h"
#include "pipeline/job.h"
#include "pipeline/log_sink.h"
#ifdef SHARDQ_MIMALLOC
#include "pipeline/heap/mimalloc_reserve.h"
#endif
#include "pipeline/signals.h"

namespace {

// `run` turns a stop signal at any instant into a flushed checkpoint and exit 75, start-up
// included. The handlers go in from .preinit_array, which glibc calls with main's
// arguments before any shared library's constructor (together 20-40 ms on a loaded 2-core
// VM, where main only starts 40-90 ms after exec). Only exec and dynamic loading come
// before (~20 ms there): a signal then still kills the process, before it wrote anything.
// `run` is always argv[1]: the app has no options of its own.
void install_stop_signals_for_run(int argc, char** argv, char**) {
  if (argc > 1 && std::strcmp(argv[1], "run") == 0) {
    shardq::install_stop_signals();
    shardq::hold_stop_signals(); // until MPI_Init is done (cmd_run): constructors run between
  }
}
[[gnu::section(".preinit_array"), gnu::used]] constexpr auto kStopSignalsFirst = &install_stop_signals_for_run;

const CLI::Validator kNotEmpty(
    [](const std::string& text) { return text.empty() ? std::string("must not be empty (an unset variable?)") : std::string(); },
    "PATH");

// A malformed --set is a usage error (exit 2), as other malformed options are.
const CLI::Validator kOverride(
    [](const std::string& text) {
      return shardq::is_override(text) ? std::string() : "expected section.key=value, not '" + text + "'";
    },
    "SECTION.KEY=VALUE");

// Unsigned options are checked as text first: CLI11 would wrap "-5" round to 2^64 - 5.
bool all_digits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}
const CLI::Validator kWholeNumber(
    [](const std::string& text) { return all_digits(text) ? std::string() : "must be a whole number, 0 or more, not " + text; },
    "N");
const CLI::Validator kCount(
    [](const std::string& text) {
      return all_digits(text) && text.find_first_not_of('0') != std::string::npos ? std::string()
                                                                                  : "must be a whole number above 0, not " + text;
    },
    "N");

// A first argument that is neither an option nor one of the app's subcommands: CLI11
// would only say "A subcommand is required".
bool refuse_unknown_subcommand(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return false;
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  if (std::find(names.begin(), names.end(), argv[1]) != names.end()) return false;
  std::fprintf(stderr, "shardq: unknown subcommand '%s' (%s; --help)\n", argv[1], fmt::format("{}", fmt::join(names, ", ")).c_str());
  return true;
}

// What a command printed must have reached its file: a full disk under `inspect > file`
// is an error, not a short table and exit 0.
int checked_stdout(int code) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return code;
  std::fprintf(stderr, "shardq: error: writing the standard output failed: %s\n", std::strerror(errno));
  return code == shardq::kExitOk ? shardq::kExitError : code;
}

void add_inspect(CLI::App& app, shardq::InspectArgs& args) {
  auto* sub = app.add_subcommand("inspect", "Print the tensor table of one shard");
  sub->add_option("file", args.file, "safetensors shard")->required()->check(kNotEmpty);
}

void add_fixture(CLI::App& app, shardq::FixtureArgs& args) {
  auto* sub = app.add_subcommand("fixture", "Write a miniature DeepSeek-V4.1 checkpoint");
  sub->add_option("--preset", args.preset, "DeepSeek's FP8/FP4 layout, or NVIDIA's NVFP4 reference")
      ->check(CLI::IsMember(shardq::fixture_preset_names()));
  sub->add_option("--shape", args.shape,
                  "mini (default): hidden 256, 16 layers x 8 routed experts, 2 MTP layers, 6 shards (~60 MB) | "
                  "real-count: the real model's tensor count at small sizes: 40 layers x 384 routed experts "
                  "+ 3 MTP layers (49,536 expert projections, 100K tensors; the reference 193K), Engram at "
                  "layers 1 and 14, hidden 64, moe_intermediate 32, one shard per layer: 46 shards (~90 MB)")
      ->check(CLI::IsMember(shardq::fixture_shape_names()));
  sub->add_option("--out", args.out, "output folder (new or empty)")->required()->check(kNotEmpty);
  sub->add_option("--engram-vocab", args.engram_vocab,
                  "engram_vocab_size (scales the tables; default 2000, real-count 300)")
      ->check(kCount);
  sub->add_option("--seed", args.seed, "random seed (same seed, same bytes)")->check(kWholeNumber);
}

void add_run(CLI::App& app, shardq::RunArgs& args) {
  auto* sub = app.add_subcommand("run", "Run a job (resumes from its checkpoint)");
  // An empty path is refused, not taken for "not given": `--dst "$OUT"` with OUT unset
  // would otherwise write to the job file's own dst.
  sub->add_option("job", args.job_file, "job TOML file")->required()->check(kNotEmpty);
  sub->add_option("--src", args.src, "source checkpoint folder")->check(kNotEmpty);
  sub->add_option("--dst", args.dst, "output folder")->check(kNotEmpty);
  sub->add_option("--checkpoint", args.checkpoint, "checkpoint file")->check(kNotEmpty);
  // One value per --set, so that options may come before the job file.
  sub->add_option("--set", args.overrides, "section.key=value override (repeatable)")
      ->allow_extra_args(false)
      ->check(kOverride);
  sub->add_flag("--force", args.force, "overwrite a complete output");
  sub->add_flag("--fresh", args.fresh, "start over, discarding the checkpoint");
  sub->add_flag("--verify-done", args.verify_done, "re-check finished chunks before skipping them");
}

void add_status(CLI::App& app, shardq::StatusArgs& args) {
  auto* sub = app.add_subcommand("status", "Print a checkpoint's progress");
  sub->add_option("checkpoint", args.checkpoint, "checkpoint.h5, or an output folder (its .shardq/checkpoint.h5)")
      ->required()
      ->check(kNotEmpty);
}

void add_verify(CLI::App& app, shardq::VerifyArgs& args) {
  auto* sub = app.add_subcommand("verify", "Audit an output against its source");
  sub->add_option("--src", args.src)->required()->check(kNotEmpty);
  sub->add_option("--dst", args.dst)->required()->check(kNotEmpty);
  sub->add_option("job", args.job_file, "job TOML file")->check(kNotEmpty);
  sub->add_option("--set", args.overrides, "section.key=value override, as given to run (repeatable)")
      ->allow_extra_args(false)
      ->check(kOverride);
}

void add_study(CLI::App& app, shardq::StudyArgs& args) {
  auto* sub = app.add_subcommand("study", "Compare quantization methods on sampled Engram rows");
  sub->add_option("--src", args.src)->required()->check(kNotEmpty);
  sub->add_option("--layer", args.layer)->required();
  sub->add_option("--sample", args.sample, "sampled rows, at least one per hash column")->check(kCount);
  sub->add_option("--methods", args.methods, "comma-separated: rtn, mse, gptq, gptq-mse")
      ->check(CLI::Validator(shardq::study_methods_error, "METHOD[,METHOD...]"));
  sub->add_option("--out", args.out, "output folder for study.json and study.png")->check(kNotEmpty);
  sub->add_option("--seed", args.seed)->check(kWholeNumber);
}

// Every log line (info, warnings, errors) and the error line main prints go to stderr, in
// one stream, as Python's logging does: with `#SBATCH -e` a warning lands beside the error
// it explains. stdout carries only a command's own output (status, verify's table,
// inspect), which scripts read. A progress bar on the same terminal is cleared first.
void log_to_stderr() { spdlog::set_default_logger(shardq::make_stderr_logger()); }

} // namespace

int main(int argc, char** argv) {
  log_to_stderr();
  CLI::App app{"shardq: streaming, resumable re-quantization of huge checkpoints"};
  app.require_subcommand(1);
  shardq::InspectArgs inspect;
  shardq::FixtureArgs fixture;
  shardq::RunArgs run;
#ifdef SHARDQ_MIMALLOC
  run.reserve_heap = shardq::reserve_heap_mimalloc;
#endif
  shardq::StatusArgs status;
  shardq::VerifyArgs verify;
  shardq::StudyArgs study;
  add_inspect(app, inspect);
  add_fixture(app, fixture);
  add_run(app, run);
  add_status(app, status);
  add_verify(app, verify);
  add_study(app, study);
  if (refuse_unknown_subcommand(app, argc, argv)) return shardq::kExitUsage;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? shardq::kExitOk : shardq::kExitUsage;
  }
  try {
    if (app.got_subcommand("inspect")) return checked_stdout(shardq::cmd_inspect(inspect));
    if (app.got_subcommand("fixture")) return checked_stdout(shardq::cmd_fixture(fixture));
    if (app.got_subcommand("run")) return shardq::cmd_run(run);
    if (app.got_subcommand("status")) return checked_stdout(shardq::cmd_status(status));
    if (app.got_subcommand("verify")) return checked_stdout(shardq::cmd_verify(verify));
    if (app.got_subcommand("study")) return checked_stdout(shardq::cmd_study(study));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardq: error: %s\n", e.what());
    return shardq::kExitError;
  }
  return shardq::kExitUsage;
}
