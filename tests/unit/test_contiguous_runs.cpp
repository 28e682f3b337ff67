// for_each_contiguous_run: transfers sorted by file and offset, one call per stretch that
// lies back to back in one file (a gap or another file starts a new one).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "pipeline/io/contiguous_runs.h"

namespace shardq::io {
namespace {

TEST(ContiguousRuns, OneCallPerBackToBackStretch) {
  std::vector<uint8_t> a(4, 1), b(6, 2), c(3, 3), d(5, 4), e(2, 5);
  // File 1: [10, 14) and [14, 20) meet, [25, 28) is apart; file 0: [0, 5) and [5, 7) meet.
  std::vector<Transfer<int, uint8_t>> transfers = {{1, 25, c}, {1, 14, b}, {0, 5, e}, {1, 10, a}, {0, 0, d}};
  struct Run {
    int file;
    uint64_t offset;
    std::vector<const uint8_t*> pieces;
  };
  std::vector<Run> runs;
  for_each_contiguous_run(transfers, [&](int file, uint64_t offset, std::span<const std::span<uint8_t>> pieces) {
    Run run{file, offset, {}};
    for (const auto& piece : pieces) run.pieces.push_back(piece.data());
    runs.push_back(run);
  });
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].file, 0);
  EXPECT_EQ(runs[0].offset, 0u);
  EXPECT_EQ(runs[0].pieces, (std::vector<const uint8_t*>{d.data(), e.data()}));
  EXPECT_EQ(runs[1].file, 1);
  EXPECT_EQ(runs[1].offset, 10u);
  EXPECT_EQ(runs[1].pieces, (std::vector<const uint8_t*>{a.data(), b.data()}));
  EXPECT_EQ(runs[2].offset, 25u);
  EXPECT_EQ(runs[2].pieces, (std::vector<const uint8_t*>{c.data()}));
}

TEST(ContiguousRuns, NothingToTransferMakesNoCall) {
  std::vector<Transfer<int, const uint8_t>> none;
  int calls = 0;
  for_each_contiguous_run(none, [&](int, uint64_t, std::span<const std::span<const uint8_t>>) { ++calls; });
  EXPECT_EQ(calls, 0);
}

} // namespace
} // namespace shardq::io
