// The one line a setup failure on some or all ranks turns into, and the agreement of a
// process no launcher started (the only rank).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipeline/rank_failures.h"

namespace shardq {
namespace {

const std::string kMissing = "/data/src/model.safetensors.index.json: No such file or directory";

TEST(RankFailures, EveryRankFailingAlikeIsTheMessageAlone) {
  const std::vector<RankFailure> failures = {{0, "spark1", kMissing}, {1, "spark2", kMissing}, {2, "spark3", kMissing}};
  EXPECT_EQ(one_line_for(failures, 3), kMissing);
}

TEST(RankFailures, OneRankFailingIsNamedWithItsHost) {
  EXPECT_EQ(one_line_for({{2, "spark3", kMissing}}, 4), "rank 2 (spark3): " + kMissing);
}

TEST(RankFailures, SomeRanksFailingNameTheFirstAndListTheOthers) {
  const std::vector<RankFailure> alike = {{1, "spark2", kMissing}, {3, "spark4", kMissing}};
  EXPECT_EQ(one_line_for(alike, 4), "rank 1 (spark2): " + kMissing + " (rank 3 failed too, alike)");
  const std::vector<RankFailure> apart = {{0, "spark1", kMissing}, {1, "spark2", "bad"}, {2, "spark3", kMissing}};
  EXPECT_EQ(one_line_for(apart, 3), "rank 0 (spark1): " + kMissing + " (ranks 1, 2 failed too, each its own way)");
}

TEST(RankFailures, OneRankOfOneIsTheMessageAlone) {
  EXPECT_EQ(one_line_for({{0, "spark1", kMissing}}, 1), kMissing);
  EXPECT_EQ(one_line_for({}, 4), "");
}

TEST(RankFailures, TheOnlyRankThrowsItsMessageAsTheLine) {
  const Link link; // no launcher: the only rank
  EXPECT_NO_THROW(on_every_rank(link, [] {}));
  try {
    on_every_rank(link, [] { throw PipelineError(kMissing); });
    ADD_FAILURE() << "a failed step was not reported";
  } catch (const FailedOnRanks& e) {
    EXPECT_EQ(e.line(), kMissing);
  }
}

TEST(RankFailures, ALongMessageIsCutVisibly) {
  const Link link;
  const std::string long_message(5000, 'x');
  try {
    on_every_rank(link, [&] { throw PipelineError(long_message); });
    ADD_FAILURE() << "a failed step was not reported";
  } catch (const FailedOnRanks& e) {
    ASSERT_EQ(e.line().size(), 2047u);
    EXPECT_EQ(e.line().substr(0, 2044), long_message.substr(0, 2044));
    EXPECT_EQ(e.line().substr(2044), "...");
  }
}

} // namespace
} // namespace shardq
