#include "pipeline/job.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <toml++/toml.h>

#include "pipeline/pipeline_error.h"
#include "stages/quantize.h"
#include "stages/recipes/recipe.h"

namespace shardq {
namespace {

const std::vector<std::string> kKnownKeys = {
    "job.recipe", "job.src", "job.dst",
    "quant.method", "quant.mse_candidates", "quant.mse_alpha_min", "quant.gptq_damp", "quant.gptq_block",
    "quant.input_scales_from", "quant.keep_mtp", "quant.ignore", "quant.engram_min_cosine",
    "run.rows_per_chunk", "run.threads", "run.backend", "run.write_mode", "run.checkpoint"};

bool is_recipe(const std::string& name) {
  const std::vector<std::string> recipes = recipe_names();
  return std::find(recipes.begin(), recipes.end(), name) != recipes.end();
}

bool is_known_key(const std::string& section_key) {
  return std::find(kKnownKeys.begin(), kKnownKeys.end(), section_key) != kKnownKeys.end();
}

void check_known_keys(const toml::table& root, const std::string& file) {
  for (const auto& [section, node] : root) {
    const auto* table = node.as_table();
    if (!table) throw PipelineError(fmt::format("{}: '{}' must be a [section]", file, section.str()));
    for (const auto& [key, value] : *table) {
      const std::string full = fmt::format("{}.{}", section.str(), key.str());
      if (!is_known_key(full)) throw PipelineError(fmt::format("{}: unknown key '{}'", file, full));
    }
  }
}

// A [quant] key the job's recipe does not read would do nothing: refused, with the keys it reads.
void check_recipe_keys(const toml::table& root, const std::string& recipe, const std::string& file,
                       const std::vector<std::string>& overrides) {
  const auto* quant = root["quant"].as_table();
  if (!quant || !is_recipe(recipe)) return; // an unknown recipe is validate's to name
  const std::vector<std::string_view> read = make_recipe(recipe)->quant_keys();
  for (const auto& [key, value] : *quant) {
    if (std::find(read.begin(), read.end(), key.str()) != read.end()) continue;
    const std::string assigned = fmt::format("quant.{}=", key.str());
    const bool from_set = std::any_of(overrides.begin(), overrides.end(),
                                      [&](const std::string& o) { return o.starts_with(assigned); });
    throw PipelineError(fmt::format("{}: quant.{} does nothing for recipe {} (it reads quant.{}): remove it",
                                    from_set ? std::string("--set") : file, key.str(), recipe, fmt::join(read, ", quant.")));
  }
}

} // namespace

bool is_override(std::string_view assignment) {
  const auto eq = assignment.find('=');
  const auto dot = assignment.find('.');
  return eq != std::string_view::npos && dot != std::string_view::npos && dot > 0 && dot + 1 < eq;
}

namespace {

// "section.key=value": the value is parsed as a TOML value, or taken as a string.
void apply_override(toml::table& root, const std::string& assignment) {
  if (!is_override(assignment)) throw PipelineError(fmt::format("--set '{}': expected section.key=value", assignment));
  const auto eq = assignment.find('=');
  const auto dot = assignment.find('.');
  const std::string section = assignment.substr(0, dot);
  const std::string key = assignment.substr(dot + 1, eq - dot - 1);
  const std::string text = assignment.substr(eq + 1);
  if (!is_known_key(section + "." + key)) {
    throw PipelineError(fmt::format("--set '{}': unknown key '{}.{}'", assignment, section, key));
  }
  if (!root.contains(section)) root.insert(section, toml::table{});
  auto* table_node = root[section].as_table();
  if (!table_node) {
    throw PipelineError(fmt::format("--set '{}': '{}' in the job file is a value, not a [section]", assignment, section));
  }
  auto& table = *table_node;
  try {
    auto parsed = toml::parse("v = " + text);
    table.insert_or_assign(key, *parsed.get("v"));
  } catch (const toml::parse_error&) {
    table.insert_or_assign(key, text);
  }
}

// What a key of type T must hold, for the message (a --set value that does not parse as
// TOML is read as a string: `--set job.dst=true` is a boolean, a path needs quotes).
template <typename T> constexpr const char* expected_value() {
  if constexpr (std::is_same_v<T, std::string>) return "a string (in quotes, also in --set 'section.key=\"...\"')";
  else if constexpr (std::is_same_v<T, bool>) return "true or false";
  else if constexpr (std::is_same_v<T, double>) return "a number";
  else return "a whole number within 64 bits";
}

template <typename T>
void read_key(const toml::table& root, const char* section, const char* key, T& out, const std::string& file) {
  const auto node = root[section][key];
  if (!node) return;
  if constexpr (std::is_same_v<T, double>) {
    if (auto v = node.template value<double>()) { out = *v; return; }
  } else if (auto v = node.template value<T>()) {
    out = *v;
    return;
  }
  std::ostringstream given;
  given << node;
  throw PipelineError(fmt::format("{}: key '{}.{}' = {} (from the file or a --set) is not {}", file, section, key,
                                  given.str(), expected_value<T>()));
}

void read_string_list(const toml::table& root, const char* section, const char* key, std::vector<std::string>& out,
                      const std::string& file) {
  const auto node = root[section][key];
  if (!node) return;
  const auto* array = node.as_array();
  if (!array) throw PipelineError(fmt::format("{}: key '{}.{}' must be a list of strings", file, section, key));
  out.clear();
  for (const auto& item : *array) {
    auto text = item.value<std::string>();
    if (!text) throw PipelineError(fmt::format("{}: key '{}.{}' must be a list of strings", file, section, key));
    out.push_back(*text);
  }
}

void validate(const Job& job) {
  auto fail = [&](const std::string& what) { throw PipelineError(fmt::format("{}: {}", job.source_file, what)); };
  if (!is_recipe(job.recipe)) {
    fail(fmt::format("job.recipe must be one of {}, not '{}'", fmt::join(recipe_names(), ", "), job.recipe));
  }
  if (std::find(kQuantMethodNames.begin(), kQuantMethodNames.end(), job.method) == kQuantMethodNames.end()) {
    fail(fmt::format("quant.method must be one of {}, not '{}'", fmt::join(kQuantMethodNames, ", "), job.method));
  }
  if (job.src.empty()) fail("job.src is empty (set it or pass --src)");
  if (job.dst.empty()) fail("job.dst is empty (set it or pass --dst)");
  if (job.mse_candidates < 2 || job.mse_candidates > 16) fail("quant.mse_candidates must be in 2..16");
  if (!(job.mse_alpha_min > 0.0 && job.mse_alpha_min < 1.0)) fail("quant.mse_alpha_min must be in (0, 1)");
  if (!(job.gptq_damp >= 0.0)) fail("quant.gptq_damp must be >= 0");
  if (!(job.engram_min_cosine >= -1.0 && job.engram_min_cosine <= 1.0)) fail("quant.engram_min_cosine must be in [-1, 1]");
  if (job.gptq_block < 16 || job.gptq_block % 16 != 0 || 256 % job.gptq_block != 0) fail("quant.gptq_block must be a multiple of 16 that divides 256");
  if (job.rows_per_chunk < 1) fail("run.rows_per_chunk must be >= 1");
  if (job.threads < 0 || job.threads > 1024) fail("run.threads must be in 1..1024 (0 or unset: the cores this rank may run on)");
  if (job.backend != "auto" && job.backend != "cpu" && job.backend != "cuda") fail("run.backend must be auto, cpu or cuda");
  // No silent fallback: the pipeline's quantize stage runs on the CPU in this version.
  if (job.backend == "cuda") fail("run.backend = \"cuda\" is not available in this version (use auto or cpu)");
  if (job.write_mode != "owner" && job.write_mode != "direct") fail("run.write_mode must be owner or direct");
}

} // namespace

int Job::compute_threads() const {
  if (threads > 0) return int(threads);
  cpu_set_t cores;
  CPU_ZERO(&cores);
  if (sched_getaffinity(0, sizeof(cores), &cores) != 0) return 1;
  return std::max(1, CPU_COUNT(&cores));
}

std::string Job::checkpoint_path() const {
  return checkpoint.empty() ? (std::filesystem::path(dst) / ".shardq" / "checkpoint.h5").string() : checkpoint;
}

std::string Job::input_scales_folder() const {
  if (input_scales_from.empty()) return "";
  return std::filesystem::weakly_canonical(std::filesystem::absolute(input_scales_from)).string();
}

std::string Job::canonical() const {
  // Only what the job's recipe reads: w8a8-int8 has no method, and naming the default one
  // in its checkpoint (`status`) would say it ran one.
  const std::vector<std::string_view> read = make_recipe(recipe)->quant_keys();
  const auto reads = [&](std::string_view key) { return std::ranges::find(read, key) != read.end(); };
  std::string text = "recipe=" + recipe;
  if (reads("method")) text += ";method=" + method;
  // rows_per_chunk is part of it: a checkpoint's chunk records only fit its own chunking.
  text += fmt::format(";rows_per_chunk={}", rows_per_chunk);
  if (reads("mse_candidates") && uses_mse()) text += fmt::format(";mse_candidates={};mse_alpha_min={:.17g}", mse_candidates, mse_alpha_min);
  if (reads("gptq_damp") && uses_gptq()) text += fmt::format(";gptq_damp={:.17g};gptq_block={}", gptq_damp, gptq_block);
  // The recipe keys: a resume with another value must not be accepted. The reference's
  // headers and imported values enter the fingerprint through the recipe.
  if (reads("keep_mtp")) text += fmt::format(";keep_mtp={}", keep_mtp);
  if (reads("ignore")) text += fmt::format(";ignore=[{}]", fmt::join(ignore, ","));
  if (reads("input_scales_from")) text += ";input_scales_from=" + input_scales_folder();
  return text;
}

Job load_job(const std::string& path, const std::vector<std::string>& overrides) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw PipelineError(fmt::format("{}: not a valid TOML job file: {} (line {})", path, e.description(),
                                    e.source().begin.line));
  }
  for (const auto& assignment : overrides) apply_override(root, assignment);
  check_known_keys(root, path);
  Job job;
  job.source_file = path;
  read_key(root, "job", "recipe", job.recipe, path);
  read_key(root, "job", "src", job.src, path);
  read_key(root, "job", "dst", job.dst, path);
  read_key(root, "quant", "method", job.method, path);
  read_key(root, "quant", "mse_candidates", job.mse_candidates, path);
  read_key(root, "quant", "mse_alpha_min", job.mse_alpha_min, path);
  read_key(root, "quant", "gptq_damp", job.gptq_damp, path);
  read_key(root, "quant", "gptq_block", job.gptq_block, path);
  read_key(root, "quant", "input_scales_from", job.input_scales_from, path);
  read_key(root, "quant", "keep_mtp", job.keep_mtp, path);
  read_key(root, "quant", "engram_min_cosine", job.engram_min_cosine, path);
  read_string_list(root, "quant", "ignore", job.ignore, path);
  read_key(root, "run", "rows_per_chunk", job.rows_per_chunk, path);
  read_key(root, "run", "threads", job.threads, path);
  read_key(root, "run", "backend", job.backend, path);
  read_key(root, "run", "write_mode", job.write_mode, path);
  read_key(root, "run", "checkpoint", job.checkpoint, path);
  check_recipe_keys(root, job.recipe, path, overrides);
  validate(job);
  return job;
}

} // namespace shardq
