#include "pipeline/io/strict_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <unordered_set>
#include <vector>

#include "pipeline/io/io_error.h"
#include "pipeline/io/plain_json.h"

namespace shardq::io {
namespace {

using Json = nlohmann::ordered_json;

// nlohmann's SAX events built into an ordered_json as its own DOM parser would, except that
// object members are appended in O(1) and checked against a hash set per open object.
// Members collect in a vector of movable pairs and move into the object when it closes:
// ordered_map's pairs have a const key, so growing it in place would copy every member.
class StrictDomBuilder {
 public:
  StrictDomBuilder(const std::string& label, std::string_view what) : label_(label), what_(what) {}

  Json take_root() { return std::move(root_); }

  bool null() { return add(nullptr); }
  bool boolean(bool value) { return add(value); }
  bool number_integer(Json::number_integer_t value) { return add(value); }
  bool number_unsigned(Json::number_unsigned_t value) { return add(value); }
  bool number_float(Json::number_float_t value, const std::string&) { return add(value); }
  bool string(Json::string_t& value) { return add(std::move(value)); }
  bool binary(Json::binary_t& value) { return add(Json::binary(std::move(value))); }

  bool start_object(std::size_t) {
    open_.emplace_back().is_object = true;
    return true;
  }
  bool key(Json::string_t& key) {
    OpenContainer& object = open_.back();
    if (!object.keys.insert(key).second) throw IoError(fmt::format("{}: {}: duplicate key '{}'", label_, what_, key));
    object.members.emplace_back(std::move(key), nullptr);
    return true;
  }
  bool end_object() {
    OpenContainer closed = std::move(open_.back());
    open_.pop_back();
    Json object = Json::object();
    auto& members = object.get_ref<Json::object_t&>();
    members.reserve(closed.members.size());
    for (auto& [key, value] : closed.members) append_new_key(object, std::move(key), std::move(value));
    return add(std::move(object));
  }
  bool start_array(std::size_t) {
    open_.emplace_back().array = Json::array();
    return true;
  }
  bool end_array() {
    Json array = std::move(open_.back().array);
    open_.pop_back();
    return add(std::move(array));
  }

  // The library's own exception (parse_error, out_of_range), as its DOM parser throws it.
  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& error) {
    throw error;
  }

 private:
  struct OpenContainer {
    bool is_object = false;
    Json array;                                           // when an array
    std::vector<std::pair<std::string, Json>> members;    // when an object: the last one's value comes next
    std::unordered_set<std::string> keys;                 // when an object
  };

  // Puts a finished value into the innermost open container, or makes it the root.
  bool add(Json value) {
    if (open_.empty()) {
      root_ = std::move(value);
    } else if (open_.back().is_object) {
      open_.back().members.back().second = std::move(value);
    } else {
      open_.back().array.push_back(std::move(value));
    }
    return true;
  }

  const std::string& label_;
  std::string_view what_;
  Json root_;
  std::vector<OpenContainer> open_; // outermost first
};

} // namespace

nlohmann::ordered_json parse_json_strict(std::string_view text, const std::string& label, std::string_view what) {
  // nlohmann's lexer reads a NUL as the end of the input and would drop what follows it
  // (a header's later tensors); a raw NUL is never JSON.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw IoError(fmt::format("{}: {} is not valid JSON: a NUL byte at offset {}", label, what, nul));
  }
  StrictDomBuilder builder(label, what);
  try {
    Json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const Json::parse_error& e) {
    throw IoError(fmt::format("{}: {} is not valid JSON: {}", label, what, e.what()));
  } catch (const Json::out_of_range& e) { // a number too large for a double (1e999)
    throw IoError(fmt::format("{}: {} has a number out of range: {}", label, what, e.what()));
  }
  return builder.take_root();
}

void append_json_string(std::string& out, std::string_view text) {
  if (plain_json_run(text) != text.size()) {
    out += Json(std::string(text)).dump();
    return;
  }
  out += '"';
  out += text;
  out += '"';
}

void append_decimal(std::string& out, uint64_t value) {
  char digits[20];
  out.append(digits, std::to_chars(digits, digits + sizeof digits, value).ptr);
}

void append_new_key(nlohmann::ordered_json& object, std::string key, nlohmann::ordered_json value) {
  // ordered_map is a vector of pairs: its own emplace_back skips the key search.
  object.get_ref<nlohmann::ordered_json::object_t&>().emplace_back(std::move(key), std::move(value));
}

} // namespace shardq::io
