// Hooks the tests drive through the environment; inert unless the variable is set.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardq {

// Fault injection (SHARDQ_CRASH_AT=event:n): the n-th time `event` is passed the process
// kills itself with SIGKILL, as a power cut would.
void crash_point(const char* event);

// For tests that must interrupt a run mid-way whatever the machine's speed:
// SHARDQ_TEST_CHUNK_DELAY_MS=n makes every encoded chunk, and every finished chunk that
// --verify-done re-reads, take n ms longer.
void test_chunk_delay();

// For tests of back-pressure, which must show a slow writer holding every rank's memory
// to its limits without a multi-GB run: SHARDQ_TEST_WRITE_DELAY_MS=n makes the writer
// take n ms longer per chunk it writes, and test_limit returns the value of `variable`
// (SHARDQ_TEST_MAX_QUEUED_BYTES, SHARDQ_TEST_MAX_UNSENT_BYTES) in place of `limit`, when it
// is a number above 0.
void test_write_delay(size_t chunks);
uint64_t test_limit(const char* variable, uint64_t limit);

// For the shutdown handshake's test: a message that crosses rank 0's stop on the wire is
// rare and timing-bound. SHARDQ_TEST_CROSSING_REQUEST=1 makes every rank but 0 send rank 0
// one more work request once it has handled the stop, which rank 0 sees as such a message.
bool test_crossing_request();

} // namespace shardq
