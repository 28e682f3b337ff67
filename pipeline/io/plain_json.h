// A reader of plain JSON: objects, arrays, unsigned integers and strings of printable
// ASCII without escapes, which is what nearly every safetensors header and shard index
// holds. Anything else (an escape, a byte outside printable ASCII in a string, a sign, a
// fraction, a literal, a leading zero, an integer past 64 bits, a syntax error) fails the
// read, and the caller takes its strict nlohmann DOM path, which accepts or refuses the
// text with the precise message. Everything accepted here is valid JSON read as the DOM
// reads it; strings are views into the text (no copy until the caller keeps one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace shardq::io {

// Whether a JSON string holds the byte as it is: printable ASCII other than '"' and '\\'.
constexpr bool plain_json_byte(char c) { return c >= 0x20 && c <= 0x7e && c != '"' && c != '\\'; }
// The length of the text's leading run of plain_json_bytes, eight bytes a step: every name
// of an index or header is read and written through it (100K names each way for a model of
// many tensors).
size_t plain_json_run(std::string_view text);

class PlainJson {
 public:
  explicit PlainJson(std::string_view text) : text_(text) {}

  // Each skips JSON whitespace first. Failures leave the reader where it was.
  bool consume(char c);      // the next character is c (taken)
  bool next_is(char c);      // the next character is c (not taken)
  std::optional<std::string_view> string();
  std::optional<uint64_t> number();
  bool at_end();             // nothing but whitespace left

  // Reads `{}` or `{"key": <value>, ...}`, calling member(key) after each key's colon;
  // member reads the value and returns false to fail the read.
  template <class Member>
  bool object(Member member) {
    return sequence('{', '}', [&] {
      const auto key = string();
      return key && consume(':') && member(*key);
    });
  }

  // Reads `[]` or `[n, ...]` of unsigned integers, calling add(n) for each.
  template <class Add>
  bool numbers(Add add) {
    return sequence('[', ']', [&] {
      const auto value = number();
      if (value) add(*value);
      return value.has_value();
    });
  }

 private:
  // open, then nothing or element()s separated by commas, then close.
  template <class Element>
  bool sequence(char open, char close, Element element) {
    if (!consume(open)) return false;
    if (consume(close)) return true;
    do {
      if (!element()) return false;
    } while (consume(','));
    return consume(close);
  }
  void skip_whitespace();
  std::string_view text_;
  size_t at_ = 0;
};

} // namespace shardq::io
