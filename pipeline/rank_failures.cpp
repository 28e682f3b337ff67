#include "pipeline/rank_failures.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

namespace shardq {
namespace {

// What a rank sends rank 0 about the step.
struct Outcome {
  int failed = 0;
  char host[256] = {};
  char message[kFailureMessageBytes] = {};
};

} // namespace

std::string one_line_for(const std::vector<RankFailure>& failures, int ranks) {
  if (failures.empty()) return "";
  const RankFailure& first = failures.front();
  const bool alike = std::all_of(failures.begin(), failures.end(), [&](const RankFailure& f) { return f.message == first.message; });
  if (ranks == 1 || (int(failures.size()) == ranks && alike)) return first.message;
  std::string line = fmt::format("rank {} ({}): {}", first.rank, first.host, first.message);
  if (failures.size() == 1) return line;
  std::vector<int> others;
  for (size_t i = 1; i < failures.size(); ++i) others.push_back(failures[i].rank);
  return line + fmt::format(" (rank{} {} failed too{})", others.size() > 1 ? "s" : "", fmt::join(others, ", "),
                            alike ? ", alike" : "; the other reasons are logged above");
}

void agree_on_failure(const Link& link, const std::string& error) {
  Outcome mine;
  mine.failed = error.empty() ? 0 : 1;
  copy_to_field(link.host_name(), mine.host);
  copy_to_field(error, mine.message);
  const std::vector<Outcome> outcomes = link.gather(mine);
  std::vector<RankFailure> failures;
  for (size_t rank = 0; rank < outcomes.size(); ++rank) {
    if (outcomes[rank].failed) failures.push_back({int(rank), outcomes[rank].host, outcomes[rank].message});
  }
  if (link.broadcast(failures.empty() ? 0 : 1) == 0) return;
  for (const RankFailure& other : failures) {
    if (other.message != failures.front().message) spdlog::error("rank {} ({}): {}", other.rank, other.host, other.message);
  }
  throw FailedOnRanks(link.rank() == 0 ? one_line_for(failures, link.size()) : "");
}

} // namespace shardq
