#include <stdexcept>

#include "pipeline/commands.h"

namespace shardq {

int cmd_fixture(const FixtureArgs&) { throw std::runtime_error("shardq fixture: not built yet"); }

} // namespace shardq
