#include "pipeline/io/simple_header.h"

#include "pipeline/io/plain_json.h"
#include "stages/name_index.h"

namespace shardq::io {
namespace {

// {"dtype": "...", "shape": [...], "data_offsets": [begin, end]}, each field once, in any order.
// `numbers`: a buffer kept across the header's tensors, so that a shape costs one exact
// allocation and the offsets none (a 2-D tensor: 1 allocation, not 4; 100K tensors: ~300K fewer).
bool read_tensor(PlainJson& json, TensorInfo& tensor, std::vector<uint64_t>& numbers) {
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
    numbers.clear();
    if (!json.numbers([&](uint64_t number) { numbers.push_back(number); })) return false;
    if (bit == kShape) {
      tensor.shape.assign(numbers.begin(), numbers.end());
      return true;
    }
    if (numbers.size() != 2) return false;
    tensor.begin = numbers[0];
    tensor.end = numbers[1];
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

bool index_names(const std::vector<TensorInfo>& tensors, NameIndex& names) {
  return names.build(tensors.size(), [&](size_t i) -> std::string_view { return tensors[i].name; }).empty();
}

} // namespace

std::optional<SimpleHeader> parse_simple_header(std::string_view header_json) {
  PlainJson json(header_json);
  SimpleHeader header;
  std::vector<uint64_t> numbers;
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
    return read_tensor(json, tensor, numbers);
  });
  if (!read || !json.at_end() || !index_names(header.tensors, header.names)) return std::nullopt;
  return header;
}

} // namespace shardq::io
