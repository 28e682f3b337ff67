// The run checkpoint's save and load (checkpoint.h): a generation and its blob file put
// in place crash-atomically, read back with the fallback to .prev and the journal replayed.
// The file schema is checkpoint_schema.cpp, the checksums checkpoint_digest.cpp, the
// HDF5 calls checkpoint_hdf5.cpp, the fsyncs and renames checkpoint_durability.cpp.
#include "pipeline/checkpoint.h"

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "pipeline/checkpoint_durability.h"
#include "pipeline/checkpoint_hdf5.h"
#include "pipeline/checkpoint_journal.h"
#include "pipeline/checkpoint_schema.h"

namespace shardq {
namespace {

namespace fs = std::filesystem;

struct Attempt {
  std::optional<CheckpointState> state;
  std::string problem; // "missing" or what is wrong
};

Attempt try_read(const fs::path& path, const fs::path& checkpoint) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return {std::nullopt, path.string() + ": missing"};
  try {
    return {read_generation(path, checkpoint), ""};
  } catch (const VersionMismatch&) {
    throw;
  } catch (const PipelineError& e) {
    return {std::nullopt, e.what()};
  }
}

// Writes the blob file unless it already holds these blobs (the usual case: once written,
// every later save of the run finds it and skips ~25 MB per factor set).
void ensure_blobs_file(const fs::path& checkpoint, const std::vector<Blob>& blobs, uint64_t digest) {
  if (blobs.empty()) return;
  const fs::path file = blobs_file(checkpoint);
  if (stored_blobs_digest(file) == digest) return;
  replace_file(file, [&](const fs::path& tmp) { write_blob_file(tmp, blobs, digest); });
}

} // namespace

std::filesystem::path blobs_file(const std::filesystem::path& checkpoint) { return with_suffix(checkpoint, ".blobs"); }

void save_checkpoint(const fs::path& path, const CheckpointState& state) {
  save_checkpoint(path, state, blobs_digest(state.blobs));
}

void save_checkpoint(const fs::path& path, const CheckpointState& state, uint64_t blobs_digest_value) {
  hdf5::init();
  validate_for_save(path, state);
  ensure_blobs_file(path, state.blobs, blobs_digest_value);
  replace_file(
      path, [&](const fs::path& tmp) { write_generation(tmp, state, blobs_digest_value); },
      [&] { keep_previous(path); });
  reset_journal(path, state.generation); // the base holds everything: later saves append to it
}

void remove_checkpoint(const fs::path& path) { remove_durably({path, with_suffix(path, ".prev"), journal_file(path)}); }

void set_aside_unusable_newest(const fs::path& path) {
  if (!fs::exists(path)) return;
  rename_durably(path, with_suffix(path, ".corrupt"));
}

std::optional<LoadResult> load_checkpoint(const fs::path& path) {
  hdf5::init();
  const fs::path prev = with_suffix(path, ".prev");
  std::error_code ec;
  if (!fs::exists(path, ec) && !fs::exists(prev, ec)) return std::nullopt;
  Attempt newest = try_read(path, path);
  if (newest.state) {
    std::string note;
    replay_journal(path, *newest.state, note); // a journal for another base is ignored
    return LoadResult{std::move(*newest.state), false, std::move(note)};
  }
  Attempt previous = try_read(prev, path);
  if (previous.state) {
    std::string note = "newest generation unusable (" + newest.problem + "); using the previous one, " +
                       prev.string() + " (generation " + std::to_string(previous.state->generation) + ")";
    return LoadResult{std::move(*previous.state), true, std::move(note)};
  }
  throw PipelineError("checkpoint " + path.string() + " is corrupt (" + newest.problem + "; " + previous.problem +
                      "); use --fresh to start over");
}

namespace {

// Where two "k=v;k=v;..." field values (the job's keys) differ: the first key, in the
// checkpoint's order, whose value differs or that only one of them has; the whole values
// when they are not such lists.
std::string field_difference(const std::string& then, const std::string& now) {
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  const auto pairs = [](const std::string& text) -> std::optional<Pairs> {
    Pairs out;
    for (size_t begin = 0; begin <= text.size();) {
      const size_t end = std::min(text.find(';', begin), text.size());
      const std::string part = text.substr(begin, end - begin);
      const size_t eq = part.find('=');
      if (eq == std::string::npos) return std::nullopt;
      out.emplace_back(part.substr(0, eq), part.substr(eq + 1));
      begin = end + 1;
    }
    return out;
  };
  const auto value_of = [](const Pairs& list, const std::string& key) -> std::optional<std::string> {
    for (const auto& [k, v] : list)
      if (k == key) return v;
    return std::nullopt;
  };
  const auto a = pairs(then), b = pairs(now);
  if (a && b) {
    for (const auto& [key, value] : *a) {
      const auto other = value_of(*b, key);
      if (other != value) return "key '" + key + "' is " + value + " in the checkpoint but " + other.value_or("absent") + " now";
    }
    for (const auto& [key, value] : *b) {
      if (!value_of(*a, key)) return "key '" + key + "' is absent in the checkpoint but " + value + " now";
    }
  }
  return "is " + then + " in the checkpoint but " + now + " now";
}

// What a digest field stands for: its values alone are two hashes.
std::string_view field_meaning(std::string_view field) {
  if (field == "source_headers") return " (a digest of the source's shard headers: another or a changed source)";
  if (field == "source_sample") return " (a digest of sampled source bytes: another or a changed source)";
  return "";
}

} // namespace

std::string fingerprint_mismatch(const CheckpointState& stored,
                                 const std::vector<std::pair<std::string, std::string>>& current) {
  const auto value_in = [](const std::vector<std::pair<std::string, std::string>>& fields,
                           const std::string& name) -> std::optional<std::string> {
    for (const auto& [field, value] : fields)
      if (field == name) return value;
    return std::nullopt;
  };
  const std::string prefix = "checkpoint belongs to another job: field '";
  for (const auto& [field, now] : current) {
    const auto then = value_in(stored.fingerprint, field);
    if (!then) return prefix + field + "' is missing in the checkpoint but " + now + " now";
    if (*then != now) return prefix + field + "': " + field_difference(*then, now) + std::string(field_meaning(field));
  }
  for (const auto& [field, then] : stored.fingerprint)
    if (!value_in(current, field)) return prefix + field + "' is " + then + " in the checkpoint but missing now";
  return "";
}

} // namespace shardq
