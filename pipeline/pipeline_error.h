#pragma once

#include <stdexcept>

namespace shardq {

// A failure of the pipeline layer (job, plan, ranks, checkpoint): the message names the
// file, tensor, row or job key and what was expected.
class PipelineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

} // namespace shardq
