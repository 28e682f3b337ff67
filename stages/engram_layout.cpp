#include "stages/engram_layout.h"

#include <algorithm>
#include <set>
#include <string>

#include "stages/stage_error.h"

namespace shardq {

namespace {

__extension__ typedef unsigned __int128 U128; // GCC/Clang: the exact 128-bit product

uint64_t mul_mod(uint64_t a, uint64_t b, uint64_t m) {
  return uint64_t(U128(a) * b % m);
}

uint64_t pow_mod(uint64_t base, uint64_t exponent, uint64_t m) {
  uint64_t result = 1;
  base %= m;
  for (; exponent > 0; exponent >>= 1) {
    if (exponent & 1) result = mul_mod(result, base, m);
    base = mul_mod(base, base, m);
  }
  return result;
}

// One Miller-Rabin round: false when `base` proves n (odd, > 2) composite.
bool passes_round(uint64_t n, uint64_t base, uint64_t odd_part, int twos) {
  base %= n;
  if (base == 0) return true;
  uint64_t x = pow_mod(base, odd_part, n);
  if (x == 1 || x == n - 1) return true;
  for (int i = 1; i < twos; ++i) {
    x = mul_mod(x, x, n);
    if (x == n - 1) return true;
  }
  return false;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw StageError("engram config: " + what);
}

} // namespace

bool is_prime_u64(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t p : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}) {
    if (n % p == 0) return n == p;
  }
  uint64_t odd_part = n - 1;
  int twos = 0;
  while ((odd_part & 1) == 0) {
    odd_part >>= 1;
    ++twos;
  }
  // Jim Sinclair's seven bases decide primality for every n < 2^64.
  for (uint64_t base : {2ull, 325ull, 9375ull, 28178ull, 450775ull, 9780504ull, 1795265022ull}) {
    if (!passes_round(n, base, odd_part, twos)) return false;
  }
  return true;
}

EngramLayout::EngramLayout(EngramConfig config) : config_(std::move(config)) {
  require(!config_.layer_ids.empty(), "engram_layer_ids is empty");
  require(config_.max_ngram_size >= 2, "engram_max_ngram_size must be >= 2, got " +
                                           std::to_string(config_.max_ngram_size));
  require(config_.n_heads >= 1, "engram_n_heads must be >= 1, got " + std::to_string(config_.n_heads));
  require(config_.vocab_size >= 1, "engram_vocab_size must be >= 1");
  require(config_.num_embeddings.empty() || config_.num_embeddings.size() == config_.layer_ids.size(),
          "engram_num_embeddings has " + std::to_string(config_.num_embeddings.size()) + " entries, expected " +
              std::to_string(config_.layer_ids.size()) + " (one per engram_layer_ids entry)");
  // 'seen' is shared across layers in order, so the second layer's primes continue past
  // the first layer's (docs/formats.md "Prime layout").
  std::set<uint64_t> seen;
  for (int layer : config_.layer_ids) {
    require(std::count(config_.layer_ids.begin(), config_.layer_ids.end(), layer) == 1,
            "engram_layer_ids lists layer " + std::to_string(layer) + " twice");
    Table table;
    table.bounds.push_back(0);
    for (int n = 2; n <= config_.max_ngram_size; ++n) {
      uint64_t cur = config_.vocab_size - 1;
      for (int h = 0; h < config_.n_heads; ++h) {
        do {
          ++cur;
        } while (!is_prime_u64(cur) || seen.count(cur) != 0);
        seen.insert(cur);
        table.primes.push_back(cur);
        table.bounds.push_back(table.bounds.back() + cur);
      }
    }
    tables_.push_back(std::move(table));
  }
}

bool EngramLayout::has_layer(int layer) const {
  return std::find(config_.layer_ids.begin(), config_.layer_ids.end(), layer) != config_.layer_ids.end();
}

size_t EngramLayout::index_of(int layer) const {
  const auto it = std::find(config_.layer_ids.begin(), config_.layer_ids.end(), layer);
  if (it == config_.layer_ids.end()) {
    throw StageError("engram layout: layer " + std::to_string(layer) + " is not in engram_layer_ids");
  }
  return size_t(it - config_.layer_ids.begin());
}

std::span<const uint64_t> EngramLayout::primes(int layer) const { return tables_[index_of(layer)].primes; }

std::span<const uint64_t> EngramLayout::offsets(int layer) const {
  const auto& bounds = tables_[index_of(layer)].bounds;
  return std::span<const uint64_t>(bounds).first(bounds.size() - 1);
}

uint64_t EngramLayout::table_rows(int layer) const { return tables_[index_of(layer)].bounds.back(); }

int EngramLayout::hash_column(int layer, uint64_t row) const {
  const auto& bounds = tables_[index_of(layer)].bounds;
  if (row >= bounds.back()) {
    throw StageError("engram layout: layer " + std::to_string(layer) + " row " + std::to_string(row) +
                     " is past the table's " + std::to_string(bounds.back()) + " rows");
  }
  // The first bound greater than row closes row's column.
  const auto closing = std::upper_bound(bounds.begin(), bounds.end(), row);
  return int(closing - bounds.begin()) - 1;
}

void EngramLayout::check(int layer, uint64_t tensor_rows) const {
  const size_t index = index_of(layer);
  const uint64_t computed = tables_[index].bounds.back();
  const std::string name = "layers." + std::to_string(layer) + ".engram.embed.weight";
  if (config_.num_embeddings.empty()) {
    throw StageError(name + ": config has no engram_num_embeddings to check the prime layout against");
  }
  if (config_.num_embeddings[index] != computed) {
    throw StageError(name + ": engram_num_embeddings says " + std::to_string(config_.num_embeddings[index]) +
                     " rows but the prime layout gives " + std::to_string(computed));
  }
  if (tensor_rows != computed) {
    throw StageError(name + ": the tensor has " + std::to_string(tensor_rows) +
                     " rows but the prime layout gives " + std::to_string(computed));
  }
}

} // namespace shardq
