// The Engram prime layout (docs/formats.md "Prime layout"): which rows of an
// Engram table belong to which of the (max_ngram_size - 1) * n_heads hash columns.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace shardq {

// The Engram keys of config.json's text_config, already parsed.
struct EngramConfig {
  std::vector<int> layer_ids;            // engram_layer_ids, in order
  std::vector<uint64_t> num_embeddings;  // engram_num_embeddings (rows per table); may be
                                         // empty when a writer computes them
  int max_ngram_size = 0;                // engram_max_ngram_size (n-gram sizes 2..max)
  uint64_t vocab_size = 0;               // engram_vocab_size: where the prime search starts
  int n_heads = 0;                       // engram_n_heads
  int head_dim = 0;                      // engram_head_dim (values per row)
};

// Deterministic for every 64-bit n (Miller-Rabin with a base set proven for n < 2^64).
bool is_prime_u64(uint64_t n);

// Primes and row offsets of every Engram layer, computed once from the config. Layers are
// addressed by their id (e.g. 1 or 14); an id that is not an Engram layer throws StageError.
class EngramLayout {
 public:
  explicit EngramLayout(EngramConfig config); // throws StageError on an unusable config

  const EngramConfig& config() const { return config_; }
  int columns() const { return (config_.max_ngram_size - 1) * config_.n_heads; }
  bool has_layer(int layer) const;

  std::span<const uint64_t> primes(int layer) const;   // columns() entries
  std::span<const uint64_t> offsets(int layer) const;  // columns() entries, offsets[0] == 0
  uint64_t table_rows(int layer) const;                // sum of the layer's primes

  // Hash column c with offsets[c] <= row < offsets[c] + primes[c]; throws past the table.
  int hash_column(int layer, uint64_t row) const;

  // Refuses (StageError naming the layer and both numbers) a table whose computed row
  // count differs from engram_num_embeddings or from the tensor's row count.
  void check(int layer, uint64_t tensor_rows) const;

 private:
  struct Table {
    std::vector<uint64_t> primes;
    std::vector<uint64_t> bounds; // columns() + 1 entries: offsets, then the total
  };
  size_t index_of(int layer) const;

  EngramConfig config_;
  std::vector<Table> tables_; // parallel to config_.layer_ids
};

} // namespace shardq
