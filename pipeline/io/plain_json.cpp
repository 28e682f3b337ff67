#include "pipeline/io/plain_json.h"

#include <bit>
#include <cstring>

namespace shardq::io {

void PlainJson::skip_whitespace() {
  while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\r' || text_[at_] == '\t')) ++at_;
}

bool PlainJson::next_is(char c) {
  skip_whitespace();
  return at_ < text_.size() && text_[at_] == c;
}

bool PlainJson::consume(char c) {
  if (!next_is(c)) return false;
  ++at_;
  return true;
}

size_t plain_json_run(std::string_view text) {
  // Per 64-bit word: a byte equal to '"' or '\\', below 0x20, or 0x7f and up. Each test may
  // also flag bytes after a flagged one (borrows and carries run up), never miss one, nor
  // flag one before the first true one: the lowest flagged byte (first in the text, the
  // word read little-endian) is where the run ends.
  static_assert(std::endian::native == std::endian::little);
  constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
  const auto has_zero_byte = [](uint64_t word) { return (word - kOnes) & ~word & kHigh; };
  size_t at = 0;
  for (; at + sizeof(uint64_t) <= text.size(); at += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, text.data() + at, sizeof word);
    const uint64_t special = has_zero_byte(word ^ (kOnes * '"')) | has_zero_byte(word ^ (kOnes * '\\')) |
                             ((word - kOnes * 0x20) & ~word & kHigh) | (((word + kOnes) | word) & kHigh);
    if (special != 0) return at + size_t(std::countr_zero(special)) / 8;
  }
  while (at < text.size() && plain_json_byte(text[at])) ++at;
  return at;
}

std::optional<std::string_view> PlainJson::string() {
  if (!consume('"')) return std::nullopt;
  const size_t begin = at_;
  at_ += plain_json_run(text_.substr(at_));
  // Escapes, controls and non-ASCII are the strict path's.
  if (at_ < text_.size() && text_[at_] == '"') return text_.substr(begin, at_++ - begin);
  at_ = begin - 1;
  return std::nullopt;
}

std::optional<uint64_t> PlainJson::number() {
  skip_whitespace();
  const size_t begin = at_;
  uint64_t value = 0;
  while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
    if (__builtin_mul_overflow(value, 10u, &value) || __builtin_add_overflow(value, uint64_t(text_[at_] - '0'), &value)) break;
    ++at_;
  }
  const size_t digits = at_ - begin;
  const bool ends = at_ == text_.size() || (text_[at_] != '.' && text_[at_] != 'e' && text_[at_] != 'E' && (text_[at_] < '0' || text_[at_] > '9'));
  if (digits == 0 || !ends || (digits > 1 && text_[begin] == '0')) {
    at_ = begin;
    return std::nullopt;
  }
  return value;
}

bool PlainJson::at_end() {
  skip_whitespace();
  return at_ == text_.size();
}

} // namespace shardq::io
