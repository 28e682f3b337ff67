#include "stages/tensor.h"

#include <fmt/format.h>

#include <array>

namespace shardq {
namespace {

struct DtypeRow {
  Dtype dtype;
  std::string_view name;
  int bits;
};

// One row per safetensors dtype string, in enum order.
constexpr std::array<DtypeRow, 22> kDtypes = {{
    {Dtype::BOOL, "BOOL", 8},        {Dtype::F4, "F4", 4},
    {Dtype::F6_E2M3, "F6_E2M3", 6},  {Dtype::F6_E3M2, "F6_E3M2", 6},
    {Dtype::U8, "U8", 8},            {Dtype::I8, "I8", 8},
    {Dtype::F8_E5M2, "F8_E5M2", 8},  {Dtype::F8_E4M3, "F8_E4M3", 8},
    {Dtype::F8_E8M0, "F8_E8M0", 8},  {Dtype::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {Dtype::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8}, {Dtype::I16, "I16", 16},
    {Dtype::U16, "U16", 16},         {Dtype::F16, "F16", 16},
    {Dtype::BF16, "BF16", 16},       {Dtype::I32, "I32", 32},
    {Dtype::U32, "U32", 32},         {Dtype::F32, "F32", 32},
    {Dtype::C64, "C64", 64},         {Dtype::F64, "F64", 64},
    {Dtype::I64, "I64", 64},         {Dtype::U64, "U64", 64},
}};

} // namespace

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const DtypeRow& row : kDtypes) {
    if (row.name == name) return row.dtype;
  }
  return std::nullopt;
}

std::string_view dtype_name(Dtype dtype) { return kDtypes[size_t(dtype)].name; }

int dtype_bits(Dtype dtype) { return kDtypes[size_t(dtype)].bits; }

uint64_t tensor_bytes(const TensorSpec& spec) {
  uint64_t numel = 1;
  for (uint64_t dim : spec.shape) numel *= dim;
  return numel * uint64_t(dtype_bits(spec.dtype)) / 8;
}

uint64_t tensor_row_bytes(const TensorSpec& spec) {
  const uint64_t rows = spec.shape.empty() ? 1 : spec.shape[0];
  return rows ? tensor_bytes(spec) / rows : 0;
}

std::string shape_text(const std::vector<uint64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

} // namespace shardq
