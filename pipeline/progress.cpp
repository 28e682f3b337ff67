#include "pipeline/progress.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>

#include "pipeline/log_sink.h"

namespace shardq {

Progress::Progress(uint64_t total_rows, uint64_t bytes_per_row, int ranks)
    : total_rows_(total_rows), bytes_per_row_(bytes_per_row), rank_rows_(size_t(ranks), 0), tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()), last_print_(start_) {}

void Progress::set_done(uint64_t rows) { skipped_rows_ = rows; }

void Progress::add(uint64_t rows, int rank) {
  rows_ += rows;
  if (rank >= 0 && size_t(rank) < rank_rows_.size()) rank_rows_[size_t(rank)] += rows;
}

void Progress::maybe_print(const std::string& stage, bool force) {
  const auto now = std::chrono::steady_clock::now();
  const double since_print = std::chrono::duration<double>(now - last_print_).count();
  if (!force && since_print < (tty_ ? 0.5 : 10.0)) return;
  last_print_ = now;
  const double seconds = std::max(1e-9, std::chrono::duration<double>(now - start_).count());
  const uint64_t done = skipped_rows_ + rows_;
  const double rate = double(rows_) / seconds;
  const double eta = rate > 0 ? double(total_rows_ - std::min(done, total_rows_)) / rate : 0.0;
  const double fraction = total_rows_ ? double(done) / double(total_rows_) : 1.0;
  const double gbps = rate * double(bytes_per_row_) / 1e9;
  std::string per_rank;
  for (size_t r = 0; r < rank_rows_.size(); ++r) {
    per_rank += fmt::format("{}{:.3g}", r ? " " : "", double(rank_rows_[r]) / seconds);
  }
  if (tty_) {
    const int width = 30, filled = int(fraction * width);
    std::fprintf(stderr, "\r[%-*s] %5.1f%% %-9s %.3g Mrows/s %.2f GB/s ETA %.0fs (rows/s per rank: %s) ", width,
                 std::string(size_t(filled), '#').c_str(), 100.0 * fraction, stage.c_str(), rate / 1e6, gbps, eta,
                 per_rank.c_str());
    std::fflush(stderr);
    mark_bar_drawn();
  } else {
    spdlog::info("{}: {}/{} rows ({:.1f}%), {:.3g} rows/s, {:.2f} GB/s, ETA {:.0f}s; rows/s per rank: {}", stage, done,
                 total_rows_, 100.0 * fraction, rate, gbps, eta, per_rank);
  }
}

void Progress::finish() {
  if (tty_ && unmark_bar_drawn()) std::fprintf(stderr, "\n");
}

} // namespace shardq
