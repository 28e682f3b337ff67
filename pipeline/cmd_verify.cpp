#include <stdexcept>

#include "pipeline/commands.h"

namespace shardq {

int cmd_verify(const VerifyArgs&) { throw std::runtime_error("shardq verify: not built yet"); }

} // namespace shardq
