// A setup step every rank runs on its own (reading the job, planning from its view of src)
// can fail on all of them at once (a typo in --src) or on some (one Spark does not mount
// the source). Each rank printing its own line would give four copies of one error, or
// lines that do not say which node failed; one rank's MPI_Abort would cut the others' short.
// So the ranks agree: each tells rank 0 whether the step failed and why, rank 0 prints one
// line, and every rank ends cleanly with the same exit code.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/link.h"
#include "pipeline/pipeline_error.h"

namespace shardq {

// The longest message a rank passes on (a longer one is cut, ending in "...").
inline constexpr size_t kFailureMessageBytes = 2048;

struct RankFailure {
  int rank = 0;
  std::string host;
  std::string message;
};

// The one line for a step that failed on `failures` (in rank order) out of `ranks`: the
// message alone when every rank failed alike, else the first failing rank and its host
// named, with the other failing ranks listed (rank 0 logs their reasons where they differ).
std::string one_line_for(const std::vector<RankFailure>& failures, int ranks);

// Thrown on every rank once the ranks agree that a step failed (or rank 0 tells them its
// own setup did): `line` is what the rank prints, rank 0's one line, empty on the others,
// which end silently.
class FailedOnRanks : public PipelineError {
 public:
  explicit FailedOnRanks(const std::string& line)
      : PipelineError(line.empty() ? "the run failed; rank 0 printed why" : line), line_(line) {}
  const std::string& line() const { return line_; }

 private:
  std::string line_;
};

// Rank 0 learns every rank's outcome (host, message) of one step; the others learn whether
// any failed. Throws FailedOnRanks on every rank when one did.
void agree_on_failure(const Link& link, const std::string& error);

// Runs `step` on every rank, then agrees on its outcome (a rank that failed holds its message).
template <class Step> void on_every_rank(const Link& link, Step&& step) {
  std::string error;
  try {
    std::forward<Step>(step)();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "failed without a message";
  }
  agree_on_failure(link, error);
}

} // namespace shardq
