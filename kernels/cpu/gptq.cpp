#include "kernels/gptq.h"

#include <cblas.h> // the weighted error's fp32 triangular product

#if defined(__x86_64__)
// The hot loops below get an AVX2 clone beside the baseline one, picked at load time. Other
// architectures build them once (aarch64's baseline, NEON, already vectorizes them).
#define SHARDQ_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SHARDQ_AVX2_CLONES
#endif

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace shardq {

namespace {

constexpr int kCols = kGptqCols;
constexpr int kTile = kGptqRowTile;
constexpr int kGroup = Nvfp4::block;
static_assert(kTile % kGroup == 0, "the lane chooser takes whole vectors of 16 rows");
static_assert(kTile % 64 == 0, "the in-block update keeps 64 rows in registers");

// Per-tile state of the current 16-value group of every row.
struct GroupScales {
  uint8_t code[kTile];
  float scale[kTile];   // float(E4M3 scale)
  float divisor[kTile]; // float(scale) * global: the NVFP4 element divisor
};

// An 8 x 8 block per step, transposed in registers (GCC vector shuffles: AVX2 in the
// avx2 clone): eight vector stores (per destination) instead of 64 scalar ones into
// lines 256 B apart.
typedef float Float8 __attribute__((vector_size(32)));

SHARDQ_AVX2_CLONES void transpose_into_tile(const float* x, int rows, float* tile, float* copy) {
  for (int r0 = 0; r0 < kTile; r0 += 8) {
    for (int c0 = 0; c0 < kCols; c0 += 8) {
      Float8 v[8];
      for (int i = 0; i < 8; ++i) {
        if (r0 + i < rows) std::memcpy(&v[i], x + size_t(r0 + i) * kCols + c0, sizeof(Float8));
        else v[i] = Float8{};
      }
      // Three rounds of interleaving: pairs, quads, halves.
      Float8 a[8], b[8];
      for (int i = 0; i < 8; i += 2) {
        a[i] = __builtin_shufflevector(v[i], v[i + 1], 0, 8, 2, 10, 4, 12, 6, 14);
        a[i + 1] = __builtin_shufflevector(v[i], v[i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
      }
      for (int i = 0; i < 8; i += 4)
        for (int k = 0; k < 2; ++k) {
          b[i + k] = __builtin_shufflevector(a[i + k], a[i + k + 2], 0, 1, 8, 9, 4, 5, 12, 13);
          b[i + k + 2] = __builtin_shufflevector(a[i + k], a[i + k + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        }
      for (int k = 0; k < 4; ++k) {
        const Float8 low = __builtin_shufflevector(b[k], b[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        const Float8 high = __builtin_shufflevector(b[k], b[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
        std::memcpy(tile + size_t(c0 + k) * kTile + r0, &low, sizeof(Float8));
        std::memcpy(tile + size_t(c0 + k + 4) * kTile + r0, &high, sizeof(Float8));
        if (copy) {
          std::memcpy(copy + size_t(c0 + k) * kTile + r0, &low, sizeof(Float8));
          std::memcpy(copy + size_t(c0 + k + 4) * kTile + r0, &high, sizeof(Float8));
        }
      }
    }
  }
}

// Loads up to kTile rows into the transposed tile (column c of the tile is contiguous over
// rows) and, for the error sums, into original_columns (kept unmodified); missing rows are
// zero, so the tile's arithmetic is the same whatever R is.
void load_tile(const float* x, int rows, GptqSums sums, GptqWorkspace& ws) {
  transpose_into_tile(x, rows, ws.tile.data(), sums == GptqSums::counters_and_errors ? ws.original_columns.data() : nullptr);
}

// Group start: the scale of columns j..j+15 of every real row from its current values,
// all rows at once (rows are the lanes of the tile's columns).
void choose_group_scales(const float* tile, int j, int rows, float global_scale, const ScaleSearch& search,
                         GroupScales& group, uint8_t* scales, BlockStats& stats) {
  choose_block_scales_nvfp4_lanes(tile + size_t(j) * kTile, kTile, kTile, rows, global_scale, search, group.code,
                                  stats);
  for (int r = 0; r < kTile; ++r) {
    if (r >= rows) { // padding rows stay zero: any finite divisor quantizes them to zero
      group.code[r] = 0;
      group.scale[r] = 0.0f;
      group.divisor[r] = 1.0f;
      continue;
    }
    group.scale[r] = e4m3_to_float(group.code[r]);
    group.divisor[r] = group.scale[r] * global_scale;
    scales[size_t(r) * (kCols / kGroup) + j / kGroup] = group.code[r];
  }
}

// E2M1 magnitude index of |x| (round half to even, saturating) as a sum of comparisons:
// branch-free, so the column loop vectorizes; equal to e2m1_index(a, nearest_even).
inline int e2m1_index_branchless(float a) {
  return int(a > 0.25f) + int(a >= 0.75f) + int(a > 1.25f) + int(a >= 1.75f) + int(a > 2.5f) + int(a >= 3.5f) +
         int(a > 5.0f);
}

// The same index's E2M1 magnitude (0, .5, 1, 1.5, 2, 3, 4, 6), summed exactly in fp32.
inline float e2m1_magnitude_branchless(float a) {
  return 0.5f * float(int(a > 0.25f) + int(a >= 0.75f) + int(a > 1.25f) + int(a >= 1.75f)) +
         float(int(a > 2.5f) + int(a >= 3.5f)) + 2.0f * float(a > 5.0f);
}

// Column j of every row: code, and the scaled error e = (x - q) / U[j, j] into `errors`.
// q = ((+-magnitude) * scale) * global: the same roundings as dequantize_nvfp4.
// target_clones: AVX2 where the CPU has it; no FMA contraction (-ffp-contract=off), so both
// clones compute the same bits.
SHARDQ_AVX2_CLONES void quantize_column(const float* column, const GroupScales& group, float global_scale,
                                        float u_jj, uint8_t* nibbles, float* errors) {
  for (int r = 0; r < kTile; ++r) {
    const float x = column[r];
    const float scaled = x / group.divisor[r];
    const float a = scaled < 0.0f ? -scaled : scaled;
    const float magnitude = e2m1_magnitude_branchless(a);
    nibbles[r] = uint8_t((scaled < 0.0f ? 0x8 : 0x0) | e2m1_index_branchless(a));
    const float q = ((scaled < 0.0f ? -magnitude : magnitude) * group.scale[r]) * global_scale;
    errors[r] = (x - q) / u_jj;
  }
}

using gptq_detail::update_column;
using gptq_detail::update_columns;

// Stats against the ORIGINAL rows, as quantize_row_nvfp4_ref adds them: per block,
// block_report_sums_nvfp4, blocks in order.
void add_row_error_stats(const float* original, const uint8_t* nibbles, const uint8_t* scales, float global_scale,
                         BlockStats& stats) {
  for (int b = 0; b < kCols / kGroup; ++b)
    stats.add_sums(block_report_sums_nvfp4(original + b * kGroup, nibbles + b * kGroup, scales[b], global_scale));
}

// Transposes an 8 x 8 byte matrix held as 8 little-endian words (x[i] byte k = M[i][k]
// becomes x[k] byte i): swaps of 1-, 2- and 4-byte blocks between rows 1, 2 and 4 apart.
inline void transpose_bytes_8x8(uint64_t* x) {
  const auto swap = [&](int step, int shift, uint64_t mask) {
    for (int i = 0; i < 8; ++i) {
      if (i & step) continue;
      const uint64_t t = ((x[i] >> shift) ^ x[i + step]) & mask;
      x[i + step] ^= t;
      x[i] ^= t << shift;
    }
  };
  swap(1, 8, 0x00FF00FF00FF00FFull);
  swap(2, 16, 0x0000FFFF0000FFFFull);
  swap(4, 32, 0x00000000FFFFFFFFull);
}

// Packs each row's codes: byte pairs column by column (contiguous over rows, vectorized),
// then 8 x 8 byte transposes into the row-major output.
SHARDQ_AVX2_CLONES void pack_tile(const GptqWorkspace& ws, int rows, uint8_t* packed) {
  constexpr int kPairs = kCols / 2;
  alignas(64) uint8_t pairs[kPairs * kTile]; // pairs[p * kTile + r]: row r's byte p
  const uint8_t* nibbles = ws.nibbles.data();
  for (int p = 0; p < kPairs; ++p)
    for (int r = 0; r < kTile; ++r)
      pairs[p * kTile + r] = uint8_t(nibbles[(2 * p) * kTile + r] | (nibbles[(2 * p + 1) * kTile + r] << 4));
  for (int r0 = 0; r0 < rows; r0 += 8) {
    for (int p0 = 0; p0 < kPairs; p0 += 8) {
      uint64_t x[8];
      for (int i = 0; i < 8; ++i) std::memcpy(&x[i], pairs + (p0 + i) * kTile + r0, 8);
      transpose_bytes_8x8(x);
      for (int k = 0; k < 8 && r0 + k < rows; ++k) std::memcpy(packed + size_t(r0 + k) * kPairs + p0, &x[k], 8);
    }
  }
}

// Adds the tile's error sums; the per-block sums come from the lane kernel (rows as
// lanes) and are added row by row, blocks in order.
void add_tile_error_sums(const GptqWorkspace& ws, const uint8_t* scales, int rows, float global_scale,
                         BlockStats& stats) {
  constexpr int kGroups = kCols / kGroup;
  double errors[kGroups][kTile], references[kGroups][kTile];
  uint8_t codes[kTile];
  for (int g = 0; g < kGroups; ++g) {
    for (int r = 0; r < kTile; ++r) codes[r] = r < rows ? scales[size_t(r) * kGroups + g] : kNvfp4ZeroBlockScaleCode;
    const size_t at = size_t(g) * kGroup * kTile;
    block_errors_nvfp4_lanes(ws.original_columns.data() + at, ws.nibbles.data() + at, kTile, kTile, codes,
                             global_scale, errors[g], references[g]);
  }
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < kGroups; ++g) {
      stats.error_sq += errors[g][r];
      stats.reference_sq += references[g][r];
    }
}

void quantize_tile(int rows, const float* upper, float global_scale, const ScaleSearch& search, int width,
                   GptqSums sums, uint8_t* packed, uint8_t* scales, BlockStats& stats, GptqWorkspace& ws) {
  float* tile = ws.tile.data();
  GroupScales group;
  uint8_t* nibbles = ws.nibbles.data();
  for (int b0 = 0; b0 < kCols; b0 += width) {
    for (int j = b0; j < b0 + width; ++j) {
      const int group_start = j - j % kGroup;
      if (j == group_start) {
        // The group's scales come from fully updated values: bring its 16 columns up to
        // date with the block's earlier columns first.
        update_columns(tile, ws.errors.data(), upper, b0, j, j + kGroup, b0, j);
        choose_group_scales(tile, j, rows, global_scale, search, group, scales, stats);
      }
      float* errors = ws.errors.data() + size_t(j - b0) * kTile;
      const float* u_row = upper + size_t(j) * kCols;
      update_column(tile + size_t(j) * kTile, ws.errors.data(), upper, b0, j, group_start, j);
      quantize_column(tile + size_t(j) * kTile, group, global_scale, u_row[j], nibbles + size_t(j) * kTile, errors);
    }
    // The lazy-batch update X[:, b0+B:] -= E @ U[b0:b0+B, b0+B:] as a register-blocked
    // product whose accumulators start from X: every element's chain stays ascending.
    update_columns(tile, ws.errors.data(), upper, b0, b0 + width, kCols, b0, b0 + width);
  }
  pack_tile(ws, rows, packed);
  if (sums == GptqSums::counters_and_errors) add_tile_error_sums(ws, scales, rows, global_scale, stats);
}

// sum of double(v[k])^2 over a row: column k into lane k % 8, the lanes folded in halves.
// Eight independent chains instead of one 256 adds long (it was 8% of a gptq-mse run); the
// order is fixed, so the figures stay independent of ranks and chunks.
double sum_of_squares_fp64(const float* v) {
  constexpr int kLanes = 8;
  double lanes[kLanes] = {};
  for (int k = 0; k < kCols; k += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += double(v[k + l]) * double(v[k + l]);
  for (int half = kLanes / 2; half >= 1; half /= 2)
    for (int l = 0; l < half; ++l) lanes[l] += lanes[l + half];
  return lanes[0];
}

// Rows per strmm of the weighted error: OpenBLAS packs the root at every call, so fewer,
// taller calls (the product is 256 KiB, still in L2).
constexpr int kWeightedTile = 128;

// One tile of up to kWeightedTile rows: [E; X] (2 kWeightedTile x 256, zero-padded, fp32,
// columns in the root's order) times G^T in place by one strmm of fixed shape, then each
// row's sum of squares in fp64.
void weighted_error_tile(const GramRoot& root, const float* original, const float* dequantized, int rows,
                         float* product, double* row_error, double* row_reference) {
  std::fill(product + size_t(rows) * kCols, product + size_t(kWeightedTile) * kCols, 0.0f);
  std::fill(product + size_t(kWeightedTile + rows) * kCols, product + size_t(2) * kWeightedTile * kCols, 0.0f);
  const int32_t* order = root.order.data();
  for (int r = 0; r < rows; ++r) {
    const float* x = original + size_t(r) * kCols;
    const float* deq = dequantized + size_t(r) * kCols;
    float* error = product + size_t(r) * kCols;
    float* reference = product + size_t(kWeightedTile + r) * kCols;
    for (int k = 0; k < kCols; ++k) {
      error[k] = deq[order[k]] - x[order[k]];
      reference[k] = x[order[k]];
    }
  }
  cblas_strmm(CblasRowMajor, CblasRight, CblasUpper, CblasTrans, CblasNonUnit, 2 * kWeightedTile, kCols, 1.0f,
              root.upper.data(), kCols, product, kCols);
  for (int r = 0; r < rows; ++r) {
    row_error[r] = sum_of_squares_fp64(product + size_t(r) * kCols);
    row_reference[r] = sum_of_squares_fp64(product + size_t(kWeightedTile + r) * kCols);
  }
}

} // namespace

GptqWorkspace::GptqWorkspace()
    : tile(size_t(kCols) * kTile), original_columns(size_t(kCols) * kTile), errors(size_t(kCols) * kTile),
      nibbles(size_t(kCols) * kTile) {}

std::vector<float> gptq_factor_fp32(const double* upper) {
  std::vector<float> out(size_t(kCols) * kCols);
  for (size_t i = 0; i < out.size(); ++i) out[i] = float(upper[i]);
  return out;
}

void gptq_pin_blas_threads() { openblas_set_num_threads(1); }

namespace {
// One BLAS thread per calling thread from the start: OpenBLAS (linked statically, see
// CMakeLists.txt) reads OPENBLAS_NUM_THREADS in its default-priority constructor and starts
// a pool of that many threads, each spinning ~0.1 s of a core before it sleeps.
[[gnu::constructor(101)]] void one_blas_thread_before_openblas_starts() { setenv("OPENBLAS_NUM_THREADS", "1", 1); }
} // namespace

void gptq_quantize_rows(const float* x, int rows, const float* upper, float global_scale, const ScaleSearch& search,
                        int block_width, uint8_t* packed, uint8_t* scales, BlockStats& stats,
                        GptqWorkspace& workspace, GptqSums sums) {
  assert(block_width >= kGroup && block_width % kGroup == 0 && kCols % block_width == 0);
  for (int r0 = 0; r0 < rows; r0 += kTile) {
    const int tile_rows = std::min(kTile, rows - r0);
    load_tile(x + size_t(r0) * kCols, tile_rows, sums, workspace);
    quantize_tile(tile_rows, upper, global_scale, search, block_width, sums, packed + size_t(r0) * (kCols / 2),
                  scales + size_t(r0) * (kCols / kGroup), stats, workspace);
  }
}

namespace {

// One row at a time, every later column updated right after each column with one fused
// step (w[k] = fma(-e, U[j, k], w[k])), in Real arithmetic.
template <class Real>
void quantize_rows_unbatched(const float* x, int rows, const Real* upper, float global_scale,
                             const ScaleSearch& search, uint8_t* packed, uint8_t* scales, BlockStats& stats) {
  Real w[kCols];
  float block[kGroup];
  uint8_t nibbles[kCols];
  for (int r = 0; r < rows; ++r) {
    const float* row = x + size_t(r) * kCols;
    uint8_t* row_scales = scales + size_t(r) * (kCols / kGroup);
    std::copy(row, row + kCols, w);
    uint8_t code = 0;
    for (int j = 0; j < kCols; ++j) {
      if (j % kGroup == 0) {
        for (int i = 0; i < kGroup; ++i) block[i] = float(w[j + i]);
        code = choose_and_quantize_block_nvfp4(block, global_scale, search, nibbles + j, stats);
        row_scales[j / kGroup] = code;
      }
      const float divisor = e4m3_to_float(code) * global_scale;
      nibbles[j] = e2m1_from_float(float(w[j]) / divisor);
      const Real e = (w[j] - Real(dequantize_nvfp4(nibbles[j], code, global_scale))) / upper[size_t(j) * kCols + j];
      for (int k = j + 1; k < kCols; ++k) w[k] = std::fma(-e, upper[size_t(j) * kCols + k], w[k]);
    }
    for (int c = 0; c < kCols; c += 2) packed[size_t(r) * (kCols / 2) + c / 2] = pack_e2m1x2(nibbles[c], nibbles[c + 1]);
    add_row_error_stats(row, nibbles, row_scales, global_scale, stats);
  }
}

} // namespace

void gptq_quantize_rows_ref(const float* x, int rows, const float* upper, float global_scale,
                            const ScaleSearch& search, uint8_t* packed, uint8_t* scales, BlockStats& stats) {
  quantize_rows_unbatched(x, rows, upper, global_scale, search, packed, scales, stats);
}

void gptq_quantize_rows_ref(const float* x, int rows, const double* upper, float global_scale,
                            const ScaleSearch& search, uint8_t* packed, uint8_t* scales, BlockStats& stats) {
  quantize_rows_unbatched(x, rows, upper, global_scale, search, packed, scales, stats);
}

void weighted_error_rows(const GramRoot& root, const float* original, const float* dequantized, int rows,
                         double* row_error, double* row_reference) {
  thread_local std::vector<float> product(size_t(2) * kWeightedTile * kCols);
  for (int r0 = 0; r0 < rows; r0 += kWeightedTile)
    weighted_error_tile(root, original + size_t(r0) * kCols, dequantized + size_t(r0) * kCols,
                        std::min(kWeightedTile, rows - r0), product.data(), row_error + r0, row_reference + r0);
}

void add_weighted_error(const GramRoot& root, const float* original, const float* dequantized, int rows,
                        double& error_sq, double& reference_sq) {
  std::vector<double> row_error(static_cast<size_t>(rows)), row_reference(static_cast<size_t>(rows));
  weighted_error_rows(root, original, dequantized, rows, row_error.data(), row_reference.data());
  for (int r = 0; r < rows; ++r) {
    error_sq += row_error[size_t(r)];
    reference_sq += row_reference[size_t(r)];
  }
}

void add_weighted_error_nvfp4(const GramRoot& root, const float* original, const uint8_t* packed,
                              const uint8_t* scales, float global_scale, int rows, double& error_sq,
                              double& reference_sq) {
  std::vector<float> dequantized(size_t(rows) * kCols);
  for (int r = 0; r < rows; ++r)
    dequantize_row_nvfp4(packed + size_t(r) * (kCols / 2), scales + size_t(r) * (kCols / kGroup), kCols, global_scale,
                         dequantized.data() + size_t(r) * kCols);
  add_weighted_error(root, original, dequantized.data(), rows, error_sq, reference_sq);
}

} // namespace shardq
