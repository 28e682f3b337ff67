#include "pipeline/io/strict_json.h"

#include <fmt/format.h>

#include <set>
#include <vector>

#include "pipeline/io/io_error.h"

namespace shardq::io {

nlohmann::ordered_json parse_json_strict(std::string_view text, const std::string& label, std::string_view what) {
  using Json = nlohmann::ordered_json;
  // One set of seen keys per open object; arrays push nothing because keys only occur in objects.
  std::vector<std::set<std::string>> seen_keys;
  auto reject_duplicates = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) {
      seen_keys.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      seen_keys.pop_back();
    } else if (event == Json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen_keys.back().insert(key).second) {
        throw IoError(fmt::format("{}: {}: duplicate key '{}'", label, what, key));
      }
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), reject_duplicates);
  } catch (const Json::parse_error& e) {
    throw IoError(fmt::format("{}: {} is not valid JSON: {}", label, what, e.what()));
  } catch (const Json::out_of_range& e) { // a number too large for a double (1e999)
    throw IoError(fmt::format("{}: {} has a number out of range: {}", label, what, e.what()));
  }
}

} // namespace shardq::io
