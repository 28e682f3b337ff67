// `shardq study`: every method on the same sampled Engram rows, side by side (seed 000's
// method study): rel RMS error, weighted error through W_c, how often the MSE search
// shrinks the scale, speed, per hash column; study.json and study.png (gnuplot).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>

#include "kernels/formats.h"
#include "kernels/gptq.h"
#include "pipeline/commands.h"
#include "pipeline/io/config.h"
#include "pipeline/pipeline_error.h"
#include "pipeline/plan.h"
#include "pipeline/splitmix64.h"
#include "stages/engram_layout.h"
#include "stages/amax.h"
#include "stages/factors.h"
#include "stages/quantize.h"

namespace shardq {
namespace {

constexpr uint64_t kAmaxRows = 65536;

std::vector<std::string> split_methods(const std::string& text) {
  std::vector<std::string> methods;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) methods.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return methods;
}

} // namespace

std::string study_methods_error(const std::string& methods) {
  const std::vector<std::string> names = split_methods(methods);
  const std::string known = fmt::format("{}", fmt::join(kQuantMethodNames, ", "));
  if (names.empty()) return "no method given (" + known + ")";
  std::set<std::string> seen;
  for (const auto& name : names) {
    if (std::find(kQuantMethodNames.begin(), kQuantMethodNames.end(), name) == kQuantMethodNames.end()) {
      return fmt::format("'{}' is not a method ({})", name, known);
    }
    if (!seen.insert(name).second) return fmt::format("'{}' is given twice", name);
  }
  return {};
}

