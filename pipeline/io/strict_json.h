// JSON from untrusted files: parsed with nlohmann (which rejects non-UTF-8 strings) and
// additionally refusing duplicate keys, which nlohmann would silently collapse.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace shardq::io {

// Parses text as JSON, keeping key order; throws IoError "LABEL: WHAT: reason" on a syntax
// error, invalid UTF-8 or a key repeated within one object.
nlohmann::ordered_json parse_json_strict(std::string_view text, const std::string& label, std::string_view what);

} // namespace shardq::io
