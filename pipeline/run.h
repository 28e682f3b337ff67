// `shardq run` on every rank: plan, resume or start the checkpoint, then the message
// loop that feeds this rank's worker and (on rank 0) the coordinator.
#pragma once

#include "pipeline/commands.h"

namespace shardq {

// Called between MPI_Init and MPI_Finalize; returns the exit code of this rank.
int run_job(const RunArgs& args);

} // namespace shardq
