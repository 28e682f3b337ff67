// `shardq verify`: an audit of a finished output against its source, independent of the
// run that made it. For every product: the index closed (every shard present, every tensor
// in exactly one shard, headers matching their files), unchanged shards, copied tensors and
// other files byte-identical, constants, config and side files as planned; then each
// task's own audit (NVFP4 tables within bound with their figures recomputed, MXFP4 tables
// equal to the quantizer's bytes with their cosine, transcoded experts bit-exact). Failures
// are printed one per line, then a table of every check; exit 0 only if all pass.
#include <fmt/format.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include "kernels/formats.h"
#include "kernels/mxfp4.h"
#include "pipeline/commands.h"
#include "pipeline/io/config.h"
#include "pipeline/io/shard_readers.h"
#include "pipeline/pipeline_error.h"
#include "pipeline/plan.h"
#include "stages/amax.h"
#include "stages/linear_rows.h"
#include "stages/quantize.h"
#include "stages/verify.h"

namespace shardq {
namespace {

constexpr uint64_t kPieceBytes = 64ull << 20;
constexpr uint64_t kVerifyRows = 65536;

// The source's and the output's shards, each opened once for the whole audit: a plan of
// 50K tasks would otherwise parse the same few headers of thousands of tensors per task.
struct AuditReaders {
  io::ShardReaders source, output;
  const io::Reader& source_of(const Plan& plan, const Task& task) { return source.get(plan.shards[task.shard].file); }
  const io::Reader& output_of(const Plan& plan, const Task& task) { return output.get(plan.shards[task.shard].file); }
};

// Checks grouped by what they check; failures print at once, the table at the end.
class Audit {
 public:
  // Failures listed per category: a wrong --src fails every tensor, and the first lines
  // and the table say it better than thousands.
  static constexpr uint64_t kListedFailures = 20;
  void check(const std::string& category, bool ok, const std::string& what, const std::string& detail) {
    Category& c = category_(category);
    ++c.checked;
    if (ok) return;
    ++c.failed;
    ++failed_;
    if (c.failed <= kListedFailures) {
      std::printf("FAIL  %s%s%s\n", what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
    } else if (c.failed == kListedFailures + 1) {
      std::printf("FAIL  ... more of '%s' not listed (the table counts them)\n", category.c_str());
    }
  }
  void note(const std::string& category, const std::string& figure) { category_(category).figure = figure; }
  int failed() const { return failed_; }

  void print_table() const {
    size_t width = 5;
    for (const auto& [name, c] : categories_) width = std::max(width, name.size());
    std::printf("%-*s  %8s  %6s  %s\n", int(width), "check", "checked", "failed", "figure");
    for (const auto& [name, c] : categories_) {
      std::printf("%-*s  %8llu  %6llu  %s\n", int(width), name.c_str(), (unsigned long long)c.checked,
                  (unsigned long long)c.failed, c.figure.c_str());
    }
    std::printf("%s: %d check(s) failed\n", failed_ ? "FAILED" : "OK", failed_);
  }

 private:
  struct Category {
    uint64_t checked = 0, failed = 0;
    std::string figure;
  };
  Category& category_(const std::string& name) {
    for (auto& [n, c] : categories_) if (n == name) return c;
    return categories_.emplace_back(name, Category{}).second;
  }
  std::vector<std::pair<std::string, Category>> categories_;
  int failed_ = 0;
};

// Rows [first, first + count) of a tensor into `bytes` (resized to fit).
void read_tensor_rows(const io::Reader& reader, const std::string& name, uint64_t first, uint64_t count,
                      std::vector<uint8_t>& bytes) {
  const auto& tensor = reader.tensor(name);
  bytes.resize(count * tensor.row_bytes());
  reader.read_rows(tensor, first, count, bytes);
}

uint64_t hash_range(const io::Reader& reader, uint64_t begin, uint64_t end) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  std::vector<uint8_t> buffer;
  for (uint64_t at = begin; at < end; at += kPieceBytes) {
    buffer.resize(std::min(kPieceBytes, end - at));
    reader.read_bytes(at, buffer);
    XXH3_64bits_update(&state, buffer.data(), buffer.size());
  }
  return XXH3_64bits_digest(&state);
}

// Linked files are the same inode; others are compared in pieces, never whole in memory.
bool same_file_bytes(const std::filesystem::path& a, const std::filesystem::path& b) {
  if (std::filesystem::equivalent(a, b)) return true;
  if (std::filesystem::file_size(a) != std::filesystem::file_size(b)) return false;
  std::ifstream in_a(a, std::ios::binary), in_b(b, std::ios::binary);
  std::vector<char> piece_a(kPieceBytes), piece_b(kPieceBytes);
  while (in_a && in_b) {
    in_a.read(piece_a.data(), std::streamsize(kPieceBytes));
    in_b.read(piece_b.data(), std::streamsize(kPieceBytes));
    if (in_a.gcount() != in_b.gcount() || !std::equal(piece_a.begin(), piece_a.begin() + in_a.gcount(), piece_b.begin())) return false;
  }
  return true;
}

// rtn and mse decide every byte from the row and the global scale: the table is quantized
// again with the job's method and compared byte for byte, so a scale of the wrong rule (a
// candidate the search would not pick, a saturating one) fails, which the bound alone,
// measured at the scale the output stores, would pass.
// Its counters (blocks, zero blocks, scale underflows, MSE candidate wins), summed over
// every chunk, are what the report's must be.
struct Requantized {
  QuantizeParams params;
  Nvfp4Chunk chunk;
  ChunkStats totals;
  std::string first_difference;

