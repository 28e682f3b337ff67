#include "pipeline/io/config.h"

#include <fmt/format.h>

#include "pipeline/io/atomic_file.h"
#include "pipeline/io/io_error.h"
#include "pipeline/io/strict_json.h"

namespace shardq::io {

nlohmann::ordered_json read_json_object(const std::filesystem::path& path) {
  const std::string label = path.string();
  const std::string text = read_file_bounded(path, kMaxJsonFileBytes);
  nlohmann::ordered_json json = parse_json_strict(text, label, "content");
  if (!json.is_object()) throw IoError(fmt::format("{}: content is {}, not a JSON object", label, json.type_name()));
  return json;
}

namespace {

std::string json_file_text(const std::filesystem::path& path, const nlohmann::ordered_json& json) {
  try {
    return json.dump(2) + "\n";
  } catch (const nlohmann::ordered_json::type_error& e) {
    throw IoError(fmt::format("{}: cannot serialize: {}", path.string(), e.what()));
  }
}

} // namespace

void write_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& json) {
  write_file_atomic(path, json_file_text(path, json));
}

void stage_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& json) {
  stage_file(path, json_file_text(path, json));
}

} // namespace shardq::io
