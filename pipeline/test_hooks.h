// Hooks the tests drive through the environment; inert unless the variable is set.
#pragma once

namespace shardq {

// Fault injection (SHARDQ_CRASH_AT=event:n): the n-th time `event` is passed the process
// kills itself with SIGKILL, as a power cut would.
void crash_point(const char* event);

// For tests that must interrupt a run mid-way whatever the machine's speed:
// SHARDQ_TEST_CHUNK_DELAY_MS=n makes every encoded chunk, and every finished chunk that
// --verify-done re-reads, take n ms longer.
void test_chunk_delay();

} // namespace shardq
