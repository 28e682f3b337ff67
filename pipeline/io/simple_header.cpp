#include "pipeline/io/simple_header.h"

#include <unordered_set>

#include "pipeline/io/plain_json.h"

namespace shardq::io {
namespace {

// {"dtype": "...", "shape": [...], "data_offsets": [begin, end]}, each field once, in any order.
bool read_tensor(PlainJson& json, TensorInfo& tensor) {
  constexpr int kDtype = 1, kShape = 2, kOffsets = 4;
  int fields = 0;
  const bool read = json.object([&](std::string_view field) {
    const int bit = field == "dtype" ? kDtype : field == "shape" ? kShape : field == "data_offsets" ? kOffsets : 0;
    if (bit == 0 || (fields & bit)) return false;
    fields |= bit;
    if (bit == kDtype) {
      const auto name = json.string();
      const auto dtype = name ? parse_dtype(*name) : std::nullopt;
      if (dtype) tensor.dtype = *dtype;
      return dtype.has_value();
    }
    if (bit == kShape) return json.numbers([&](uint64_t dim) { tensor.shape.push_back(dim); });
    std::vector<uint64_t> offsets;
    if (!json.numbers([&](uint64_t offset) { offsets.push_back(offset); }) || offsets.size() != 2) return false;
    tensor.begin = offsets[0];
    tensor.end = offsets[1];
    return true;
  });
  return read && fields == (kDtype | kShape | kOffsets);
}

// {"key": "value", ...}, each key once.
bool read_metadata(PlainJson& json, std::map<std::string, std::string>& metadata) {
  return json.object([&](std::string_view key) {
    const auto value = json.string();
    return value && metadata.emplace(key, *value).second;
  });
}

bool names_unique(const std::vector<TensorInfo>& tensors) {
  std::unordered_set<std::string_view> names;
  names.reserve(tensors.size());
  for (const auto& tensor : tensors) {
    if (!names.insert(tensor.name).second) return false;
  }
  return true;
}

} // namespace

std::optional<SimpleHeader> parse_simple_header(std::string_view header_json) {
  PlainJson json(header_json);
  SimpleHeader header;
  bool seen_metadata = false;
  const bool read = json.object([&](std::string_view key) {
    if (key == "__metadata__") {
      if (seen_metadata) return false;
      seen_metadata = true;
      return read_metadata(json, header.metadata);
    }
    if (key.empty()) return false;
    TensorInfo& tensor = header.tensors.emplace_back();
    tensor.name = key;
    return read_tensor(json, tensor);
  });
  if (!read || !json.at_end() || !names_unique(header.tensors)) return std::nullopt;
  return header;
}

} // namespace shardq::io
