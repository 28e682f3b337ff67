// Tensors as a safetensors header names them (dtype, shape): what recipes plan with and
// what the io layer reads and writes. One row per dtype string (docs/formats.md
// "safetensors").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardq {

enum class Dtype {
  BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ,
  I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64
};

std::optional<Dtype> parse_dtype(std::string_view name);
std::string_view dtype_name(Dtype dtype);
int dtype_bits(Dtype dtype);

struct TensorSpec {
  std::string name;
  Dtype dtype;
  std::vector<uint64_t> shape;
  bool operator==(const TensorSpec&) const = default;
};

// Bytes of the whole tensor (numel * bits / 8); the caller has checked it fits.
uint64_t tensor_bytes(const TensorSpec& spec);
// Bytes of one row (dim 0); a scalar is one row.
uint64_t tensor_row_bytes(const TensorSpec& spec);
// "[a, b]" for messages.
std::string shape_text(const std::vector<uint64_t>& shape);

} // namespace shardq
