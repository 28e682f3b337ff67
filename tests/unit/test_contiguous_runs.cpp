// for_each_contiguous_run: transfers sorted by file and offset, one call per stretch that
// lies back to back in one file (a gap or another file starts a new one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
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

// for_each_near_run: stretches at most gap.size() apart join one run, the bytes between
// them read into the gap scratch. Read through it from a model of two files, every
// transfer gets its own bytes; the calls are the stretches farther apart.
TEST(ContiguousRuns, ReadRunsJoinNearStretchesThroughTheGap) {
  std::vector<std::vector<uint8_t>> files(2, std::vector<uint8_t>(100));
  for (size_t f = 0; f < 2; ++f) {
    for (size_t i = 0; i < 100; ++i) files[f][i] = uint8_t(100 * f + i);
  }
  std::vector<uint8_t> a(4), b(6), c(3), d(5), e(2);
  // File 1: [10, 14), [17, 23) (3 apart), [27, 30) (4 apart); file 0: [0, 5), [40, 42).
  std::vector<Transfer<int, uint8_t>> transfers = {{1, 27, c}, {1, 17, b}, {0, 40, e}, {1, 10, a}, {0, 0, d}};
  std::vector<uint8_t> gap(4, 0xEE);
  std::vector<std::pair<int, uint64_t>> calls;
  for_each_near_run(transfers, std::span(gap), [&](int file, uint64_t offset, std::span<const std::span<uint8_t>> pieces) {
    calls.emplace_back(file, offset);
    uint64_t at = offset;
    for (const auto& piece : pieces) {
      ASSERT_LE(at + piece.size(), files[size_t(file)].size());
      std::copy_n(files[size_t(file)].begin() + long(at), piece.size(), piece.begin()); // a preadv of the run
      at += piece.size();
    }
  });
  EXPECT_EQ(calls, (std::vector<std::pair<int, uint64_t>>{{0, 0}, {0, 40}, {1, 10}}));
  for (const auto& t : transfers) {
    for (size_t i = 0; i < t.bytes.size(); ++i) EXPECT_EQ(t.bytes[i], files[size_t(t.file)][t.offset + i]) << t.file << " " << t.offset;
  }
}

} // namespace
} // namespace shardq::io
