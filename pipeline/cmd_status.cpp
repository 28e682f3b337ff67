#include <stdexcept>

#include "pipeline/commands.h"

namespace shardq {

int cmd_status(const StatusArgs&) { throw std::runtime_error("shardq status: not built yet"); }

} // namespace shardq
