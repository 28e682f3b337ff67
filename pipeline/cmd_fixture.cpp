#include <chrono>
#include <cstdio>

#include "pipeline/commands.h"
#include "pipeline/fixture.h"

namespace shardq {

int cmd_fixture(const FixtureArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  const FixtureResult result = write_fixture(args);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("shardq fixture: %s (shape %s) -> %s: %zu shards, %llu tensors, %llu tensor bytes, engram rows",
              args.preset.c_str(), args.shape.c_str(), args.out.c_str(), result.shards.size(),
              static_cast<unsigned long long>(result.tensors), static_cast<unsigned long long>(result.tensor_bytes));
  for (size_t i = 0; i < result.engram.layer_ids.size(); ++i) {
    std::printf(" %d:%llu", result.engram.layer_ids[i], static_cast<unsigned long long>(result.engram.num_embeddings[i]));
  }
  std::printf(", %.2f s (%.1f MB/s)\n", seconds, double(result.tensor_bytes) / 1e6 / seconds);
  return kExitOk;
}

} // namespace shardq
