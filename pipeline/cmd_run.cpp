#include <stdexcept>

#include "pipeline/commands.h"

namespace shardq {

int cmd_run(const RunArgs&) { throw std::runtime_error("shardq run: not built yet"); }

} // namespace shardq