namespace {

// Sampled rows of one hash column: distinct, sorted, seeded.
std::vector<uint64_t> sample_column(uint64_t offset, uint64_t prime, uint64_t count, uint64_t seed, int column) {
  std::set<uint64_t> rows;
  count = std::min(count, prime);
  for (uint64_t i = 0; rows.size() < count; ++i) {
    rows.insert(offset + splitmix64(seed ^ splitmix64(uint64_t(column) << 32 | i)) % prime);
  }
  return {rows.begin(), rows.end()};
}

struct MethodResult {
  std::string name;
  ChunkStats total;
  std::vector<ChunkStats> per_column;
  double seconds = 0;
};

double ratio(const ExactSum& a, const ExactSum& b) { return b.to_double() > 0 ? a.to_double() / b.to_double() : 0.0; }

double below_amax_share(const MethodResult& m, int candidates) {
  if (m.total.blocks == 0 || candidates < 2) return 0.0;
  return 1.0 - double(m.total.candidate_wins[size_t(candidates - 1)]) / double(m.total.blocks);
}

std::string gnuplot_quoted(const std::string& text) {
  std::string quoted;
  for (char c : text) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return quoted;
}

// Runs a program found on PATH with these arguments (no shell) and returns its exit
// status, or -1 when it could not be started or did not exit normally.
int run_program(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void write_plot(const std::filesystem::path& out, const std::vector<MethodResult>& results, int columns) {
  const auto data = out / "study.dat";
  std::ofstream dat(data);
  dat << "# column";
  for (const auto& m : results) dat << ' ' << m.name;
  dat << '\n';
  for (int c = 0; c < columns; ++c) {
    dat << c;
    for (const auto& m : results) dat << ' ' << ratio(m.per_column[size_t(c)].weighted_error_sq, m.per_column[size_t(c)].weighted_reference_sq);
    dat << '\n';
  }
  dat.close();
  // The script goes to a file and gnuplot runs it with no shell between: a path is data,
  // quoted for gnuplot (in its single-quoted strings a quote is written twice).
  std::string plot = fmt::format(
      "set terminal pngcairo size 1000,560\nset output '{}'\nset title 'Weighted error ||W_c e||^2 / ||W_c x||^2 per hash column'\n"
      "set xlabel 'hash column'\nset ylabel 'weighted relative error'\nset key outside\nset grid\nplot ",
      gnuplot_quoted((out / "study.png").string()));
  for (size_t i = 0; i < results.size(); ++i) {
    plot += fmt::format("{}'{}' using 1:{} with linespoints title '{}'", i ? ", " : "", gnuplot_quoted(data.string()), i + 2,
                        results[i].name);
  }
  const auto script = out / "study.gp";
  std::ofstream(script) << plot << '\n';
  if (run_program({"gnuplot", script.string()}) != 0 || !std::filesystem::exists(out / "study.png")) {
    throw PipelineError(fmt::format("{}: gnuplot {} could not draw study.png (is gnuplot installed? scripts/deps.sh "
                                    "installs it)", (out / "study.png").string(), script.string()));
  }
}

} // namespace

int cmd_study(const StudyArgs& args) {
  Job job;
  job.src = args.src;
  job.dst = args.out;
  const Plan plan = make_plan(job, 1);
  const auto table_it = std::find_if(plan.tasks().begin(), plan.tasks().end(), [&](const Task& t) { return t.layer == args.layer; });
  if (table_it == plan.tasks().end()) throw PipelineError(fmt::format("{}: layer {} has no Engram table", args.src, args.layer));
  const Task& table = *table_it;
  const EngramLayout& layout = *plan.recipe_plan.codec_params.engram_layout;
  const io::Reader reader(plan.src / plan.shards[table.shard].file);
  const auto& weight = reader.tensor(table.inputs[0]);
  const auto& scale = reader.tensor(table.inputs[1]);
  const int columns = layout.columns(), cols = table.cols;
  if (args.sample < uint64_t(columns)) {
    throw PipelineError(fmt::format("--sample {}: layer {} has {} hash columns, and each needs a sampled row", args.sample,
                                    table.layer, columns));
  }

  // The table's global scale comes from every row, as in a run.
  float amax = 0.0f;
  std::vector<uint8_t> codes, scales;
  for (uint64_t first = 0; first < table.rows; first += kAmaxRows) {
    const uint64_t rows = std::min(kAmaxRows, table.rows - first);
    codes.resize(rows * weight.row_bytes());
    scales.resize(rows * scale.row_bytes());
    reader.read_rows(weight, first, rows, codes);
    reader.read_rows(scale, first, rows, scales);
    amax = std::max(amax, amax_fp8_chunk({table.inputs[0], first, rows, cols, codes, scales, table.inputs[1]}));
  }
  const float global_scale = Nvfp4::global_scale(amax);

  const std::vector<float> wkv = read_factor_source(plan, plan.factor_sets().at(size_t(table.factor_set)));
  const int in_cols = columns * cols, out_rows = int(wkv.size() / size_t(in_cols));
  LayerFactors factors;
  factors.layer = table.layer;
  std::vector<double> anisotropy;
  for (int c = 0; c < columns; ++c) {
    HashColumnFactor factor = compute_column_factor(wkv.data(), out_rows, in_cols, c, job.gptq_damp, table.layer);
    anisotropy.push_back(gram_anisotropy(factor.gram));
    factors.upper.push_back(gptq_factor_fp32(factor.upper.data()));
    factors.roots.push_back(gram_root(factor.gram.data(), table.layer, c));
  }
  std::vector<double> sorted = anisotropy;
  std::sort(sorted.begin(), sorted.end());
  const double median_anisotropy = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                                     : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);

  // Sampled rows, dequantized once per column.
  const auto offsets = layout.offsets(table.layer);
  const auto primes = layout.primes(table.layer);
  std::vector<std::vector<float>> column_rows(static_cast<size_t>(columns));
  uint64_t sampled = 0;
  for (int c = 0; c < columns; ++c) {
    const uint64_t count = args.sample / uint64_t(columns) + (uint64_t(c) < args.sample % uint64_t(columns) ? 1 : 0);
    for (uint64_t row : sample_column(offsets[size_t(c)], primes[size_t(c)], count, args.seed, c)) {
      codes.resize(weight.row_bytes());
      scales.resize(scale.row_bytes());
      reader.read_rows(weight, row, 1, codes);
      reader.read_rows(scale, row, 1, scales);
      const Fp8RowChunk one{table.inputs[0], row, 1, cols, codes, scales, table.inputs[1]};
      check_fp8_chunk(one);
      column_rows[size_t(c)].resize(column_rows[size_t(c)].size() + size_t(cols));
      dequantize_chunk_row(one, 0, column_rows[size_t(c)].data() + column_rows[size_t(c)].size() - size_t(cols));
      ++sampled;
    }
  }

