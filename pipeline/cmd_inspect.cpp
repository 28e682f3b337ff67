// shardq inspect FILE: the validated tensor table of one shard (errors propagate to main,
// which prints them as one line and exits 1).
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pipeline/commands.h"
#include "pipeline/io/safetensors.h"

namespace shardq {

namespace {

struct Row {
  std::string name, dtype, shape, bytes;
};


void print_table(const std::vector<Row>& rows) {
  size_t name_width = 0, dtype_width = 0, shape_width = 0, bytes_width = 0;
  for (const Row& row : rows) {
    name_width = std::max(name_width, row.name.size());
    dtype_width = std::max(dtype_width, row.dtype.size());
    shape_width = std::max(shape_width, row.shape.size());
    bytes_width = std::max(bytes_width, row.bytes.size());
  }
  for (const Row& row : rows) {
    fmt::print("{:<{}}  {:<{}}  {:<{}}  {:>{}}\n", row.name, name_width, row.dtype, dtype_width, row.shape, shape_width,
               row.bytes, bytes_width);
  }
}

} // namespace

int cmd_inspect(const InspectArgs& args) {
  const io::Reader reader(args.file);
  std::vector<Row> rows = {{"name", "dtype", "shape", "bytes"}};
  uint64_t total = 0;
  for (const io::TensorInfo& t : reader.tensors()) {
    rows.push_back({t.name, std::string(io::dtype_name(t.dtype)), shape_text(t.shape), std::to_string(t.end - t.begin)});
    total += t.end - t.begin;
  }
  rows.push_back({fmt::format("total ({} tensors)", reader.tensors().size()), "", "", std::to_string(total)});
  fmt::print("{}: {} bytes, data buffer at offset {}\n", reader.path().string(), reader.file_size(), reader.data_offset());
  for (const auto& [key, value] : reader.metadata()) fmt::print("metadata {} = {}\n", key, value);
  print_table(rows);
  return kExitOk;
}

} // namespace shardq
