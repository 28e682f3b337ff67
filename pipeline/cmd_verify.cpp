// `shardq verify`: an audit of a finished output against its source, independent of the
// run that made it: unchanged tensors and files byte-identical, tables decoding within
// the NVFP4 bound, global scales recomputed, report figures recomputed, index and config
// as planned. Exit 0 only if every check passes.
#include <fmt/format.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "kernels/formats.h"
#include "pipeline/commands.h"
#include "pipeline/io/config.h"
#include "pipeline/pipeline_error.h"
#include "pipeline/plan.h"
#include "stages/amax.h"
#include "stages/verify.h"

namespace shardq {
namespace {

constexpr uint64_t kPieceBytes = 64ull << 20;
constexpr uint64_t kVerifyRows = 65536;

struct Audit {
  int failed = 0;
  void check(bool ok, const std::string& what, const std::string& detail) {
    std::printf("%s  %s%s%s\n", ok ? "PASS" : "FAIL", what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
    failed += ok ? 0 : 1;
  }
};

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

void verify_table(const Plan& plan, const TablePlan& table, const nlohmann::ordered_json& report_table,
                  bool round_to_nearest, Audit& audit) {
  const io::Reader source(plan.src / plan.shards[table.shard].file);
  const io::Reader output(plan.dst / plan.shards[table.shard].file);
  const auto& weight = source.tensor(table.source_weight);
  const auto& scale = source.tensor(table.source_scale);
  float global_scale = 0.0f;
  std::vector<uint8_t> scalar(4);
  output.read_rows(output.tensor(table.out_global_scale), 0, 1, scalar);
  std::memcpy(&global_scale, scalar.data(), 4);

  float amax = 0.0f;
  VerifyCounts counts;
  std::vector<uint8_t> codes, scales, packed, out_scales;
  for (uint64_t first = 0; first < table.rows; first += kVerifyRows) {
    const uint64_t rows = std::min(kVerifyRows, table.rows - first);
    codes.resize(rows * weight.row_bytes());
    scales.resize(rows * scale.row_bytes());
    packed.resize(rows * uint64_t(table.cols / 2));
    out_scales.resize(rows * uint64_t(table.cols / 16));
    source.read_rows(weight, first, rows, codes);
    source.read_rows(scale, first, rows, scales);
    output.read_rows(output.tensor(table.out_weight), first, rows, packed);
    output.read_rows(output.tensor(table.out_scale), first, rows, out_scales);
    const Fp8RowChunk chunk{table.source_weight, first, rows, table.cols, codes, scales, table.source_scale};
    amax = std::max(amax, amax_fp8_chunk(chunk));
    verify_nvfp4_rows(chunk, packed.data(), out_scales.data(), global_scale, round_to_nearest, table.out_weight, counts);
  }
  const float expected_global = Nvfp4::global_scale(amax);
  audit.check(global_scale == expected_global, table.out_global_scale,
              fmt::format("{:.9g}, amax {:.9g} / 2688 = {:.9g}", global_scale, amax, expected_global));
  audit.check(counts.nan_scales == 0 && counts.elements_out_of_bound == 0, table.out_weight + " values",
              counts.first_problem.empty() ? fmt::format("{} rows{}", counts.rows, round_to_nearest ? " within the NVFP4 bound" : " decode")
                                           : counts.first_problem);
  const double ref = counts.sums.reference_sq.to_double();
  const double rel_rms = ref > 0 ? std::sqrt(counts.sums.error_sq.to_double() / ref) : 0.0;
  const double reported = report_table.value("rel_rms_error", -1.0);
  audit.check(std::fabs(rel_rms - reported) <= 1e-9 * std::max(1.0, std::fabs(rel_rms)), table.out_weight + " rel_rms_error",
              fmt::format("recomputed {:.12g}, report {:.12g}", rel_rms, reported));
}

} // namespace

int cmd_verify(const VerifyArgs& args) {
  Job job;
  job.src = args.src;
  job.dst = args.dst;
  const auto report_path = std::filesystem::path(args.dst) / kReportFile;
  if (!std::filesystem::exists(report_path)) {
    throw PipelineError(fmt::format("{}: no report: not a finished shardq output", report_path.string()));
  }
  const nlohmann::ordered_json report = io::read_json_object(report_path);
  job.method = args.job_file.empty() ? report.value("method", std::string("rtn")) : load_job(args.job_file, {}).method;
  const Plan plan = make_plan(job, 1);
  Audit audit;
  for (const auto& shard : plan.shards) {
    const auto out = plan.dst / shard.file;
    if (!std::filesystem::exists(out)) {
      audit.check(false, shard.file, "missing in dst");
      continue;
    }
    if (!shard.changed) {
      audit.check(same_file_bytes(plan.src / shard.file, out), shard.file, "unchanged shard identical");
      continue;
    }
    const io::Reader source(plan.src / shard.file), output(out);
    for (const auto& copy : shard.copies) {
      const auto& a = source.tensor(copy.name);
      const auto& b = output.tensor(copy.name);
      audit.check(a.end - a.begin == b.end - b.begin && hash_range(source, a.begin, a.end) == hash_range(output, b.begin, b.end),
                  copy.name, "byte-identical");
    }
  }
  const bool round_to_nearest = job.method == "rtn" || job.method == "mse";
  for (size_t t = 0; t < plan.tables.size(); ++t) {
    const auto& tables = report["tables"];
    verify_table(plan, plan.tables[t], t < tables.size() ? tables[t] : nlohmann::ordered_json::object(), round_to_nearest, audit);
  }
  for (const auto& file : plan.other_files) {
    const auto out = plan.dst / file;
    audit.check(std::filesystem::exists(out) && same_file_bytes(plan.src / file, out), file, "identical");
  }
  audit.check(io::read_json_object(plan.dst / kIndexFile) == output_index(plan), kIndexFile, "as planned");
  audit.check(io::read_config(plan.dst / kConfigFile) == output_config(plan), kConfigFile, "as planned");
  std::printf("%s: %d check(s) failed\n", audit.failed ? "FAILED" : "OK", audit.failed);
  return audit.failed ? kExitError : kExitOk;
}

} // namespace shardq
