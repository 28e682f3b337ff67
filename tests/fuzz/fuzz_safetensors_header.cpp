// libFuzzer target for the entry points of untrusted safetensors headers (and shard indexes).
// 1. The input is a whole file: 8-byte length, header, buffer. parse_header must either
//    throw IoError or return tensors that tile the buffer exactly; an accepted header is
//    then re-planned by the Writer and must parse back to the same tensors (round trip).
// 2. The same bytes also drive a structured round trip: a random spec list is planned,
//    and its header must parse back to exactly the planned layout.
// 3. Whatever header the simple (DOM-free) parse accepts, the strict DOM parse must accept
//    too and read as the same tensors and metadata: the simple parse may only decline.
// 4. The same for the same bytes read as a shard index (model.safetensors.index.json).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/io/index.h"
#include "pipeline/io/safetensors.h"
#include "pipeline/io/simple_header.h"
#include "pipeline/io/strict_json.h"

namespace {

using namespace shardq::io;

bool same_layout(const std::vector<TensorInfo>& a, const std::vector<TensorInfo>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape || a[i].begin != b[i].begin ||
        a[i].end != b[i].end) {
      return false;
    }
  }
  return true;
}

// Plans specs, parses the planned header back and traps unless the layout survives.
void check_round_trip(const std::vector<TensorSpec>& specs, const std::map<std::string, std::string>& metadata) {
  FileLayout layout;
  try {
    layout = Writer::plan(specs, metadata);
  } catch (const IoError&) {
    return; // overflowing or duplicate specs are refused, which is fine
  }
  const auto& [planned, data_offset, header, by_name] = layout;
  const uint64_t buffer = planned.empty() ? 0 : planned.back().end;
  if (data_offset % Writer::kAlignment != 0 || data_offset != 8 + header.size()) std::abort();
  for (const auto& t : planned) {
    if (layout.find(t.name) != &t) std::abort(); // the name index finds every planned tensor
  }
  std::map<std::string, std::string> parsed_metadata;
  const auto parsed = parse_header(header, header.size(), data_offset + buffer, "round-trip", &parsed_metadata);
  if (!same_layout(planned, parsed) || parsed_metadata != metadata) std::abort();
}

void fuzz_raw_file(const uint8_t* data, size_t size) {
  if (size < 8) return;
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = header_length << 8 | data[i];
  const std::string_view header(reinterpret_cast<const char*>(data + 8), std::min<uint64_t>(header_length, size - 8));
  std::map<std::string, std::string> metadata;
  std::vector<TensorInfo> tensors;
  try {
    tensors = parse_header(header, header_length, size, "fuzz", &metadata);
  } catch (const IoError&) {
    return;
  }
  uint64_t expected_begin = 0;
  std::vector<TensorSpec> specs;
  for (const TensorInfo& t : tensors) {
    if (t.begin != expected_begin || t.end < t.begin) std::abort();
    expected_begin = t.end;
    specs.push_back({t.name, t.dtype, t.shape});
  }
  if (8 + header_length + expected_begin != size) std::abort();
  check_round_trip(specs, metadata);
}

// The simple parse's reading of one root member, checked against the DOM's.
bool same_entry(const TensorInfo& tensor, const nlohmann::ordered_json& entry) {
  if (!entry.is_object() || entry.size() != 3 || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets")) return false;
  const auto& dtype = entry["dtype"];
  const auto& offsets = entry["data_offsets"];
  if (!dtype.is_string() || dtype.get<std::string>() != dtype_name(tensor.dtype)) return false;
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) return false;
  if (offsets[0].get<uint64_t>() != tensor.begin || offsets[1].get<uint64_t>() != tensor.end) return false;
  if (!entry["shape"].is_array() || entry["shape"].size() != tensor.shape.size()) return false;
  for (size_t d = 0; d < tensor.shape.size(); ++d) {
    const auto& dim = entry["shape"][d];
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() != tensor.shape[d]) return false;
  }
  return true;
}

// header: the input after its 8-byte length, as fuzz_raw_file reads it.
void fuzz_simple_agrees(const uint8_t* data, size_t size) {
  if (size < 8) return;
  const std::string_view header(reinterpret_cast<const char*>(data + 8), size - 8);
  const auto simple = parse_simple_header(header);
  if (!simple) return;
  nlohmann::ordered_json dom;
  try {
    dom = parse_json_strict(header, "fuzz", "header");
  } catch (const IoError&) {
    std::abort(); // the simple parse accepted what is not strict JSON
  }
  if (!dom.is_object()) std::abort();
  size_t next_tensor = 0;
  for (const auto& [key, value] : dom.items()) {
    if (key == "__metadata__") {
      if (!value.is_object() || value.size() != simple->metadata.size()) std::abort();
      for (const auto& [name, text] : value.items()) {
        const auto it = simple->metadata.find(name);
        if (!text.is_string() || it == simple->metadata.end() || it->second != text.get<std::string>()) std::abort();
      }
      continue;
    }
    if (next_tensor >= simple->tensors.size()) std::abort();
    const TensorInfo& tensor = simple->tensors[next_tensor++];
    if (tensor.name != key || !same_entry(tensor, value)) std::abort();
  }
  if (next_tensor != simple->tensors.size()) std::abort();
}

void fuzz_simple_index_agrees(const uint8_t* data, size_t size) {
  if (size < 8) return;
  const std::string_view text(reinterpret_cast<const char*>(data + 8), size - 8);
  const auto simple = read_simple_index(text);
  if (!simple) return;
  try {
    if (!(read_index_dom(text, "fuzz") == *simple)) std::abort();
  } catch (const IoError&) {
    std::abort(); // the simple reading accepted what the strict one refuses
  }
}

void fuzz_planned_specs(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  std::vector<TensorSpec> specs;
  const size_t count = input.ConsumeIntegralInRange<size_t>(0, 8);
  for (size_t i = 0; i < count; ++i) {
    TensorSpec spec;
    spec.name = input.ConsumeRandomLengthString(16);
    spec.dtype = Dtype(input.ConsumeIntegralInRange<int>(0, int(Dtype::U64)));
    const size_t rank = input.ConsumeIntegralInRange<size_t>(0, 4);
    for (size_t d = 0; d < rank; ++d) spec.shape.push_back(input.ConsumeIntegral<uint64_t>() >> input.ConsumeIntegralInRange<int>(0, 63));
    specs.push_back(std::move(spec));
  }
  std::map<std::string, std::string> metadata;
  if (input.ConsumeBool()) metadata[input.ConsumeRandomLengthString(8)] = input.ConsumeRandomLengthString(8);
  // Names from random bytes are often not UTF-8: plan must refuse them with IoError.
  check_round_trip(specs, metadata);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_raw_file(data, size);
  fuzz_planned_specs(data, size);
  fuzz_simple_agrees(data, size);
  fuzz_simple_index_agrees(data, size);
  return 0;
}
