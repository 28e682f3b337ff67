// How the checkpoint's files reach the disk (docs/checkpoint.md "Atomic saves"): whole
// files through PATH.tmp, fsync'd, renamed into place and the folder fsync'd, so a kill at
// any instant leaves the old file or the new one. Failures throw PipelineError naming the
// path (the run stops: a checkpoint that may not be on disk is no checkpoint).
#pragma once

#include <filesystem>
#include <functional>
#include <initializer_list>

namespace shardq {

// PATH followed by `suffix` (".prev", ".tmp", ...).
std::filesystem::path with_suffix(const std::filesystem::path& path, const char* suffix);

// Writes `path` whole through path.tmp: write(tmp), fsync, then before_rename() (the
// checkpoint keeps its previous generation there), the rename, and the folder's fsync.
// A failure before the rename removes the tmp file.
void replace_file(const std::filesystem::path& path, const std::function<void(const std::filesystem::path&)>& write,
                  const std::function<void()>& before_rename = [] {});

// Makes PATH.prev the current PATH while PATH stays in place: a hard link renamed over
// .prev. Where hard links are not supported, PATH itself moves to .prev (then, until the
// next rename, only .prev exists, which load_checkpoint accepts). Nothing when PATH is missing.
void keep_previous(const std::filesystem::path& path);

// Renames `from` to `to` and fsyncs the folder of `to`.
void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to);

// Removes those of `files` that exist and fsyncs their folder (all lie in one).
void remove_durably(std::initializer_list<std::filesystem::path> files);

} // namespace shardq
