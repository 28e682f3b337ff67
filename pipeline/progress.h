// Rank 0's progress: a bar on a TTY, periodic log lines otherwise; both with each rank's
// rows/s since the start (a slow or idle rank shows).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace shardq {

class Progress {
 public:
  Progress(uint64_t total_rows, uint64_t bytes_per_row, int ranks);
  void set_done(uint64_t rows_done_before_start); // rows a resumed run skips
  void add(uint64_t rows, int rank);
  void maybe_print(const std::string& stage, bool force = false);
  void finish();
  const std::vector<uint64_t>& rank_rows() const { return rank_rows_; } // rows each rank computed this run

 private:
  uint64_t total_rows_, bytes_per_row_;
  uint64_t skipped_rows_ = 0, rows_ = 0;
  std::vector<uint64_t> rank_rows_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_print_;
};

} // namespace shardq
