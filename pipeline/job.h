// A job file (README.md "Job files"): TOML, every key known, overridable with --set.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardq {

struct Job {
  // [job]
  std::string recipe = "engram-nvfp4";
  std::string src;
  std::string dst;
  // [quant]
  std::string method = "gptq-mse"; // rtn | mse | gptq | gptq-mse
  int64_t mse_candidates = 8;
  double mse_alpha_min = 0.75;
  double gptq_damp = 0.01;
  int64_t gptq_block = 128;
  std::string input_scales_from;
  bool keep_mtp = true;
  double engram_min_cosine = 0.99;  // verify: an MXFP4 Engram table's cosine vs its source
  std::vector<std::string> ignore;
  // [run]
  int64_t rows_per_chunk = 1048576;
  int64_t threads = 0;              // compute threads per rank; 0: the cores in its affinity mask
  std::string backend = "auto";    // auto | cpu | cuda
  std::string write_mode = "owner"; // owner | direct
  std::string checkpoint;           // default <dst>/.shardq/checkpoint.h5

  std::string source_file; // where it was read from (for messages)

  bool uses_gptq() const { return method == "gptq" || method == "gptq-mse"; }
  bool uses_mse() const { return method == "mse" || method == "gptq-mse"; }
  std::string checkpoint_path() const;
  // quant.input_scales_from made absolute and resolved ("" if unset): what the fingerprint
  // and the report record, whatever folder the run or verify is started from.
  std::string input_scales_folder() const;
  // run.threads, or the cores this process may run on (its CPU affinity mask: what mpirun's
  // or Slurm's binding gave the rank). Not in the fingerprint: bytes do not depend on it.
  int compute_threads() const;
  // The canonical text of every key that decides output bytes (the checkpoint fingerprint).
  std::string canonical() const;
};

// Whether `assignment` has the form of an override: "section.key=value", section and key
// not empty (the value may be).
bool is_override(std::string_view assignment);

// Reads a job file, applies "section.key=value" overrides, validates; throws
// PipelineError naming the file and key.
Job load_job(const std::string& path, const std::vector<std::string>& overrides);

} // namespace shardq
