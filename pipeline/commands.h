// The CLI contract (README.md "Commands"): one function per subcommand, each in its own file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace shardq {

// Exit codes shared by every command and the scripts that call them.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInterrupted = 75; // EX_TEMPFAIL: checkpointed, resumable

struct InspectArgs {
  std::string file;
};
int cmd_inspect(const InspectArgs& args);

struct FixtureArgs {
  std::string preset = "dsv41-mini";
  std::string shape = "mini"; // mini | real-count (fixture/fixture.h fixture_dims)
  std::string out;
  uint64_t engram_vocab = 0; // 0 = the preset's default
  uint64_t seed = 1;
};
int cmd_fixture(const FixtureArgs& args);

struct RunArgs {
  std::string job_file;
  std::string src, dst, checkpoint; // empty = from the job file
  std::vector<std::string> overrides; // "section.key=value"
  bool force = false;       // overwrite a complete output in dst
  bool fresh = false;       // ignore (replace) an existing checkpoint
  bool verify_done = false; // re-check chunks recorded done before skipping them
  // Takes `bytes` of heap from the OS ahead of use and returns the thread that populates
  // it (the binary's allocator: pipeline/heap/mimalloc_reserve.h); empty: the heap grows
  // as used. A 100K-tensor plan makes ~80K first touches of fresh pages, ~20% of a
  // 50K-tensor job's CPU in page faults; populated on the core the plan leaves idle
  // instead, the plan and the run find their pages mapped.
  std::function<std::jthread(uint64_t bytes)> reserve_heap;
};
int cmd_run(const RunArgs& args);

struct StatusArgs {
  std::string checkpoint;
};
int cmd_status(const StatusArgs& args);

struct VerifyArgs {
  std::string src, dst, job_file;
  std::vector<std::string> overrides; // --set section.key=value, as the run was given them
};
int cmd_verify(const VerifyArgs& args);

struct StudyArgs {
  std::string src;
  int layer = -1;
  uint64_t sample = 4096;
  std::string methods = "rtn,mse,gptq,gptq-mse";
  std::string out = "study";
  uint64_t seed = 1;
};
int cmd_study(const StudyArgs& args);
// --methods checked before any work: empty when every comma-separated name is a method
// (rtn, mse, gptq, gptq-mse) and none repeats, else what is wrong.
std::string study_methods_error(const std::string& methods);

} // namespace shardq
