// JSON from untrusted files: parsed with nlohmann (which rejects non-UTF-8 strings) and
// additionally refusing duplicate keys, which nlohmann would silently collapse.
#pragma once

#include <nlohmann/json.hpp>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardq::io {

// Parses text as JSON, keeping key order; throws IoError "LABEL: WHAT: reason" on a syntax
// error, invalid UTF-8 or a key repeated within one object. Linear in the text: an index
// or header of 100K keys parses in well under a second.
nlohmann::ordered_json parse_json_strict(std::string_view text, const std::string& label, std::string_view what);

// Appends TEXT as a JSON string literal, byte for byte what nlohmann's dump() writes for
// it (throwing its type_error on invalid UTF-8, `out` then holding what came before).
// Plain printable ASCII, which is nearly every tensor and file name, is quoted without
// building a JSON value.
void append_json_string(std::string& out, std::string_view text);
// Appends VALUE in decimal (as dump() writes an unsigned number), without a formatter.
void append_decimal(std::string& out, uint64_t value);

// Adds `key: value` at the end of an ordered object in O(1). ordered_json's operator[] and
// emplace first search the keys linearly, so filling a 100K-key object through them is
// quadratic. The caller guarantees the key is not there yet.
void append_new_key(nlohmann::ordered_json& object, std::string key, nlohmann::ordered_json value);

} // namespace shardq::io
