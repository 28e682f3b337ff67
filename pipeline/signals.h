// SIGTERM / SIGINT / SIGUSR1: the first asks every rank to stop taking work, flush the
// checkpoint and exit 75; one that comes 1 s or more after it exits at once, saying so
// (the checkpoint on disk is always a complete generation, so it still reads back). Those
// within the second are the same stop delivered twice (`timeout`, a launcher).
#pragma once

#include <sys/types.h>

#include <filesystem>

namespace shardq {

// Installed for `run` before main (main.cpp) and so before MPI_Init, which leaves them in
// place (Open MPI 4.1): a stop during start-up ends in 75 too, the run loop flushing and
// stopping as soon as it starts.
void install_stop_signals();
bool stop_requested();

// Holds the stop signals pending while a library starts (MPI_Init: under load a stop that
// arrived during it still ended the process with 143): on release ours are installed again
// and a signal that came meanwhile reaches them, so it ends in 75 like any other. Threads
// the library starts meanwhile keep them blocked and never take them.
// hold_stop_signals() alone starts the hold before main (shared libraries' constructors
// run after .preinit_array and may reset the handlers); the hold ends when a
// StopSignalsHeld ends.
void hold_stop_signals();
class StopSignalsHeld {
 public:
  StopSignalsHeld();
  ~StopSignalsHeld();
  StopSignalsHeld(const StopSignalsHeld&) = delete;
  StopSignalsHeld& operator=(const StopSignalsHeld&) = delete;
};
int stop_signal(); // the signal number that asked to stop (0 if none)

// The run's lock files (run_lock.h, at most kFastExitFiles) that the second signal's
// immediate exit removes, each if `path` is still that file (device, inode): a requeued
// run elsewhere need not wait for them to go stale.
inline constexpr int kFastExitFiles = 2;
void remove_on_fast_exit(const std::filesystem::path& path, dev_t device, ino_t inode);
void forget_fast_exit_files();

} // namespace shardq
