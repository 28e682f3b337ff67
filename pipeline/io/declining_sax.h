// The base of the DOM-free JSON readers (a safetensors header, the shard index): every
// nlohmann SAX event not overridden declines (returns false, which stops the parse), and a
// syntax error declines too, so the caller takes its strict DOM path, which accepts or
// refuses the text with the precise message.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace shardq::io {

struct DecliningSax {
  using Json = nlohmann::json;
  bool null() { return false; }
  bool boolean(bool) { return false; }
  bool number_integer(Json::number_integer_t) { return false; }
  bool number_unsigned(Json::number_unsigned_t) { return false; }
  bool number_float(Json::number_float_t, const Json::string_t&) { return false; }
  bool string(Json::string_t&) { return false; }
  bool binary(Json::binary_t&) { return false; }
  bool start_object(std::size_t) { return false; }
  bool end_object() { return false; }
  bool start_array(std::size_t) { return false; }
  bool end_array() { return false; }
  bool key(Json::string_t&) { return false; }
  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception&) {
    return false;
  }
};

// Whether `events` (a DecliningSax) took the whole text without declining.
template <class Events>
bool sax_accepts(std::string_view text, Events& events) {
  try {
    return nlohmann::json::sax_parse(text.begin(), text.end(), &events);
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

} // namespace shardq::io
