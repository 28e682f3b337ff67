// When a rank asks rank 0 for work, and for how much.
#include <gtest/gtest.h>

#include "pipeline/work.h"

namespace shardq {
namespace {

TEST(WorkRequest, AnIdleRankAsksForTwoItemsPerThreadAndTheQueuedBytes) {
  const auto request = work_to_request({3, 4, 0, 0, 0});
  ASSERT_TRUE(request);
  EXPECT_EQ(request->rank, 3);
  EXPECT_EQ(request->items, int32_t(kItemsPerThread * 4));
  EXPECT_EQ(request->bytes, kQueuedBytes);
}

TEST(WorkRequest, AsksForWhatIsMissing) {
  const auto request = work_to_request({1, 4, 5, kQueuedBytes / 4, 0});
  ASSERT_TRUE(request);
  EXPECT_EQ(request->items, int32_t(kItemsPerThread * 4 - 5));
  EXPECT_EQ(request->bytes, kQueuedBytes - kQueuedBytes / 4);
}

TEST(WorkRequest, ARankWithEnoughItemsAndBytesDoesNotAsk) {
  EXPECT_FALSE(work_to_request({1, 2, kItemsPerThread * 2, kQueuedBytes, 0}));
}

TEST(WorkRequest, EnoughItemsOfTinyTensorsAskForBytesAndNoItems) {
  const auto request = work_to_request({1, 2, kItemsPerThread * 2, 1000, 0});
  ASSERT_TRUE(request);
  EXPECT_EQ(request->items, 0);
  EXPECT_EQ(request->bytes, kQueuedBytes - 1000);
}

TEST(WorkRequest, UnsentChunksStopTheAsking) {
  EXPECT_TRUE(work_to_request({1, 2, 0, 0, kMaxUnsentBytes - 1}));
  EXPECT_FALSE(work_to_request({1, 2, 0, 0, kMaxUnsentBytes}));
  EXPECT_FALSE(work_to_request({1, 2, 0, 0, 10 * kMaxUnsentBytes}));
}

// The limit is the load's own (tests set a small one to reach it with a small fixture).
TEST(WorkRequest, TheLoadsOwnUnsentLimitStopsTheAsking) {
  EXPECT_TRUE(work_to_request({1, 2, 0, 0, 4095, 4096}));
  EXPECT_FALSE(work_to_request({1, 2, 0, 0, 4096, 4096}));
}

} // namespace
} // namespace shardq
