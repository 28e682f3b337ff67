// SIGTERM / SIGINT / SIGUSR1: the first asks every rank to stop taking work, flush the
// checkpoint and exit 75; a second one exits at once (the checkpoint on disk is always
// a complete generation, so it still reads back).
#pragma once

namespace shardq {

void install_stop_signals();
bool stop_requested();
int stop_signal(); // the signal number that asked to stop (0 if none)

// Fault injection for tests (SHARDQ_CRASH_AT=event:n): the n-th time `event` is passed
// the process kills itself with SIGKILL, as a power cut would.
void crash_point(const char* event);

// For tests that must interrupt a run mid-way whatever the machine's speed:
// SHARDQ_TEST_CHUNK_DELAY_MS=n makes every quantized chunk take n ms longer.
void test_chunk_delay();

} // namespace shardq
