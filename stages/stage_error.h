#pragma once

#include <stdexcept>

namespace shardq {

// A stage found bad data or could not do its step; the message names the tensor, the row
// (and column) and what was expected.
class StageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

} // namespace shardq
