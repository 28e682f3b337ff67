#include <mpi.h>

#include <cstdio>
#include <exception>

#include "pipeline/commands.h"
#include "pipeline/link.h"
#include "pipeline/rank_failures.h"
#include "pipeline/run.h"
#include "pipeline/signals.h"

namespace shardq {

// MPI lives only inside `run`, and only when a launcher started the process: the other
// commands, and a run started by hand, are plain programs. A failure the ranks agreed on
// (FailedOnRanks) ends each of them cleanly; any other error on any rank ends the whole job
// (MPI_Abort), so a failing rank never leaves the others hanging.
int cmd_run(const RunArgs& args) {
  const bool mpi = launched_by_mpi();
  {
    const StopSignalsHeld held; // a stop during MPI_Init reaches our handler after it
    int provided = 0;
    if (mpi) MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  }
  int code = kExitError;
  try {
    code = run_job(args);
  } catch (const FailedOnRanks& e) { // every rank ends here, agreed: no abort needed
    if (!e.line().empty()) std::fprintf(stderr, "shardq: error: %s\n", e.line().c_str());
    if (mpi) MPI_Finalize();
    return kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardq: error: %s\n", e.what());
    std::fflush(stderr);
    int size = 1;
    if (mpi) MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, kExitError);
    if (mpi) MPI_Finalize();
    return kExitError;
  }
  if (mpi) MPI_Finalize();
  return code;
}

} // namespace shardq
