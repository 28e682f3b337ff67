#include "pipeline/checkpoint_digest.h"

#include <xxhash.h>

#include <array>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

namespace shardq {
namespace {

// Feeds fixed-width little-endian fields and length-prefixed strings to xxh3-64,
// buffered so thousands of small fields cost one pass.
class CanonicalHash {
 public:
  static_assert(std::endian::native == std::endian::little, "the canonical form is the native little-endian one");
  CanonicalHash() : state_(XXH3_createState()) { XXH3_64bits_reset(state_); }
  ~CanonicalHash() { XXH3_freeState(state_); }
  CanonicalHash(const CanonicalHash&) = delete;
  CanonicalHash& operator=(const CanonicalHash&) = delete;

  template <class T> void value(T v) {
    static_assert(sizeof v <= kBuffer);
    if (used_ + sizeof v > kBuffer) flush();
    std::memcpy(buffer_.data() + used_, &v, sizeof v); // a fixed size: one store
    used_ += sizeof v;
  }
  void text(const std::string& s) {
    value<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void doubles(const std::vector<double>& v) {
    value<uint64_t>(v.size());
    flush();
    XXH3_64bits_update(state_, v.data(), v.size() * sizeof(double));
  }
  uint64_t digest() {
    flush();
    return XXH3_64bits_digest(state_);
  }

 private:
  void bytes(const void* p, size_t n) {
    if (used_ + n > kBuffer) flush();
    if (n > kBuffer) {
      XXH3_64bits_update(state_, p, n);
      return;
    }
    std::memcpy(buffer_.data() + used_, p, n);
    used_ += n;
  }
  void flush() {
    XXH3_64bits_update(state_, buffer_.data(), used_);
    used_ = 0;
  }
  static constexpr size_t kBuffer = 1 << 16;
  XXH3_state_t* state_;
  std::array<char, kBuffer> buffer_;
  size_t used_ = 0;
};

void hash_task(CanonicalHash& h, const TaskRecord& t) {
  h.text(t.name);
  h.value(t.rows);
  h.value(t.rows_per_chunk);
  h.value(t.stacked_tensors);
  h.value<uint64_t>(t.reductions.size());
  for (const auto& r : t.reductions) {
    h.value(r.done);
    h.value(r.value);
  }
  h.value<uint64_t>(t.chunks.size());
  for (const auto& c : t.chunks) {
    h.value(c.state);
    h.value(c.checksum);
    h.value(c.seconds);
    for_each_stat([&](const char*, const auto& field) { for_each_word(field, [&](uint64_t w) { h.value(w); }); }, c.stats);
  }
}

} // namespace

uint64_t blobs_digest(const std::vector<Blob>& blobs) {
  CanonicalHash h;
  h.text("shardq-blobs");
  h.value<uint64_t>(blobs.size());
  for (const auto& b : blobs) {
    h.text(b.name);
    h.value<uint64_t>(b.shape.size());
    for (uint64_t dim : b.shape) h.value(dim);
    h.doubles(b.values);
  }
  return h.digest();
}

uint64_t checksum_with_blobs(const CheckpointState& state, uint64_t blobs_digest_value) {
  CanonicalHash h;
  h.text("shardq-checkpoint");
  h.value(kCheckpointFormatVersion);
  h.value(state.generation);
  h.value(state.elapsed_seconds);
  h.value(state.updated_unix);
  h.value<uint64_t>(state.fingerprint.size());
  for (const auto& [field, value] : state.fingerprint) {
    h.text(field);
    h.text(value);
  }
  h.value<uint64_t>(state.tasks.size());
  for (const auto& t : state.tasks) hash_task(h, t);
  h.value<uint64_t>(state.blobs.size());
  h.value(blobs_digest_value);
  h.value<uint64_t>(state.finished.size());
  for (const auto& s : state.finished) h.text(s);
  return h.digest();
}

uint64_t checkpoint_checksum(const CheckpointState& state) {
  return checksum_with_blobs(state, blobs_digest(state.blobs));
}

} // namespace shardq
