// Finds an element of a list by its name: an open-addressing table of positions in the
// list, probed linearly. It holds no pointers or views, only positions, so a copy of its
// owner (the list with its index) stays valid; and a lookup touches one slot array and the
// names compared, not a tree or chain of nodes (the plan of a 100K-tensor model looks up
// every tensor a few times).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace shardq {

class NameIndex {
 public:
  // Indexes positions 0..count-1 of a list whose names `name_of(i)` gives; a name that
  // appears again keeps its first position. Returns the positions whose name was taken.
  template <class NameOf> std::vector<size_t> build(size_t count, NameOf name_of) {
    if (count >= UINT32_MAX) throw std::length_error("NameIndex: more than 2^32 - 2 names");
    std::vector<size_t> repeated;
    size_t capacity = 16;
    while (capacity < 2 * count) capacity *= 2;
    slots_.assign(capacity, 0);
    for (size_t i = 0; i < count; ++i) {
      const std::string_view name = name_of(i);
      size_t slot = first_slot(name);
      for (; slots_[slot] != 0; slot = (slot + 1) & (slots_.size() - 1)) {
        if (name_of(slots_[slot] - 1) == name) break;
      }
      if (slots_[slot] != 0) {
        repeated.push_back(i);
        continue;
      }
      slots_[slot] = uint32_t(i + 1);
    }
    return repeated;
  }

  // The position of `name`, or nullopt; `name_of` as given to build.
  template <class NameOf> std::optional<size_t> find(std::string_view name, NameOf name_of) const {
    if (slots_.empty()) return std::nullopt;
    for (size_t slot = first_slot(name); slots_[slot] != 0; slot = (slot + 1) & (slots_.size() - 1)) {
      if (name_of(slots_[slot] - 1) == name) return size_t(slots_[slot] - 1);
    }
    return std::nullopt;
  }

 private:
  size_t first_slot(std::string_view name) const { return std::hash<std::string_view>{}(name) & (slots_.size() - 1); }
  std::vector<uint32_t> slots_; // position + 1; 0: empty. A power of two, at least twice the count.
};

} // namespace shardq
