#include "pipeline/io/plain_json.h"

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

std::optional<std::string_view> PlainJson::string() {
  if (!consume('"')) return std::nullopt;
  const size_t begin = at_;
  for (; at_ < text_.size(); ++at_) {
    const char c = text_[at_];
    if (c == '"') return text_.substr(begin, at_++ - begin);
    if (c < 0x20 || c > 0x7e || c == '\\') break; // escapes, controls and non-ASCII: the strict path's
  }
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
