#include <stdexcept>

#include "pipeline/commands.h"

namespace shardq {

int cmd_inspect(const InspectArgs&) { throw std::runtime_error("shardq inspect: not built yet"); }

} // namespace shardq