  std::vector<MethodResult> results;
  for (const auto& name : split_methods(args.methods)) {
    QuantizeParams params = make_quantize_params(parse_quant_method(name), int(job.mse_candidates), job.mse_alpha_min, global_scale);
    params.gptq_block = int(job.gptq_block);
    params.layer = table.layer;
    params.layout = &layout;
    params.factors = &factors;
    MethodResult result{name, {}, std::vector<ChunkStats>(size_t(columns)), 0.0};
    const auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < columns; ++c) {
      std::vector<float> rows = column_rows[size_t(c)];
      const uint64_t n = rows.size() / size_t(cols);
      std::vector<uint8_t> packed(n * size_t(cols / 2)), block_scales(n * size_t(cols / 16));
      quantize_column_rows(rows.data(), n, cols, c, params, packed.data(), block_scales.data(), result.per_column[size_t(c)]);
      result.total.merge(result.per_column[size_t(c)]);
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    results.push_back(std::move(result));
  }

  std::filesystem::create_directories(args.out);
  std::printf("layer %d: %llu sampled rows over %d hash columns, global scale %.9g (amax %.9g)\n", table.layer,
              (unsigned long long)sampled, columns, double(global_scale), double(amax));
  std::printf("Gram anisotropy (max/min diag of H_c): median %.3g, min %.3g, max %.3g\n", median_anisotropy, sorted.front(), sorted.back());
  std::printf("%-10s %14s %18s %20s %12s\n", "method", "rel_rms_error", "weighted_rel_error", "scale<amax/6 share", "rows/s");
  nlohmann::ordered_json report;
  report["layer"] = table.layer;
  report["sample"] = sampled;
  report["seed"] = args.seed;
  report["global_scale"] = global_scale;
  report["anisotropy"] = {{"median", median_anisotropy}, {"per_column", anisotropy}};
  nlohmann::ordered_json methods = nlohmann::ordered_json::object();
  for (const auto& m : results) {
    const int candidates = (m.name == "mse" || m.name == "gptq-mse") ? int(job.mse_candidates) : 1;
    const double rel_rms = std::sqrt(ratio(m.total.error_sq, m.total.reference_sq));
    const double weighted = ratio(m.total.weighted_error_sq, m.total.weighted_reference_sq);
    const double share = below_amax_share(m, candidates);
    const double rate = m.seconds > 0 ? double(sampled) / m.seconds : 0.0;
    std::printf("%-10s %14.6f %18.6g %20.4f %12.4g\n", m.name.c_str(), rel_rms, weighted, share, rate);
    nlohmann::ordered_json per_column = nlohmann::ordered_json::array();
    for (int c = 0; c < columns; ++c) {
      const auto& s = m.per_column[size_t(c)];
      per_column.push_back({{"column", c}, {"rel_rms_error", std::sqrt(ratio(s.error_sq, s.reference_sq))},
                            {"weighted_rel_error", ratio(s.weighted_error_sq, s.weighted_reference_sq)}});
    }
    methods[m.name] = {{"rel_rms_error", rel_rms}, {"weighted_rel_error", weighted}, {"scale_below_amax_share", share},
                       {"rows_per_second", rate}, {"per_column", per_column}};
  }
  report["methods"] = methods;
  io::write_json_file(std::filesystem::path(args.out) / "study.json", report);
  write_plot(args.out, results, columns);
  std::printf("wrote %s and %s\n", (std::filesystem::path(args.out) / "study.json").c_str(),
              (std::filesystem::path(args.out) / "study.png").c_str());
  return kExitOk;
}

} // namespace shardq
