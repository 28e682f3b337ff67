#include <stdexcept>

#include "pipeline/commands.h"

namespace shardq {

int cmd_study(const StudyArgs&) { throw std::runtime_error("shardq study: not built yet"); }

} // namespace shardq
