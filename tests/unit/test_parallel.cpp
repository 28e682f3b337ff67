// parallel_for: every index once, whatever the thread count; the lowest failing index's
// exception, as a plain loop would have met it first.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
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

// The helper threads serve one loop at a time: a loop nested in an item, and loops started
// from several threads at once, still run every index once (on their own thread when the
// helpers are taken), and the pool serves later loops after them.
TEST(ParallelFor, NestedAndConcurrentLoopsRunEveryIndexOnce) {
  constexpr size_t kOuter = 16, kInner = 100;
  std::vector<std::atomic<int>> runs(kOuter * kInner);
  parallel_for(kOuter, [&](size_t i) { parallel_for(kInner, [&](size_t j) { ++runs[i * kInner + j]; }); });
  for (size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i].load(), 1) << "nested, index " << i;

  constexpr size_t kCallers = 4, kItems = 500;
  std::vector<std::atomic<int>> concurrent(kCallers * kItems);
  {
    std::vector<std::jthread> callers;
    for (size_t c = 0; c < kCallers; ++c) {
      callers.emplace_back([&, c] {
        for (int round = 0; round < 20; ++round) parallel_for(kItems, [&](size_t i) { ++concurrent[c * kItems + i]; });
      });
    }
  }
  for (size_t i = 0; i < concurrent.size(); ++i) ASSERT_EQ(concurrent[i].load(), 20) << "concurrent, index " << i;

  std::vector<std::atomic<int>> after(1000);
  parallel_for(after.size(), [&](size_t i) { ++after[i]; });
  for (size_t i = 0; i < after.size(); ++i) ASSERT_EQ(after[i].load(), 1) << "after, index " << i;
}

} // namespace
} // namespace shardq
