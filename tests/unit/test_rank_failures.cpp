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
  EXPECT_EQ(one_line_for(apart, 3), "rank 0 (spark1): " + kMissing + " (ranks 1, 2 failed too; the other reasons are logged above)");
}

TEST(RankFailures, OneRankOfOneIsTheMessageAlone) {
  EXPECT_EQ(one_line_for({{0, "spark1", kMissing}}, 1), kMissing);
}

TEST(RankFailures, NoFailureIsNoLine) {
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
  const std::string long_message(2 * kFailureMessageBytes, 'x');
  const size_t kept = kFailureMessageBytes - 4; // then "..." and the NUL
  try {
    on_every_rank(link, [&] { throw PipelineError(long_message); });
    ADD_FAILURE() << "a failed step was not reported";
  } catch (const FailedOnRanks& e) {
    ASSERT_EQ(e.line().size(), kept + 3);
    EXPECT_EQ(e.line().substr(0, kept), long_message.substr(0, kept));
    EXPECT_EQ(e.line().substr(kept), "...");
  }
}

TEST(RankFailures, AMessageThatFitsIsKeptWhole) {
  const Link link;
  const std::string longest(kFailureMessageBytes - 1, 'y');
  try {
    on_every_rank(link, [&] { throw PipelineError(longest); });
    ADD_FAILURE() << "a failed step was not reported";
  } catch (const FailedOnRanks& e) {
    EXPECT_EQ(e.line(), longest);
  }
}

} // namespace
} // namespace shardq
