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

void write_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& json) {
  std::string text;
  try {
    text = json.dump(2) + "\n";
  } catch (const nlohmann::ordered_json::type_error& e) {
    throw IoError(fmt::format("{}: cannot serialize: {}", path.string(), e.what()));
  }
  write_file_atomic(path, text);
}

} // namespace shardq::io
