#pragma once

#include <stdexcept>
#include <string>

namespace shardq::io {

// Every failure of the file layer: the message names the file (and tensor, row) and
// what was expected.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

} // namespace shardq::io
