// Log lines and rank 0's progress bar share stderr. On a terminal the bar stays on the
// current line (redrawn with '\r'), so a log line written while it is up would continue
// the bar's line: the logger's sink clears that line first, and the bar is drawn again
// below it at its next update.
#pragma once

#include <spdlog/logger.h>

#include <cstdio>
#include <memory>

namespace shardq {

// Progress marks the bar drawn after drawing it; at its end it ends the bar's line only if
// the mark was still there (a log line since has cleared the bar and ended its own line).
void mark_bar_drawn();
bool unmark_bar_drawn(); // whether it was marked

// The process's logger: every level to `file` (stderr), coloured on a terminal.
std::shared_ptr<spdlog::logger> make_stderr_logger(FILE* file = stderr);

} // namespace shardq
