// parallel_for: every index once, whatever the thread count; the lowest failing index's
// exception, as a plain loop would have met it first.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/parallel.h"

namespace shardq {
namespace {

TEST(ParallelFor, RunsEveryIndexOnce) {
  for (size_t count : {0u, 1u, 7u, 1000u}) {
    std::vector<std::atomic<int>> runs(count);
    parallel_for(count, [&](size_t i) { ++runs[i]; });
    for (size_t i = 0; i < count; ++i) EXPECT_EQ(runs[i].load(), 1) << count << " items, index " << i;
  }
}

TEST(ParallelFor, RethrowsTheLowestFailingIndex) {
  std::atomic<size_t> ran{0};
  try {
    parallel_for(200, [&](size_t i) {
      ++ran;
      if (i % 50 == 17) throw std::runtime_error("item " + std::to_string(i));
    });
    FAIL() << "nothing was thrown";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "item 17");
  }
  EXPECT_EQ(ran.load(), 200u) << "a failure stopped other items";
}

} // namespace
} // namespace shardq