  void compare(const Fp8RowChunk& source, const std::vector<uint8_t>& packed, const std::vector<uint8_t>& scales) {
    chunk.resize(source.rows, source.cols);
    quantize_chunk_nvfp4(source, params, chunk, nullptr);
    totals.merge(chunk.stats);
    if (!first_difference.empty()) return;
    const uint64_t packed_row = uint64_t(source.cols) / 2, scale_row = uint64_t(source.cols) / Nvfp4::block;
    for (uint64_t r = 0; r < source.rows; ++r) {
      const bool same = std::equal(packed.begin() + ptrdiff_t(r * packed_row), packed.begin() + ptrdiff_t((r + 1) * packed_row),
                                   chunk.packed.begin() + ptrdiff_t(r * packed_row)) &&
                        std::equal(scales.begin() + ptrdiff_t(r * scale_row), scales.begin() + ptrdiff_t((r + 1) * scale_row),
                                   chunk.scales.begin() + ptrdiff_t(r * scale_row));
      if (!same) {
        first_difference = fmt::format("row {}: codes or scales differ from what {} makes of the source", source.first_row + r,
                                       quant_method_name(params.method));
        return;
      }
    }
  }
};

// One figure of a table's report entry against its recomputed value (exact: integers and
// fp32 values the report holds as they were computed).
template <typename T>
void check_report_figure(const nlohmann::ordered_json& report_table, const std::string& tensor, const char* key,
                         const T& expected, Audit& audit) {
  const bool ok = report_table.contains(key) && report_table[key] == nlohmann::ordered_json(expected);
  audit.check("nvfp4 report figures", ok, fmt::format("{} {}", tensor, key),
              fmt::format("report {}, recomputed {}", report_table.contains(key) ? report_table[key].dump() : "absent",
                          nlohmann::ordered_json(expected).dump()));
}

// The report's other figures of a table: its shape, amax and global scale (any method), and
// for rtn and mse, whose bytes verify makes again, the block counters of that quantization
// (GPTQ counts them on the error-fed rows, which verify does not make).
void check_table_report_figures(const Task& task, const nlohmann::ordered_json& report_table, float amax,
                                const ChunkStats* requantized, size_t mse_candidates, Audit& audit) {
  const std::string& tensor = task.outputs[0].name;
  check_report_figure(report_table, tensor, "rows", task.rows, audit);
  check_report_figure(report_table, tensor, "cols", task.cols, audit);
  check_report_figure(report_table, tensor, "amax", amax, audit);
  check_report_figure(report_table, tensor, "global_scale", Nvfp4::global_scale(amax), audit);
  check_report_figure(report_table, tensor, "all_zero", amax == 0.0f, audit);
  check_report_figure(report_table, tensor, "blocks", task.rows * uint64_t(task.cols) / Nvfp4::block, audit);
  if (!requantized) return;
  check_report_figure(report_table, tensor, "zero_blocks", requantized->zero_blocks, audit);
  check_report_figure(report_table, tensor, "scale_underflows", requantized->scale_underflows, audit);
  // One entry per candidate for mse (a report with fewer, or none, does not pass), none for rtn.
  if (mse_candidates == 0 && !report_table.contains("mse_candidate_wins")) return;
  std::vector<uint64_t> wins;
  if (report_table.contains("mse_candidate_wins")) {
    for (const auto& candidate : report_table["mse_candidate_wins"]) wins.push_back(candidate.value("wins", uint64_t{0}));
  }
  const size_t candidates = std::min(mse_candidates, requantized->candidate_wins.size());
  std::vector<uint64_t> recomputed(requantized->candidate_wins.begin(), requantized->candidate_wins.begin() + ptrdiff_t(candidates));
  audit.check("nvfp4 report figures", wins == recomputed, tensor + " mse_candidate_wins",
              fmt::format("report [{}], recomputed [{}]", fmt::join(wins, ", "), fmt::join(recomputed, ", ")));
}

// An engram-nvfp4 task: global scale recomputed from the source's amax, every row within
// the NVFP4 bound (round-to-nearest methods), the report's rel RMS error recomputed.
void verify_engram_nvfp4(const Plan& plan, const Task& task, const nlohmann::ordered_json& report_table,
                         bool round_to_nearest, AuditReaders& readers, Audit& audit) {
  const io::Reader& source = readers.source_of(plan, task);
  const io::Reader& output = readers.output_of(plan, task);
  const auto& weight = source.tensor(task.inputs[0]);
  const auto& scale = source.tensor(task.inputs[1]);
  const std::string global_name = task.name + ".weight_scale_2";
  float global_scale = 0.0f;
  std::vector<uint8_t> scalar(4);
  output.read_rows(output.tensor(global_name), 0, 1, scalar);
  std::memcpy(&global_scale, scalar.data(), 4);

  float amax = 0.0f;
  VerifyCounts counts;
  Requantized requantized;
  requantized.params = make_quantize_params(parse_quant_method(plan.job.method), int(plan.job.mse_candidates),
                                            plan.job.mse_alpha_min, global_scale);
  std::vector<uint8_t> codes, scales, packed, out_scales;
  for (uint64_t first = 0; first < task.rows; first += kVerifyRows) {
    const uint64_t rows = std::min(kVerifyRows, task.rows - first);
    codes.resize(rows * weight.row_bytes());
    scales.resize(rows * scale.row_bytes());
    packed.resize(rows * tensor_row_bytes(task.outputs[0]));
    out_scales.resize(rows * tensor_row_bytes(task.outputs[1]));
    source.read_rows(weight, first, rows, codes);
    source.read_rows(scale, first, rows, scales);
    output.read_rows(output.tensor(task.outputs[0].name), first, rows, packed);
    output.read_rows(output.tensor(task.outputs[1].name), first, rows, out_scales);
    const Fp8RowChunk chunk{task.inputs[0], first, rows, task.cols, codes, scales, task.inputs[1]};
    amax = std::max(amax, amax_fp8_chunk(chunk));
    verify_nvfp4_rows(chunk, packed.data(), out_scales.data(), global_scale, round_to_nearest, task.outputs[0].name, counts);
    if (round_to_nearest) requantized.compare(chunk, packed, out_scales);
  }
  if (round_to_nearest) {
    audit.check("nvfp4 table bytes as the method makes them", requantized.first_difference.empty(), task.outputs[0].name,
                requantized.first_difference);
  }
  const float expected_global = Nvfp4::global_scale(amax);
  audit.check("nvfp4 global scales", global_scale == expected_global, global_name,
              fmt::format("{:.9g}, amax {:.9g} / 2688 = {:.9g}", global_scale, amax, expected_global));
  audit.check("nvfp4 table values", counts.nan_scales == 0 && counts.elements_out_of_bound == 0, task.outputs[0].name + " values",
              counts.first_problem.empty() ? fmt::format("{} rows{}", counts.rows, round_to_nearest ? " within the NVFP4 bound" : " decode")
                                           : counts.first_problem);
  const double ref = counts.sums.reference_sq.to_double();
  const double rel_rms = ref > 0 ? std::sqrt(counts.sums.error_sq.to_double() / ref) : 0.0;
  const double reported = report_table.value("rel_rms_error", -1.0);
  audit.check("nvfp4 report figures", std::fabs(rel_rms - reported) <= 1e-9 * std::max(1.0, std::fabs(rel_rms)), task.outputs[0].name + " rel_rms_error",
              fmt::format("recomputed {:.12g}, report {:.12g}", rel_rms, reported));
  const size_t mse_candidates = plan.job.uses_mse() ? size_t(plan.job.mse_candidates) : 0;
  check_table_report_figures(task, report_table, amax, round_to_nearest ? &requantized.totals : nullptr, mse_candidates, audit);
}

// Shards holding an Engram table are their own row of the table (the products promise them).
std::string shard_category(const std::set<size_t>& engram_shards, size_t shard) {
  return engram_shards.count(shard) ? "Engram tables identical to the source" : "unchanged shards identical";
}

std::set<size_t> shards_with_engram_tables(const Plan& plan) {
  std::set<size_t> shards;
  for (const auto& t : plan.source.tensors) {
    if (t.spec.name.find("engram.embed") != std::string::npos) shards.insert(t.shard);
  }
  return shards;
}

// Copies byte-identical, constants as planned.
void verify_shard_entries(const ShardPlan& shard, AuditReaders& readers, Audit& audit) {
  const io::Reader& source = readers.source.get(shard.file);
  const io::Reader& output = readers.output.get(shard.file);
  for (const auto& entry : shard.entries) {
    const io::TensorInfo* found = output.find(entry.spec.name);
    if (!found) continue; // counted by verify_index and the task's outputs
    const auto& b = *found;
    if (entry.source != EntrySource::task_output) { // a task's outputs: outputs_as_planned
      audit.check("tensor headers as planned", b.dtype == entry.spec.dtype && b.shape == entry.spec.shape, entry.spec.name,
                  fmt::format("is {} {}, planned {} {}", dtype_name(b.dtype), shape_text(b.shape), dtype_name(entry.spec.dtype),
                              shape_text(entry.spec.shape)));
    }
    if (entry.source == EntrySource::copy) {
      const auto& a = source.tensor(entry.from);
      audit.check(entry.from.find("engram.embed") != std::string::npos ? "Engram tables identical to the source" : "copied tensors identical",
                  a.end - a.begin == b.end - b.begin && hash_range(source, a.begin, a.end) == hash_range(output, b.begin, b.end),
                  entry.spec.name, "not byte-identical to the source's '" + entry.from + "'");
    } else if (entry.source == EntrySource::constant) {
      std::vector<uint8_t> bytes(b.end - b.begin);
      output.read_bytes(b.begin, bytes);
      audit.check("constants as planned", bytes == entry.bytes, entry.spec.name, "differs from the planned value");
    }
  }
}

// Output tensors by dtype, over every shard.
void print_dtype_totals(const CheckpointView& output) {
  std::map<std::string, uint64_t> totals;
  for (const auto& t : output.tensors) ++totals[std::string(dtype_name(t.spec.dtype))];
  std::vector<std::string> parts;
  for (const auto& [dtype, count] : totals) parts.push_back(fmt::format("{} {}", dtype, count));
  std::printf("dtype totals: %s\n", fmt::format("{}", fmt::join(parts, " / ")).c_str());
}

// The recipe of a finished output: the product whose report is there.
// The recipes whose report the output folder holds: one for a finished output.
std::vector<std::string> reports_in(const std::filesystem::path& dst) {
  std::vector<std::string> recipes;
  for (const auto& name : recipe_names()) {
    if (std::filesystem::exists(dst / report_file_of(name))) recipes.push_back(name);
  }
  return recipes;
}

// The recipe of a finished output: the one report it holds; none, or more than one (the
// products of two jobs in one folder), is refused.
std::string recipe_of_output(const std::filesystem::path& dst, const std::string& job_recipe) {
  const std::vector<std::string> recipes = reports_in(dst);
  if (recipes.size() > 1) {
    throw PipelineError(fmt::format("{}: holds the reports of {}: the outputs of two jobs in one folder", dst.string(),
                                    fmt::join(recipes, " and ")));
  }
  if (recipes.empty()) throw PipelineError(fmt::format("{}: no report: not a finished shardq output", dst.string()));
  if (!job_recipe.empty() && recipes.front() != job_recipe) {
    throw PipelineError(fmt::format("{}: an output of recipe {} (its report {}.json), not of the job's recipe {}",
                                    dst.string(), recipes.front(), recipes.front(), job_recipe));
  }
  return recipes.front();
}

const nlohmann::ordered_json& report_parameters(const nlohmann::ordered_json& report) {
  static const nlohmann::ordered_json kNone = nlohmann::ordered_json::object();
  return report.contains("parameters") ? report["parameters"] : kNone;
}

// The job keys a report records under "parameters" that decide its output's bytes:
// without a job file verify takes them from the report; with one it requires them equal
// (check_made_by_job).
template <class Visit> void visit_made_with_keys(Job& job, Visit&& visit) {
  visit("mse_candidates", job.mse_candidates);
  visit("mse_alpha_min", job.mse_alpha_min);
  visit("gptq_damp", job.gptq_damp);
  visit("gptq_block", job.gptq_block);
  visit("keep_mtp", job.keep_mtp);
  visit("ignore", job.ignore);
}

// The job to check against: JOB.toml when given, else what the report records.
Job verify_job(const VerifyArgs& args) {
  Job job;
  if (!args.job_file.empty()) job = load_job(args.job_file, args.overrides);
  else if (!args.overrides.empty()) throw PipelineError("verify: --set needs the job file it overrides");
  job.recipe = recipe_of_output(args.dst, args.job_file.empty() ? "" : job.recipe);
  job.src = args.src;
  job.dst = args.dst;
  if (args.job_file.empty()) {
    const auto report = io::read_json_object(std::filesystem::path(args.dst) / report_file_of(job.recipe));
    const auto& parameters = report_parameters(report);
    job.method = report.value("method", job.method);
    job.input_scales_from = parameters.value("input_scales_from", std::string());
    job.engram_min_cosine = parameters.value("engram_min_cosine", job.engram_min_cosine);
    visit_made_with_keys(job, [&](const char* key, auto& value) {
      if (parameters.contains(key)) value = parameters[key].get<std::decay_t<decltype(value)>>();
    });
  }
  return job;
}

// With a job file, the output must be that job's: its report's method and parameters equal
// to the job's. An rtn output would otherwise pass a gptq-mse job's audit, which for GPTQ
// checks no error bound.
void check_made_by_job(const Job& job, const nlohmann::ordered_json& report, Audit& audit) {
  std::vector<std::string> differences;
  const auto reads = make_recipe(job.recipe)->quant_keys();
  const std::string method = report.value("method", std::string());
  if (std::ranges::find(reads, "method") != reads.end() && method != job.method) {
    differences.push_back(fmt::format("method: report {}, job {}", method, job.method));
  }
  const auto& parameters = report_parameters(report);
  Job job_copy = job;
  visit_made_with_keys(job_copy, [&](const char* key, const auto& value) {
    const nlohmann::ordered_json expected = value;
    if (parameters.contains(key) && parameters[key] != expected) {
      differences.push_back(fmt::format("{}: report {}, job {}", key, parameters[key].dump(), expected.dump()));
    }
  });
  audit.check("made by this job", differences.empty(), report_file_of(job.recipe), fmt::format("{}", fmt::join(differences, "; ")));
}

// The source bytes the report records (0.3.1 on) against those of --src: another source
// is said once, before the per-tensor failures it brings.
void check_made_from_source(const Plan& plan, const nlohmann::ordered_json& report, Audit& audit) {
  if (!report.contains("source")) return; // a report of 0.3.0 records none
  const auto& recorded = report["source"];
  const std::string headers = recorded.value("headers_digest", std::string());
  const std::string sample = recorded.value("sample_digest", std::string());
  const std::string here_headers = fingerprint_value(plan, "source_headers");
  const std::string here_sample = fingerprint_value(plan, "source_sample");
  audit.check("made from this source", headers == here_headers && sample == here_sample, plan.src.string(),
              fmt::format("the report records another source (headers digest {}, sample digest {}; here {}, {}): the "
                          "output was made from other bytes, or this --src changed since",
                          headers, sample, here_headers, here_sample));
}

// Index closed: every shard it names is present and whole (its header matches its size),
// every tensor of every shard is named once, in the shard that holds it, and the folder
// holds no other .safetensors file.
void verify_index(const Plan& plan, AuditReaders& readers, Audit& audit) {
  const io::ShardIndex index = io::read_index(plan.dst / io::kIndexFileName);
  audit.check("index as planned", index == output_index(plan), std::string(io::kIndexFileName), "differs from the plan");
  std::unordered_map<std::string_view, std::string> shard_of;
  const std::set<std::string> files(index.shard_files().begin(), index.shard_files().end());
  for (const auto& [name, file] : index.entries()) shard_of.emplace(name, file);
  std::unordered_map<std::string_view, int> seen;
  for (const auto& file : files) {
    const auto path = plan.dst / file;
    bool whole = std::filesystem::exists(path);
    if (whole) {
      try {
        const io::Reader& reader = readers.output.get(file); // validates the header against the file size
        for (const auto& t : reader.tensors()) {
          ++seen[t.name];
          const auto named = shard_of.find(t.name);
          audit.check("index closed", named != shard_of.end() && named->second == file, t.name,
                      "in " + file + " but the index names " + (named != shard_of.end() ? named->second : "no shard"));
        }
      } catch (const std::exception& e) {
        whole = false;
        audit.check("shard headers match files", false, file, e.what());
        continue;
      }
    }
    audit.check("shard headers match files", whole, file, "missing in dst");
  }
  for (const auto& [name, file] : index.entries()) {
    audit.check("index closed", seen[name] == 1, std::string(name), fmt::format("held by {} shards, 1 expected", seen[name]));
  }
  const auto outside = io::shard_files_outside(plan.dst, index.shard_files());
  audit.check("no shard files outside the index", outside.empty(), plan.dst.string(),
              fmt::format("holds {} .safetensors file(s) the index does not name: {}", outside.size(), fmt::join(outside, ", ")));
}

float read_f32_scalar(const io::Reader& reader, const std::string& name) {
  std::vector<uint8_t> bytes(4);
  reader.read_rows(reader.tensor(name), 0, 1, bytes);
  float value = 0;
  std::memcpy(&value, bytes.data(), 4);
  return value;
}

// A task whose two inputs (codes, scales) and two outputs have its rows, kVerifyRows at a
// time: check(first, rows, source codes, source scales, output codes, output scales).
template <class CheckRows>
void for_each_row_batch(const Plan& plan, const Task& task, AuditReaders& readers, CheckRows check) {
  const io::Reader& source = readers.source_of(plan, task);
  const io::Reader& output = readers.output_of(plan, task);
  std::vector<uint8_t> source_codes, source_scales, codes, scales;
  for (uint64_t first = 0; first < task.rows; first += kVerifyRows) {
    const uint64_t rows = std::min(kVerifyRows, task.rows - first);
    read_tensor_rows(source, task.inputs[0], first, rows, source_codes);
    read_tensor_rows(source, task.inputs[1], first, rows, source_scales);
    read_tensor_rows(output, task.outputs[0].name, first, rows, codes);
    read_tensor_rows(output, task.outputs[1].name, first, rows, scales);
    check(first, rows, source_codes, source_scales, codes, scales);
  }
}

// A transcoded expert's global scale as stored, and the largest E8M0 byte of its source.
struct ExpertGlobalScale {
  std::string tensor; // its weight_scale_2
  float stored = 0;
  uint8_t source_emax = 0;
};

// A transcoded expert: every element bit-exact against the source (at the global scale it
// stores; whether that scale is the rule's is checked per group, check_expert_global_scales).
ExpertGlobalScale verify_transcode(const Plan& plan, const Task& task, AuditReaders& readers, Audit& audit) {
  ExpertGlobalScale global{task.name + ".weight_scale_2"};
  global.stored = read_f32_scalar(readers.output_of(plan, task), global.tensor);
  VerifyCounts counts;
  for_each_row_batch(plan, task, readers, [&](uint64_t first, uint64_t rows, const auto& source_codes, const auto& source_scales,
                                     const auto& codes, const auto& scales) {
    global.source_emax = std::max(global.source_emax, e8m0_max_of(source_scales.data(), source_scales.size()));
    verify_transcode_rows(source_codes.data(), source_scales.data(), codes.data(), scales.data(), global.stored, first,
                          rows, task.cols, task.outputs[0].name, counts);
  });
  audit.check("experts bit-exact", counts.elements_out_of_bound == 0, task.outputs[0].name,
              fmt::format("{} elements differ from the source; first: {}", counts.elements_out_of_bound, counts.first_problem));
  return global;
}

// Each scale group (w1 and w3 of an expert together, w2 alone) stores one global scale,
// 2^(emax - 135) of the group's largest source E8M0 byte: the bit-exact check alone would
// pass w1 and w3 at different scales with their block scales moved to match, which a
// loader's fused w13 cannot use.
void check_expert_global_scales(const std::map<size_t, std::vector<ExpertGlobalScale>>& groups, Audit& audit) {
  for (const auto& [group, members] : groups) {
    uint8_t emax = 0;
    for (const auto& member : members) emax = std::max(emax, member.source_emax);
    const float expected = nvfp4_global_scale_from_e8m0_max(emax);
    for (const auto& member : members) {
      audit.check("expert global scales 2^(emax - 135)",
                  std::bit_cast<uint32_t>(member.stored) == std::bit_cast<uint32_t>(expected), member.tensor,
                  fmt::format("is {} but its group's largest source scale byte {} gives {}", member.stored, emax, expected));
    }
  }
}

// An Engram MXFP4 table: the quantizer's bytes, and its cosine against the FP8 source.
double verify_mxfp4_table(const Plan& plan, const Task& task, AuditReaders& readers, Audit& audit) {
  VerifyCounts counts;
  for_each_row_batch(plan, task, readers, [&](uint64_t first, uint64_t rows, const auto& codes, const auto& scales,
                                     const auto& packed, const auto& out_scales) {
    const Fp8RowChunk chunk{task.inputs[0], first, rows, task.cols, codes, scales, task.inputs[1]};
    verify_mxfp4_rows(chunk, packed.data(), out_scales.data(), task.outputs[0].name, counts);
  });
  audit.check("engram mxfp4 bytes", counts.elements_out_of_bound == 0, task.outputs[0].name,
              fmt::format("{} rows differ; first: {}", counts.elements_out_of_bound, counts.first_problem));
  const double x = counts.sums.reference_sq.to_double(), y = counts.sums.output_sq.to_double();
  const double e = counts.sums.error_sq.to_double();
  const double cosine = x > 0 && y > 0 ? (x + y - e) / 2.0 / std::sqrt(x * y) : (x == y ? 1.0 : 0.0);
  audit.check("engram cosine", cosine >= plan.job.engram_min_cosine, task.outputs[0].name,
              fmt::format("cosine {:.6f} below the job's threshold {}", cosine, plan.job.engram_min_cosine));
  return cosine;
}

// An INT8 or BF16 linear: every row against its decoded source. Returns the task's figures
// by the report's rule (verify_int8_rows, verify_bf16_rows).
ChunkStats verify_linear(const Plan& plan, const Task& task, AuditReaders& readers, Audit& audit) {
  ChunkStats figures;
  const io::Reader& source = readers.source_of(plan, task);
  const io::Reader& output = readers.output_of(plan, task);
  const bool fp4 = task.codec == CodecKind::fp4_to_int8 || task.codec == CodecKind::fp4_to_bf16;
  std::vector<uint8_t> codes, scales, out, out_scales;
  const uint64_t step = kVerifyRows / 32 * 32; // whole FP8 scale blocks
  for (size_t linear = 0; linear < linear_count(task); ++linear) {
    const LinearSlots slots = linear_slots(task, linear);
    const bool int8 = slots.output_scale.has_value(); // else BF16
    const std::string& weight = task.inputs[slots.weight];
    const std::string& output_weight = task.outputs[slots.output].name;
    VerifyCounts counts;
    for (uint64_t first = 0; first < task.rows; first += step) {
      const uint64_t rows = std::min(step, task.rows - first);
      read_tensor_rows(source, weight, first, rows, codes);
      read_tensor_rows(source, task.inputs[slots.scale], task.input_first_row(slots.scale, first),
                       task.input_row_count(slots.scale, first, rows), scales);
      read_tensor_rows(output, output_weight, first, rows, out);
      const LinearRows linear_rows{fp4 ? LinearSource::fp4_row32 : LinearSource::fp8_block32, weight,
                                   task.inputs[slots.scale], first, rows, task.cols, codes, scales};
      if (int8) {
        read_tensor_rows(output, task.outputs[*slots.output_scale].name, first, rows, out_scales);
        verify_int8_rows(linear_rows, reinterpret_cast<const int8_t*>(out.data()),
                         reinterpret_cast<const float*>(out_scales.data()), output_weight, counts);
      } else {
        verify_bf16_rows(linear_rows, reinterpret_cast<const uint16_t*>(out.data()), output_weight, counts);
      }
    }
    audit.check(int8 ? "INT8 rows within half a step, max |q| 127" : "BF16 rows rounded from the source",
                counts.elements_out_of_bound == 0, output_weight,
                fmt::format("{} problems; first: {}", counts.elements_out_of_bound, counts.first_problem));
    figures.merge(counts.sums);
  }
  return figures;
}

// The W8A8 report's figures made again by the recipe from verify's own row figures: each
// kind's tensors, rows, all-zero rows, sampled rows and rel RMS error, the all-zero total
// and the dtype totals. Equal, not close: the row terms are the same numbers, and their
// exact sums (ExactSum) do not depend on the order they were added in.
void check_linear_report(const Plan& plan, const nlohmann::ordered_json& report, std::span<const TaskTotals> totals,
                         Audit& audit) {
  const nlohmann::ordered_json expected = plan.recipe->report(plan.recipe_plan, plan.params, totals);
  for (const char* key : {"all_zero_rows", "dtype_totals_changed_shards"}) {
    const bool ok = report.contains(key) && report[key] == expected[key];
    audit.check("W8A8 report figures", ok, key,
                fmt::format("report {}, recomputed {}", report.contains(key) ? report[key].dump() : "absent", expected[key].dump()));
  }
  for (const char* section : {"int8", "bf16"}) {
    const auto& reported = report.contains(section) ? report[section] : nlohmann::ordered_json::array();
    const auto& kinds = expected[section];
    audit.check("W8A8 report figures", reported.size() == kinds.size(), fmt::format("{} kinds", section),
                fmt::format("report {}, recomputed {}", reported.size(), kinds.size()));
    for (size_t k = 0; k < std::min(reported.size(), kinds.size()); ++k) {
      for (const auto& [field, value] : kinds[k].items()) {
        // As written to the file: a figure that is NaN (null there, from sums past ExactSum's
        // range) equals its recomputed NaN, which == never does.
        const bool ok = reported[k].contains(field) && reported[k][field].dump() == value.dump();
        audit.check("W8A8 report figures", ok, fmt::format("{} {} {}", section, kinds[k].value("kind", ""), field),
                    fmt::format("report {}, recomputed {}", reported[k].contains(field) ? reported[k][field].dump() : "absent",
                                value.dump()));
      }
    }
  }
}

// Every output tensor of the task is in its shard with the planned dtype and shape (else
// its rows would be read as something they are not).
bool outputs_as_planned(const Plan& plan, const Task& task, AuditReaders& readers, Audit& audit) {
  if (!std::filesystem::exists(plan.dst / plan.shards[task.shard].file)) return false; // counted by verify_index
  const io::Reader& output = readers.output_of(plan, task);
  bool all = true;
  for (const auto& spec : task.outputs) {
    const io::TensorInfo* info = output.find(spec.name);
    const bool ok = info && info->dtype == spec.dtype && info->shape == spec.shape;
    audit.check("task outputs as planned", ok, spec.name,
                info ? fmt::format("is {} {}, planned {} {}", io::dtype_name(info->dtype), shape_text(info->shape),
                                   io::dtype_name(spec.dtype), shape_text(spec.shape))
                     : "missing in " + plan.shards[task.shard].file);
    all = all && ok;
  }
  return all;
}

void verify_tasks(const Plan& plan, const nlohmann::ordered_json& report, AuditReaders& readers, Audit& audit) {
  const bool round_to_nearest = plan.job.method == "rtn" || plan.job.method == "mse";
  const auto& report_tables = report.contains("tables") ? report["tables"] : nlohmann::ordered_json::array();
  std::vector<std::string> cosines;
  std::map<size_t, std::vector<ExpertGlobalScale>> expert_groups;
  std::vector<TaskTotals> linear_totals(plan.tasks().size());
  bool linears = false;
  size_t table = 0;
  for (size_t t = 0; t < plan.tasks().size(); ++t) {
    const Task& task = plan.tasks()[t];
    if (!outputs_as_planned(plan, task, readers, audit)) continue; // its rows cannot be read as planned
    switch (task.codec) {
      case CodecKind::engram_nvfp4: {
        const auto report_table = table < report_tables.size() ? report_tables[table] : nlohmann::ordered_json::object();
        ++table;
        verify_engram_nvfp4(plan, task, report_table, round_to_nearest, readers, audit);
        break;
      }
      case CodecKind::engram_mxfp4:
        cosines.push_back(fmt::format("layer {} {:.4f}", task.layer, verify_mxfp4_table(plan, task, readers, audit)));
        break;
      case CodecKind::transcode_mxfp4_nvfp4:
        expert_groups[task.group].push_back(verify_transcode(plan, task, readers, audit));
        break;
      case CodecKind::fp8_to_int8:
      case CodecKind::fp4_to_int8:
      case CodecKind::fp8_to_bf16:
      case CodecKind::fp4_to_bf16:
        linear_totals[t].stats = verify_linear(plan, task, readers, audit);
        linears = true;
        break;
    }
  }
  if (linears) check_linear_report(plan, report, linear_totals, audit);
  check_expert_global_scales(expert_groups, audit);
  if (!cosines.empty()) audit.note("engram cosine", fmt::format("{} (min {})", fmt::join(cosines, ", "), plan.job.engram_min_cosine));
}

// Every output tensor's name, dtype and shape against the reference checkpoint's.
void verify_reference_layout(const Plan& plan, const Job& job, AuditReaders& readers, Audit& audit) {
  const CheckpointView reference = read_checkpoint_view(job.input_scales_from);
  std::set<std::string> output_names;
  const io::ShardIndex index = io::read_index(plan.dst / io::kIndexFileName);
  for (const auto& [entry_name, file] : index.entries()) {
    const std::string name(entry_name);
    output_names.insert(name);
    const auto* tensor = readers.output.get(file).find(name);
    const SourceTensor* ref = reference.find(name);
    audit.check("layout equal to the reference", tensor && ref && ref->spec.dtype == tensor->dtype && ref->spec.shape == tensor->shape,
                name, ref ? "dtype or shape differs from the reference's" : "not in the reference");
  }
  for (const auto& t : reference.tensors) {
    audit.check("layout equal to the reference", output_names.count(t.spec.name) == 1, t.spec.name, "missing in the output");
  }
}

} // namespace

int cmd_verify(const VerifyArgs& args) {
  Job job = verify_job(args);
  const nlohmann::ordered_json report = io::read_json_object(std::filesystem::path(args.dst) / report_file_of(job.recipe));
  const Plan plan = make_plan(job, 1);
  Audit audit;
  check_made_from_source(plan, report, audit);
  if (!args.job_file.empty()) check_made_by_job(job, report, audit);
  AuditReaders readers{io::ShardReaders(plan.src), io::ShardReaders(plan.dst)};
  verify_index(plan, readers, audit);
  const std::set<size_t> engram_shards = shards_with_engram_tables(plan);
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    const ShardPlan& shard = plan.shards[s];
    const auto out = plan.dst / shard.file;
    if (!std::filesystem::exists(out)) continue; // counted by verify_index
    if (!shard.changed) audit.check(shard_category(engram_shards, s), same_file_bytes(plan.src / shard.file, out), shard.file, "differs from the source");
    else verify_shard_entries(shard, readers, audit);
  }
  verify_tasks(plan, report, readers, audit);
  for (const auto& file : plan.other_files) {
    const auto out = plan.dst / file;
    audit.check("other files identical", std::filesystem::exists(out) && same_file_bytes(plan.src / file, out), file, "missing or different");
  }
  audit.check("config files as planned", io::read_config(plan.dst / kConfigFile) == plan.recipe_plan.config, kConfigFile, "differs from the plan");
  for (const auto& [file, json] : plan.recipe_plan.side_files) {
    audit.check("config files as planned", std::filesystem::exists(plan.dst / file) && io::read_json_object(plan.dst / file) == json, file,
                "missing or differs from the plan");
  }
  if (!job.input_scales_from.empty()) verify_reference_layout(plan, job, readers, audit);
  const CheckpointView output = read_checkpoint_view(readers.output);
  plan.recipe->audit(plan.recipe_plan, plan.params, plan.source, output,
                     [&](const std::string& category, bool ok, const std::string& what, const std::string& detail) {
                       audit.check(category, ok, what, detail);
                     });
  audit.print_table();
  print_dtype_totals(output);
  return audit.failed() ? kExitError : kExitOk;
}

} // namespace shardq
