#include <mpi.h>

#include <cstdio>
#include <exception>

#include "pipeline/commands.h"
#include "pipeline/run.h"
#include "pipeline/signals.h"

namespace shardq {

// MPI lives only inside `run`: the other commands are plain programs. Any error on any
// rank ends the whole job (MPI_Abort), so a failing rank never leaves the others hanging.
int cmd_run(const RunArgs& args) {
  int provided = 0;
  {
    const StopSignalsHeld held; // a stop during MPI_Init reaches our handler after it
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  }
  int code = kExitError;
  try {
    code = run_job(args);
  } catch (const std::exception& e) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::fprintf(stderr, "shardq: error: %s\n", e.what());
    std::fflush(stderr);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, kExitError);
    MPI_Finalize();
    return kExitError;
  }
  MPI_Finalize();
  return code;
}

} // namespace shardq
