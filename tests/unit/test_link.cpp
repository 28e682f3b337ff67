// The Link of a process no launcher started: the only rank, without MPI (this test binary
// never initializes MPI), its messages to itself in order.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "pipeline/link.h"

namespace shardq {
namespace {

constexpr const char* kLauncherVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"};

// Clears the launcher variables for the test and puts back what was there.
class LauncherEnvironment {
 public:
  LauncherEnvironment() {
    for (const char* name : kLauncherVariables) {
      const char* value = std::getenv(name);
      saved_.push_back(value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
  }
  ~LauncherEnvironment() {
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (saved_[i]) setenv(kLauncherVariables[i], saved_[i]->c_str(), 1);
      else unsetenv(kLauncherVariables[i]);
    }
  }

 private:
  std::vector<std::optional<std::string>> saved_;
};

TEST(Link, LaunchedOnlyWhenALauncherSetItsVariable) {
  const LauncherEnvironment environment;
  EXPECT_FALSE(launched_by_mpi());
  for (const char* name : kLauncherVariables) {
    setenv(name, "0", 1);
    EXPECT_TRUE(launched_by_mpi()) << name;
    unsetenv(name);
  }
}

TEST(Link, WithoutMpiIsTheOnlyRankAndHearsItselfInOrder) {
  Link link;
  EXPECT_EQ(link.rank(), 0);
  EXPECT_EQ(link.size(), 1);
  link.send(0, Tag::request, encode(int32_t(7)));
  link.send_all(Tag::stop, encode(int32_t(75)));
  const auto first = link.poll();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->tag, Tag::request);
  EXPECT_EQ(decode<int32_t>(first->bytes), 7);
  const auto second = link.poll();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->tag, Tag::stop);
  EXPECT_EQ(decode<int32_t>(second->bytes), 75);
  EXPECT_FALSE(link.poll().has_value());
  EXPECT_FALSE(link.transferring());
  link.drain();
}

TEST(Link, WithoutMpiCollectivesAreThisRanksOwn) {
  const Link link;
  EXPECT_EQ(link.broadcast(42), 42);
  struct Record {
    int threads;
    double rate;
  };
  const auto all = link.gather(Record{20, 1.5});
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].threads, 20);
  EXPECT_EQ(all[0].rate, 1.5);
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(link.host_name(), std::string(host));
}

} // namespace
} // namespace shardq
