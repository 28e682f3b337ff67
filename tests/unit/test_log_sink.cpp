#include "pipeline/log_sink.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace shardq {
namespace {

std::string contents(FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string text;
  for (int c; (c = std::fgetc(file)) != EOF;) text.push_back(char(c));
  return text;
}

// The bar is left on the line (no newline); the next log line must not continue it.
TEST(LogSink, ALogLineClearsTheProgressBarsLineFirst) {
  FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  auto logger = make_stderr_logger(file);
  logger->set_pattern("[%l] %v");
  std::fputs("\r[###       ]  30.0%", file);
  mark_bar_drawn();
  logger->warn("source tensor x: NaN");
  logger->info("without a bar");
  EXPECT_EQ(contents(file), "\r[###       ]  30.0%\r\033[K[warning] source tensor x: NaN\n[info] without a bar\n");
  EXPECT_FALSE(unmark_bar_drawn()); // the bar's line is gone: Progress::finish adds no empty line
  std::fclose(file);
}

TEST(LogSink, NoBarNoClearing) {
  FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  auto logger = make_stderr_logger(file);
  logger->set_pattern("%v");
  mark_bar_drawn();
  EXPECT_TRUE(unmark_bar_drawn()); // Progress::finish ends the bar's line
  logger->error("one line");
  EXPECT_EQ(contents(file), "one line\n");
  std::fclose(file);
}

} // namespace
} // namespace shardq
