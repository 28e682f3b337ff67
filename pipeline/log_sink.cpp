#include "pipeline/log_sink.h"

#include <spdlog/sinks/ansicolor_sink.h>

#include <atomic>

namespace shardq {
namespace {

std::atomic<bool> g_bar_drawn{false};

class BarClearingSink final : public spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex> {
 public:
  explicit BarClearingSink(FILE* file) : ansicolor_sink(file, spdlog::color_mode::automatic), file_(file) {}

  void log(const spdlog::details::log_msg& message) override {
    if (unmark_bar_drawn()) std::fputs("\r\033[K", file_); // column 0, line erased
    ansicolor_sink::log(message);
  }

 private:
  FILE* file_;
};

} // namespace

void mark_bar_drawn() { g_bar_drawn = true; }

bool unmark_bar_drawn() { return g_bar_drawn.exchange(false); }

std::shared_ptr<spdlog::logger> make_stderr_logger(FILE* file) {
  return std::make_shared<spdlog::logger>("shardq", std::make_shared<BarClearingSink>(file));
}

} // namespace shardq
