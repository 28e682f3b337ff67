#include "pipeline/test_hooks.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace shardq {

void crash_point(const char* event) {
  static const char* spec = std::getenv("SHARDQ_CRASH_AT");
  if (!spec) return;
  static std::mutex mutex;
  static std::map<std::string, int> seen;
  const std::string text(spec);
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || text.substr(0, colon) != event) return;
  std::lock_guard lock(mutex);
  if (++seen[event] == std::atoi(text.c_str() + colon + 1)) kill(getpid(), SIGKILL);
}

namespace {

// Sleeps `times` x the milliseconds `delay` holds (the environment variable's value), if set.
void sleep_for_delay(const char* delay, size_t times) {
  if (delay) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)) * times);
}

} // namespace

void test_chunk_delay() {
  static const char* delay = std::getenv("SHARDQ_TEST_CHUNK_DELAY_MS");
  sleep_for_delay(delay, 1);
}

void test_write_delay(size_t chunks) {
  static const char* delay = std::getenv("SHARDQ_TEST_WRITE_DELAY_MS");
  sleep_for_delay(delay, chunks);
}

uint64_t test_limit(const char* variable, uint64_t limit) {
  const char* value = std::getenv(variable);
  const uint64_t set = value ? std::strtoull(value, nullptr, 10) : 0;
  return set > 0 ? set : limit; // 0 (or no number) would stop every queue for good
}

bool test_crossing_request() {
  static const bool crossing = std::getenv("SHARDQ_TEST_CROSSING_REQUEST") != nullptr;
  return crossing;
}

} // namespace shardq
