// `shardq inspect` end to end: runs the real binary (SHARDQ_BIN) on a good and a bad shard.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>

#include "pipeline/io/safetensors.h"
#include "io_test_util.h"

namespace shardq::io {
namespace {

using ::testing::HasSubstr;

struct CommandResult {
  int exit_code = -1;
  std::string output; // stdout and stderr together
};

CommandResult run_inspect(const std::filesystem::path& file) {
  const std::string command = std::string("'") + std::getenv("SHARDQ_BIN") + "' inspect '" + file.string() + "' 2>&1";
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, got);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

TEST(CliInspect, PrintsTheTensorTable) {
  if (!std::getenv("SHARDQ_BIN")) GTEST_SKIP() << "SHARDQ_BIN not set";
  test::ScratchDir dir;
  const auto path = dir / "good.safetensors";
  Writer writer(path, {{"model.embed.weight", Dtype::BF16, {4, 8}}, {"s", Dtype::F32, {}}});
  writer.open(false);
  writer.finish();
  const CommandResult result = run_inspect(path);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  // Columns aligned: name and shape as wide as their longest entry, bytes right-aligned.
  EXPECT_THAT(result.output, HasSubstr("name                dtype  shape   bytes\n"));
  EXPECT_THAT(result.output, HasSubstr("model.embed.weight  BF16   [4, 8]     64\n"));
  EXPECT_THAT(result.output, HasSubstr("s                   F32    []          4\n"));
  EXPECT_THAT(result.output, HasSubstr("total (2 tensors)" + std::string(21, ' ') + "68\n"));
}

TEST(CliInspect, FailsWithOneLineNamingTheFile) {
  if (!std::getenv("SHARDQ_BIN")) GTEST_SKIP() << "SHARDQ_BIN not set";
  test::ScratchDir dir;
  const auto path = dir / "bad.safetensors";
  test::write_safetensors_raw(path, R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,10]}})", 10);
  const CommandResult result = run_inspect(path);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
  EXPECT_THAT(result.output, HasSubstr(path.string() + ": tensor 'x': data_offsets [0, 10) hold 10 bytes but F32 [3] needs 12"));
}

} // namespace
} // namespace shardq::io
