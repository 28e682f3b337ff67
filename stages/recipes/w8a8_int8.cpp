#include "stages/recipes/w8a8_int8.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "stages/linear_rows.h"
#include "stages/recipes/engram_tables.h"
#include "stages/stage_error.h"

namespace shardq {
namespace {

using Json = nlohmann::ordered_json;

constexpr uint64_t kFp8Block = 32;

// The model's matrices that are not GEMM linears, kept as they are (the W8A8 card's "kept
// as is"): the embeddings ("embed" is also the Engram tables' component: lookups), the
// output heads, the router gates. Norms are told by name (linear_weight_module).
constexpr std::array<std::string_view, 4> kNotLinears = {"embed", "head", "markov_head", "ffn.gate"};

// A quantized linear of the source: <module>.weight with an E8M0 <module>.scale beside it.
struct SourceLinear {
  std::string_view module; // the weight's name without .weight (a view of the source view's name)
  const SourceTensor* weight = nullptr;
  const SourceTensor* scale = nullptr;
  bool fp4 = false;
  uint64_t out = 0, in = 0;
};

std::optional<SourceLinear> find_linear(const CheckpointView& source, const SourceTensor& tensor) {
  const std::string& name = tensor.spec.name;
  // By name, as the audit decides: an FP8 router gate or head with its scale is kept as it
  // is. Its shape is checked below, so that a quantized weight of another rank is refused.
  const auto module = linear_module_by_name(name);
  if (!module) return std::nullopt;
  SourceLinear linear;
  linear.module = *module;
  thread_local std::string scale_name; // no heap string for each of 100K names
  scale_name.assign(linear.module).append(".scale");
  linear.scale = source.find_near(scale_name, tensor);
  if (!linear.scale || linear.scale->spec.dtype != Dtype::F8_E8M0) return std::nullopt;
  linear.weight = &tensor;
  const auto file = [&] { return (source.dir / source.shard_files[tensor.shard]).string(); }; // for messages only
  if (linear.scale->shard != tensor.shard) {
    throw StageError(fmt::format("{}: linear '{}' has its scale '{}' in another shard", file(), name, linear.scale->spec.name));
  }
  const auto& shape = tensor.spec.shape;
  if (shape.size() != 2 || (tensor.spec.dtype != Dtype::F8_E4M3 && tensor.spec.dtype != Dtype::I8)) {
    throw StageError(fmt::format("{}: linear '{}' is {} {}; F8_E4M3 [out, in] or I8 [out, in/2] (FP4) was expected",
                                 file(), name, dtype_name(tensor.spec.dtype), shape_text(shape)));
  }
  linear.fp4 = tensor.spec.dtype == Dtype::I8;
  linear.out = shape[0];
  linear.in = linear.fp4 ? shape[1] * 2 : shape[1];
  if (linear.fp4 && linear.in % 32 != 0) {
    throw StageError(fmt::format("{}: FP4 linear '{}' has {} values per row, not a multiple of 32", file(), name, linear.in));
  }
  if (linear.fp4) {
    expect_tensor(source, *linear.scale, Dtype::F8_E8M0, {linear.out, linear.in / 32});
  } else {
    expect_tensor(source, *linear.scale, Dtype::F8_E8M0, {(linear.out + kFp8Block - 1) / kFp8Block, (linear.in + kFp8Block - 1) / kFp8Block});
  }
  return linear;
}

// A linear weight the recipe cannot quantize (no E8M0 scale beside it: natively BF16, or a
// scale of another format) is kept as it is only where the ignore list says so: elsewhere
// the output would hold an un-quantized linear that its config calls INT8.
// An ignored one must be BF16 already (natively BF16 modules, the vision tower's): any other
// dtype without an E8M0 scale (V3's F32 weight_scale_inv, F32 weights) is not dequantized
// here, and copied as it is it would fail the card's "ignore-matched linears BF16".
void refuse_unquantizable_linear(const CheckpointView& source, const SourceTensor& tensor, std::string_view module,
                                 const RecipeParams& params) {
  const bool ignored = ignore_matches(module, params.ignore);
  if (ignored && tensor.spec.dtype == Dtype::BF16) return;
  const std::string what = fmt::format("{}: linear '{}' is {} {} without an F8_E8M0 '.scale' beside it",
                                       (source.dir / source.shard_files[tensor.shard]).string(), tensor.spec.name,
                                       dtype_name(tensor.spec.dtype), shape_text(tensor.spec.shape));
  if (ignored) {
    throw StageError(what + ": an ignored linear becomes BF16, which w8a8-int8 makes from FP8 or FP4 linears with "
                            "E8M0 scales and keeps where it is BF16 already, and from nothing else");
  }
  throw StageError(what + ", so it cannot become INT8, and it matches no quant.ignore entry; add its module to "
                          "quant.ignore to keep it as it is (BF16)");
}

// Which ignore entries matched a linear of one shard; one that matches no linear in the
// whole source may be a typo (refuse_mistyped_ignore_entry). Entries already matched are
// not tried again.
struct IgnoreUse {
  std::vector<char> matched;
  void note(std::string_view module, const std::vector<std::string>& ignore) {
    for (size_t i = 0; i < ignore.size(); ++i) {
      if (!matched[i] && matches_components(module, ignore[i])) matched[i] = 1;
    }
  }
};

uint64_t aligned(uint64_t rows, uint64_t alignment) { return std::max(alignment, rows / alignment * alignment); }

// Small linears share a task (codec.h "LinearSlots"): those of at most kSmallLinearBytes
// of source each, of one kind, codec and shape in one shard, up to kTaskSourceBytes a
// task. The real model's linears are megabytes and stay one a task, their rows the work
// unit; a model of 50K tiny ones (the real-count fixture) gets hundreds of tasks, not 50K.
constexpr uint64_t kSmallLinearBytes = 64ull << 10;
constexpr uint64_t kTaskSourceBytes = 256ull << 10;

uint64_t source_bytes(const SourceLinear& linear) {
  return tensor_bytes(linear.weight->spec) + tensor_bytes(linear.scale->spec);
}

CodecKind linear_codec(const SourceLinear& linear, bool ignored) {
  return ignored ? (linear.fp4 ? CodecKind::fp4_to_bf16 : CodecKind::fp8_to_bf16)
                 : (linear.fp4 ? CodecKind::fp4_to_int8 : CodecKind::fp8_to_int8);
}

// A task for one linear; add_linear gives it more of the same shape.
Task linear_task(const SourceLinear& linear, CodecKind codec, const RecipeParams& params, size_t index) {
  Task task;
  task.name = std::string(linear.module);
  task.codec = codec;
  task.rows = linear.out;
  task.cols = int(linear.in);
  task.row_alignment = linear.fp4 ? 1 : kFp8Block; // an FP8 scale row covers 32 weight rows
  task.rows_per_chunk = aligned(params.rows_per_chunk, task.row_alignment);
  task.shard = linear.weight->shard;
  task.group = index;
  return task;
}

// Appends a linear's inputs and outputs in slot order, and returns its slots
// (linear_slots: whether it has an output scale is the codec's, decided there).
LinearSlots add_linear(Task& task, const SourceLinear& linear) {
  const LinearSlots slots = linear_slots(task, linear_count(task));
  task.inputs.push_back(linear.weight->spec.name);
  task.inputs.push_back(linear.scale->spec.name);
  if (slots.output_scale) {
    task.outputs.push_back({linear.weight->spec.name, Dtype::I8, {linear.out, linear.in}});
    task.outputs.push_back({std::string(linear.module) + ".weight_scale", Dtype::F32, {linear.out, 1}});
  } else {
    task.outputs.push_back({linear.weight->spec.name, Dtype::BF16, {linear.out, linear.in}});
  }
  if (!linear.fp4) {
    task.input_row_groups.push_back(1);
    task.input_row_groups.push_back(uint32_t(kFp8Block));
  }
  task.stacked_tensors = uint32_t(linear_count(task));
  return slots;
}

// What small linears must share to share a task.
struct ShareKey {
  std::string kind;
  CodecKind codec;
  uint64_t out, in;
  auto operator<=>(const ShareKey&) const = default;
};

Json quantization_config(const RecipeParams& params) {
  return {{"quant_method", "w8a8_int8"},   {"activation_scheme", "dynamic"}, {"is_dynamic", true},
          {"is_checkpoint_int8_serialized", true}, {"expert_dtype", "int8"}, {"ignore", params.ignore}};
}

} // namespace

std::string_view linear_module(const Task& task, size_t linear) {
  std::string_view weight = task.inputs[linear_slots(task, linear).weight];
  weight.remove_suffix(std::string_view(".weight").size()); // find_linear took only such names
  return weight;
}

bool matches_components(std::string_view module, std::string_view entry) {
  if (entry.empty()) return false;
  for (size_t at = module.find(entry); at != std::string_view::npos; at = module.find(entry, at + 1)) {
    const bool starts = at == 0 || module[at - 1] == '.';
    const size_t end = at + entry.size();
    const bool ends = entry.back() == '.' || end == module.size() || module[end] == '.';
    if (starts && ends) return true;
  }
  return false;
}

bool ignore_matches(std::string_view module, const std::vector<std::string>& ignore) {
  return std::ranges::any_of(ignore, [&](const std::string& entry) { return matches_components(module, entry); });
}

std::optional<std::string_view> linear_weight_module(const TensorSpec& spec) {
  if (spec.shape.size() != 2) return std::nullopt;
  return linear_module_by_name(spec.name);
}

std::optional<std::string_view> linear_module_by_name(std::string_view name) {
  constexpr std::string_view kSuffix = ".weight";
  if (!name.ends_with(kSuffix)) return std::nullopt;
  const std::string_view module = name.substr(0, name.size() - kSuffix.size());
  const std::string_view last = module.substr(module.rfind('.') + 1); // the whole name when it has no dot
  if (last.find("norm") != std::string_view::npos) return std::nullopt;
  for (const std::string_view entry : kNotLinears) {
    if (matches_components(module, entry)) return std::nullopt;
  }
  return module;
}

void module_kind(std::string_view module, std::string& kind) {
  kind.clear();
  size_t begin = 0;
  while (begin <= module.size()) {
    const size_t end = std::min(module.find('.', begin), module.size());
    const std::string_view part = module.substr(begin, end - begin);
    const bool number = !part.empty() && part.find_first_not_of("0123456789") == std::string_view::npos;
    if (!number && !(begin == 0 && part == "layers")) {
      if (!kind.empty()) kind += '.';
      kind += part;
    }
    begin = end + 1;
  }
}

namespace {

// The module family an ignore entry names: the first component of its kind (layer and
// expert numbers and a leading "layers" dropped: "attn." of "layers.61.attn.wq_a"), with
// the dot after it, matching whole components only.
std::string ignore_family(std::string_view entry) {
  std::string kind;
  module_kind(entry, kind);
  return kind.substr(0, kind.find('.')) + '.';
}

// An ignore entry that matches no linear while the source has linears of its family, and
// no other tensor either, names a module that is not there: a typo, or a layer the model
// lacks. Refused, listing the family's linear kinds (the entry meant one of them). Not
// refused: an entry that is its own family ("vision.", which would have matched were any
// of it there), or one naming tensors that are not linears ("ffn.gate", copied anyway).
// Only entries that matched no linear come here: a job without them pays no scan.
void refuse_mistyped_ignore_entry(const CheckpointView& source, const std::string& entry) {
  const std::string family = ignore_family(entry);
  if (family == entry) return;
  constexpr size_t kListed = 12;
  std::set<std::string> kinds;
  std::string kind;
  for (const SourceTensor& tensor : source.tensors) {
    if (matches_components(tensor.spec.name, entry)) return;
    const auto module = linear_module_by_name(tensor.spec.name);
    if (!module || !matches_components(*module, family)) continue;
    module_kind(*module, kind);
    kinds.insert(kind);
  }
  if (kinds.empty()) return;
  std::vector<std::string> listed(kinds.begin(), std::next(kinds.begin(), long(std::min(kinds.size(), kListed))));
  throw StageError(fmt::format("quant.ignore entry '{}' matches no tensor of the source, though it has {} linears "
                               "({}{}): a typo, or a layer the model does not have? It would leave the module it meant "
                               "INT8 (an entry for a module this model lacks altogether, such as 'vision.', only warns)",
                               entry, family.substr(0, family.size() - 1), fmt::join(listed, ", "),
                               kinds.size() > kListed ? ", ..." : ""));
}

} // namespace

RecipePlan W8a8Int8Recipe::plan(const RecipeInputs& inputs) const {
  const CheckpointView& source = inputs.source;
  RecipePlan plan;
  constexpr size_t kNoTask = SIZE_MAX;
  constexpr uint32_t kDropped = UINT32_MAX; // a BF16 linear's scale: no output
  std::vector<size_t> task_of_input(source.tensors.size(), kNoTask); // source tensor position -> task
  std::vector<uint32_t> output_of_input(source.tensors.size(), kDropped); // -> that task's output
  const auto position = [&](const SourceTensor& tensor) { return size_t(&tensor - source.tensors.data()); };
  // Each shard's linears become tasks numbered within the shard (shards on every core: a
  // linear's weight and scale are in one shard, so each writes its own task_of_input
  // entries), then the shards' tasks are numbered in shard order, as one loop would.
  const std::vector<size_t>& starts = source.shard_starts();
  std::vector<std::vector<Task>> shard_tasks(source.shard_files.size());
  std::vector<IgnoreUse> ignore_uses(source.shard_files.size());
  run_each(inputs.for_each, shard_tasks.size(), [&](size_t shard) {
    std::vector<Task>& tasks = shard_tasks[shard];
    // Per share key: the task small linears join, and its source bytes so far. A key's
    // first linear finds it full, and opens a task.
    std::map<ShareKey, std::pair<size_t, uint64_t>> open;
    std::string kind;
    IgnoreUse& ignore_use = ignore_uses[shard];
    ignore_use.matched.assign(inputs.params.ignore.size(), 0);
    for (size_t t = starts[shard]; t < starts[shard + 1]; ++t) {
      const auto linear = find_linear(source, source.tensors[t]);
      if (!linear) {
        if (const auto module = linear_weight_module(source.tensors[t].spec)) {
          refuse_unquantizable_linear(source, source.tensors[t], *module, inputs.params);
          ignore_use.note(*module, inputs.params.ignore);
        }
        continue;
      }
      ignore_use.note(linear->module, inputs.params.ignore);
      const CodecKind codec = linear_codec(*linear, ignore_matches(linear->module, inputs.params.ignore));
      const uint64_t bytes = source_bytes(*linear);
      size_t task = tasks.size(); // a new one, unless a small linear joins its key's task
      if (bytes <= kSmallLinearBytes) {
        module_kind(linear->module, kind);
        auto& [open_task, open_bytes] =
            open.try_emplace(ShareKey{kind, codec, linear->out, linear->in}, task, kTaskSourceBytes).first->second;
        if (open_bytes + bytes <= kTaskSourceBytes) {
          task = open_task;
        } else {
          open_task = task;
          open_bytes = 0;
        }
        open_bytes += bytes;
      }
      if (task == tasks.size()) tasks.push_back(linear_task(*linear, codec, inputs.params, task));
      const LinearSlots slots = add_linear(tasks[task], *linear);
      task_of_input[position(*linear->weight)] = task_of_input[position(*linear->scale)] = task;
      output_of_input[position(*linear->weight)] = uint32_t(slots.output);
      if (slots.output_scale) output_of_input[position(*linear->scale)] = uint32_t(*slots.output_scale);
    }
  });
  std::set<size_t> shards;
  plan.tasks.reserve(source.tensors.size() / 2); // at most one a linear, a weight and its scale
  for (size_t shard = 0; shard < shard_tasks.size(); ++shard) {
    const size_t first_task = plan.tasks.size();
    for (size_t t = starts[shard]; t < starts[shard + 1]; ++t) {
      if (task_of_input[t] != kNoTask) task_of_input[t] += first_task;
    }
    for (Task& task : shard_tasks[shard]) {
      task.group += first_task;
      const size_t linears = linear_count(task);
      if (linears > 1) task.name += fmt::format(" and {} more", linears - 1); // messages; the report goes by its tensors
      plan.tasks.push_back(std::move(task));
    }
    if (!shard_tasks[shard].empty()) shards.insert(shard);
  }
  plan.groups = plan.tasks.size();
  // weight -> the re-encoded weight; scale -> weight_scale (INT8) or nothing (BF16).
  const auto replace = [&](const SourceTensor& tensor, std::vector<ShardEntry>& entries) {
    const size_t task_index = task_of_input[position(tensor)];
    if (task_index == kNoTask) return false;
    const uint32_t output = output_of_input[position(tensor)];
    if (output != kDropped) entries.push_back(task_output_entry(plan.tasks[task_index], task_index, output));
    return true;
  };
  plan_changed_shards(source, shards, replace, plan, inputs.for_each);
  plan.config = source.config;
  plan.config["quantization_config"] = quantization_config(inputs.params);
  plan.notes["ignore_unmatched"] = Json::array();
  for (size_t i = 0; i < inputs.params.ignore.size(); ++i) {
    const bool used = std::ranges::any_of(ignore_uses, [&](const IgnoreUse& use) { return use.matched[i] != 0; });
    if (used) continue;
    const std::string& entry = inputs.params.ignore[i];
    refuse_mistyped_ignore_entry(source, entry);
    plan.notes["ignore_unmatched"].push_back(entry);
    plan.warnings.push_back(fmt::format("quant.ignore entry '{}' matches no linear of the source (a module this "
                                        "model does not have, or tensors that are not linears)", entry));
  }
  return plan;
}

namespace {

struct KindTotals {
  uint64_t tensors = 0, rows = 0, zero_rows = 0;
  uint64_t error_rows = 0; // the rows the error figure was measured on
  ChunkStats stats;
};

using Kinds = std::map<std::string, KindTotals, std::less<>>;

// Per-kind totals of the INT8 tasks and of the BF16 ones, in one pass over the tasks.
std::pair<Kinds, Kinds> kind_totals(const RecipePlan& plan, std::span<const TaskTotals> totals) {
  std::pair<Kinds, Kinds> int8_and_bf16;
  std::string name; // the task's kind, in one buffer for all tasks: a map key only when new
  for (size_t t = 0; t < plan.tasks.size(); ++t) {
    const Task& task = plan.tasks[t];
    const bool bf16 = task.codec == CodecKind::fp8_to_bf16 || task.codec == CodecKind::fp4_to_bf16;
    Kinds& kinds = bf16 ? int8_and_bf16.second : int8_and_bf16.first;
    module_kind(linear_module(task, 0), name); // a task's linears are of one kind
    auto found = kinds.find(name);
    if (found == kinds.end()) found = kinds.emplace(name, KindTotals{}).first;
    KindTotals& kind = found->second;
    const uint64_t linears = linear_count(task);
    kind.tensors += linears;
    kind.rows += task.rows * linears;
    kind.error_rows += (bf16 ? task.rows : int8_report_row_count(task.rows)) * linears;
    kind.zero_rows += totals[t].stats.zero_blocks;
    kind.stats.merge(totals[t].stats);
  }
  return int8_and_bf16;
}

Json kinds_report(const Kinds& kinds) {
  Json out = Json::array();
  for (const auto& [name, kind] : kinds) {
    const double reference = kind.stats.reference_sq.to_double();
    out.push_back({{"kind", name}, {"tensors", kind.tensors}, {"rows", kind.rows}, {"all_zero_rows", kind.zero_rows},
                   {"rel_rms_rows", kind.error_rows}, {"rel_rms_error", reference > 0 ? std::sqrt(kind.stats.error_sq.to_double() / reference) : 0.0}});
  }
  return out;
}

} // namespace

Json W8a8Int8Recipe::report(const RecipePlan& plan, const RecipeParams& params, std::span<const TaskTotals> totals) const {
  Json report;
  report["method"] = "int8-per-channel";
  report["parameters"] = {{"weight", "I8 [out, in], symmetric, clamp [-127, 127], round half to even"},
                          {"weight_scale", "F32 [out, 1] = row amax / 127 (all-zero row: 1.0)"},
                          {"rel_rms_error", fmt::format("INT8 kinds: over rows r % {} == 0 of each tensor (rel_rms_rows); "
                                                        "BF16 kinds: over every row", kInt8ReportRowStride)},
                          {"ignore", params.ignore}};
  report["ignore_unmatched"] = plan.notes.value("ignore_unmatched", Json::array()); // entries that matched no linear
  std::map<Dtype, uint64_t> by_dtype; // output tensors by dtype (changed shards): 100K entries, a handful of dtypes
  for (const auto& [shard, entries] : plan.shards) {
    for (const auto& entry : entries) ++by_dtype[entry.spec.dtype];
  }
  std::map<std::string, uint64_t> dtypes; // by name in the report
  for (const auto& [dtype, count] : by_dtype) dtypes[std::string(dtype_name(dtype))] = count;
  report["dtype_totals_changed_shards"] = dtypes;
  const auto [int8_kinds, bf16_kinds] = kind_totals(plan, totals);
  report["int8"] = kinds_report(int8_kinds);
  report["bf16"] = kinds_report(bf16_kinds);
  uint64_t zero_rows = 0;
  for (const auto& t : totals) zero_rows += t.stats.zero_blocks;
  report["all_zero_rows"] = zero_rows;
  return report;
}

namespace {

// The shard set closed: each output shard file is one of the source's (the run keeps their
// names). Continuous: named model-<i>-of-<N>.safetensors (any zero padding: DeepSeek's
// repositories write N with six digits), i runs over 1..N once each, N is the count. A
// shard the output lacks leaves a gap here, or (other names) missing keys below.
void audit_shard_set(const CheckpointView& source, const CheckpointView& output, const AuditCheck& check) {
  const std::set<std::string> source_files(source.shard_files.begin(), source.shard_files.end());
  std::set<uint64_t> seen;
  const uint64_t count = output.shard_files.size();
  for (const std::string& file : output.shard_files) {
    unsigned long long i = 0, n = 0;
    int end = 0;
    const bool numbered = std::sscanf(file.c_str(), "model-%llu-of-%llu.safetensors%n", &i, &n, &end) == 2 &&
                          size_t(end) == file.size();
    std::string problem;
    if (!source_files.count(file)) problem = "is not a shard of the source";
    else if (numbered && (n != count || i < 1 || i > count)) problem = fmt::format("is shard {} of {}; the set has {}", i, n, count);
    else if (numbered && !seen.insert(i).second) problem = fmt::format("a second shard {}", i);
    check("shard set continuous and closed", problem.empty(), file, problem);
  }
}

// The names the card's rule gives from the source alone (not from the plan): each linear's
// E8M0 scale becomes its weight_scale (INT8) or goes (BF16, ignored); every other name stays.
std::set<std::string> expected_names(const RecipeParams& params, const CheckpointView& source) {
  std::set<std::string> names;
  constexpr std::string_view kScale = ".scale";
  for (const auto& t : source.tensors) {
    const std::string_view name = t.spec.name;
    if (t.spec.dtype == Dtype::F8_E8M0 && name.ends_with(kScale)) {
      const std::string module(name.substr(0, name.size() - kScale.size()));
      const SourceTensor* weight = source.find(module + ".weight");
      if (weight && linear_weight_module(weight->spec)) {
        if (!ignore_matches(module, params.ignore)) names.insert(module + ".weight_scale");
        continue;
      }
    }
    names.insert(t.spec.name);
  }
  return names;
}

void audit_key_diff(const RecipeParams& params, const CheckpointView& source, const CheckpointView& output,
                    const AuditCheck& check) {
  const std::set<std::string> expected = expected_names(params, source);
  uint64_t missing = 0, extra = 0;
  for (const auto& name : expected) missing += output.find(name) ? 0 : 1;
  for (const auto& t : output.tensors) extra += expected.count(t.spec.name) ? 0 : 1;
  check("key diff vs source", missing == 0 && extra == 0, "tensor names",
        fmt::format("{} missing, {} extra", missing, extra));
}

void audit_linears(const RecipeParams& params, const CheckpointView& output, const AuditCheck& check) {
  for (const auto& t : output.tensors) {
    const auto module = linear_weight_module(t.spec);
    if (!module) continue;
    if (ignore_matches(*module, params.ignore)) {
      check("ignore-matched linears BF16", t.spec.dtype == Dtype::BF16, t.spec.name,
            fmt::format("is {}", dtype_name(t.spec.dtype)));
    } else {
      check("no BF16 linear outside the ignore rules", t.spec.dtype != Dtype::BF16, t.spec.name,
            "is BF16 but matches no ignore entry");
    }
  }
  for (const auto& t : output.tensors) {
    if (t.spec.dtype != Dtype::I8) continue;
    const std::string module = t.spec.name.substr(0, t.spec.name.rfind('.'));
    const SourceTensor* scale = output.find(module + ".weight_scale");
    const bool paired = scale && scale->spec.dtype == Dtype::F32 && t.spec.shape.size() == 2 &&
                        scale->spec.shape == std::vector<uint64_t>{t.spec.shape[0], 1};
    check("I8 weights paired with F32 [out, 1] scales", paired, t.spec.name,
          scale ? fmt::format("its weight_scale is {} {}", dtype_name(scale->spec.dtype), shape_text(scale->spec.shape))
                : "has no weight_scale");
  }
}

} // namespace

// The plan is not consulted: like the card's, these audits read the output against the
// source and the rules (the engine's own checks compare it with the plan).
void W8a8Int8Recipe::audit(const RecipePlan&, const RecipeParams& params, const CheckpointView& source,
                           const CheckpointView& output, const AuditCheck& check) const {
  audit_shard_set(source, output, check);
  audit_key_diff(params, source, output, check);
  audit_linears(params, output, check);
}

} // namespace shardq
