// Many small transfers that lie back to back (or nearly, for reads) in a file, grouped so
// that each stretch is one vectored call: a batch of tiny tensors costs one preadv or
// pwritev, not one call each.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace shardq::io {

// One transfer: `bytes` at `offset` of `file` (any key that orders files).
template <class File, class Byte>
struct Transfer {
  File file;
  uint64_t offset = 0;
  std::span<Byte> bytes;
};

// Sorts the transfers by file and offset, then calls run(file, offset, pieces) once for
// each stretch of them that lies back to back in one file, or at most gap.size() bytes
// apart: the pieces between go to `gap` (scratch, its bytes meaningless; every gap of a
// run reuses it). A read may take a gap (tasks that interleave in a shard, such as a task
// of every expert's w1 and one of every w2, then read a layer in one call, for a few bytes
// more); a write may not (it would overwrite what lies between): an empty gap joins only
// back-to-back stretches.
template <class File, class Byte, class Run>
void for_each_near_run(std::vector<Transfer<File, Byte>>& transfers, std::span<Byte> gap, Run run) {
  std::sort(transfers.begin(), transfers.end(), [](const auto& a, const auto& b) {
    return a.file != b.file ? std::less<File>()(a.file, b.file) : a.offset < b.offset;
  });
  std::vector<std::span<Byte>> pieces;
  for (size_t begin = 0, end = 0; begin < transfers.size(); begin = end) {
    pieces.assign(1, transfers[begin].bytes);
    uint64_t next = transfers[begin].offset + transfers[begin].bytes.size();
    for (end = begin + 1; end < transfers.size() && transfers[end].file == transfers[begin].file &&
                          transfers[end].offset >= next && transfers[end].offset - next <= gap.size();
         ++end) {
      if (transfers[end].offset > next) pieces.push_back(gap.first(transfers[end].offset - next));
      pieces.push_back(transfers[end].bytes);
      next = transfers[end].offset + transfers[end].bytes.size();
    }
    run(transfers[begin].file, transfers[begin].offset, std::span<const std::span<Byte>>(pieces));
  }
}

// for_each_near_run of back-to-back stretches only (writes).
template <class File, class Byte, class Run>
void for_each_contiguous_run(std::vector<Transfer<File, Byte>>& transfers, Run run) {
  for_each_near_run(transfers, std::span<Byte>(), run);
}

} // namespace shardq::io
