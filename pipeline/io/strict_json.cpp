#include "pipeline/io/strict_json.h"

#include <fmt/format.h>

#include <unordered_set>
#include <vector>

#include "pipeline/io/io_error.h"

namespace shardq::io {
namespace {

using Json = nlohmann::ordered_json;

// nlohmann's SAX events built into an ordered_json as its own DOM parser would, except that
// keys are appended in O(1) and checked against a hash set per open object.
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
    open_.push_back(place(Json::object()));
    seen_keys_.emplace_back();
    return true;
  }
  bool key(Json::string_t& key) {
    if (!seen_keys_.back().insert(key).second) {
      throw IoError(fmt::format("{}: {}: duplicate key '{}'", label_, what_, key));
    }
    pending_key_ = std::move(key);
    return true;
  }
  bool end_object() {
    seen_keys_.pop_back();
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    open_.push_back(place(Json::array()));
    return true;
  }
  bool end_array() {
    open_.pop_back();
    return true;
  }

  // The library's own exception (parse_error, out_of_range), as its DOM parser throws it.
  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& error) {
    throw error;
  }

 private:
  bool add(Json value) {
    place(std::move(value));
    return true;
  }

  // Puts a value into the innermost open container (or makes it the root) and returns where
  // it now lies. Only the innermost container grows, so pointers to the open ones stay valid.
  Json* place(Json value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    append_new_key(parent, std::move(pending_key_), std::move(value));
    return &parent.get_ref<Json::object_t&>().back().second;
  }

  const std::string& label_;
  std::string_view what_;
  Json root_;
  std::vector<Json*> open_;                                 // containers not yet closed, outermost first
  std::vector<std::unordered_set<std::string>> seen_keys_; // one per open object
  std::string pending_key_;                                // the key of the next object member
};

} // namespace

nlohmann::ordered_json parse_json_strict(std::string_view text, const std::string& label, std::string_view what) {
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

void append_new_key(nlohmann::ordered_json& object, std::string key, nlohmann::ordered_json value) {
  // ordered_map is a vector of pairs: its own emplace_back skips the key search.
  object.get_ref<nlohmann::ordered_json::object_t&>().emplace_back(std::move(key), std::move(value));
}

} // namespace shardq::io
