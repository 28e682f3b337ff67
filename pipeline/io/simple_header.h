// The shape nearly every safetensors header has, read as plain JSON (plain_json.h) straight into
// TensorInfo: {"__metadata__": {string: string}, name: {"dtype": string, "shape": [n, ...],
// "data_offsets": [n, n]}, ...}. Building a JSON DOM of a 100K-tensor header first costs
// several times the parse. Anything else (a syntax error, another key or value type, a
// repeated key, an unknown dtype) is not an error here but "not simple": parse_header then
// takes its strict DOM path, which accepts or refuses it with the precise message.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/io/safetensors.h"

namespace shardq::io {

struct SimpleHeader {
  std::vector<TensorInfo> tensors; // in header order, sizes not yet checked
  NameIndex names;                 // into tensors (a header that repeats a name is not simple)
  std::map<std::string, std::string> metadata;
};

std::optional<SimpleHeader> parse_simple_header(std::string_view header_json);

} // namespace shardq::io
