// quantize_row_int8_simd == quantize_row_int8_ref, and the fused source rows
// (quantize_row_int8_from_fp8_simd / _from_fp4_simd) == the scalar decode + the ref, bit for
// bit (scale, codes, both sums and the all-zero flag; scale and codes where no sums are
// wanted), on every SIMD target this CPU supports and the build generated: random rows,
// exact ties at every half step, quotients one ulp off a tie, all-zero rows, subnormals
// (and scales too small to be normal), one huge value, every column count around the
// vector, tile and block edges.
// AVX3_DL too (before any Highway header), as kernels/cpu/int8_simd.cpp generates it.
#define HWY_WANT_AVX3_DL
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/formats.h"
#include "kernels/int8.h"
#include "simd_targets.h"

using namespace shardq;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Quantized {
  float scale = 0.0f;
  std::vector<int8_t> codes;
  Int8RowSums sums;
};

// Codes start as 0x55 and sums as -1 so that anything the kernel never writes shows.
Quantized empty_for(size_t cols) {
  Quantized q;
  q.codes.assign(cols, int8_t(0x55));
  q.sums.source_sq = q.sums.error_sq = -1.0;
  return q;
}

Quantized ref_of(const std::vector<float>& row) {
  Quantized q = empty_for(row.size());
  q.scale = quantize_row_int8_ref(row.data(), int(row.size()), q.codes.data(), &q.sums);
  return q;
}

Quantized simd_of(const std::vector<float>& row) {
  Quantized q = empty_for(row.size());
  q.scale = quantize_row_int8_simd(row.data(), int(row.size()), q.codes.data(), &q.sums);
  return q;
}

void expect_same(const Quantized& got, const Quantized& want, const std::string& where) {
  ASSERT_EQ(std::bit_cast<uint32_t>(got.scale), std::bit_cast<uint32_t>(want.scale)) << where << ": scale";
  ASSERT_EQ(got.codes, want.codes) << where << ": codes";
  EXPECT_EQ(std::bit_cast<uint64_t>(got.sums.source_sq), std::bit_cast<uint64_t>(want.sums.source_sq))
      << where << ": source_sq " << std::hexfloat << got.sums.source_sq << " vs ref " << want.sums.source_sq;
  EXPECT_EQ(std::bit_cast<uint64_t>(got.sums.error_sq), std::bit_cast<uint64_t>(want.sums.error_sq))
      << where << ": error_sq " << std::hexfloat << got.sums.error_sq << " vs ref " << want.sums.error_sq;
  EXPECT_EQ(got.sums.all_zero, want.sums.all_zero) << where;
}

void expect_simd_equals_ref(const std::vector<float>& row, const std::string& what) {
  expect_same(simd_of(row), ref_of(row), what);
}

// Widths at and around every edge the kernel has: a vector (4, 8 or 16 lanes), a source
// block (32), a table row's 64 columns (exactly one: the real-count fixture's w1 and w3
// rows; two), a 7168-wide linear, the 8192-column tile.
const std::vector<int> kWidths = {1,  2,   3,   7,   8,    15,   16,   17,   31,   32,   33,
                                  48, 64,  80,  96,  128,  250,  2048, 7168, 8191, 8192, 8208, 20000};

std::string label(const std::string& kind, int cols, int trial, const std::string& on) {
  return kind + " cols " + std::to_string(cols) + " #" + std::to_string(trial) + on;
}

// Normal values times 2^u, u uniform in [-spread, spread].
std::vector<float> random_row(std::mt19937& rng, int cols, float spread) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-spread, spread);
  std::vector<float> row(size_t(cols), 0.0f);
  for (float& v : row) v = normal(rng) * std::exp2(exponent(rng));
  return row;
}

// ---------------------------------------------------------------- FP8 / FP4 source rows

struct SourceRow {
  std::vector<uint8_t> codes, scales; // FP8: one code per column; FP4: two per byte
  int cols = 0;
};

std::vector<float> decoded_fp8(const SourceRow& row) {
  std::vector<float> x(size_t(row.cols));
  for (int c = 0; c < row.cols; ++c) x[size_t(c)] = e4m3_to_float(row.codes[size_t(c)]) * e8m0_to_float(row.scales[size_t(c / 32)]);
  return x;
}

std::vector<float> decoded_fp4(const SourceRow& row) {
  std::vector<float> x(size_t(row.cols));
  for (int c = 0; c < row.cols; ++c) {
    const uint8_t byte = row.codes[size_t(c / 2)];
    x[size_t(c)] = e2m1_to_float(c % 2 == 0 ? byte & 0xF : byte >> 4) * e8m0_to_float(row.scales[size_t(c / 32)]);
  }
  return x;
}

// The scale and codes of a row quantized without its sums (the codes-only paths).
void expect_same_codes(const Quantized& got, const Quantized& want, const std::string& where) {
  ASSERT_EQ(std::bit_cast<uint32_t>(got.scale), std::bit_cast<uint32_t>(want.scale)) << where << ": scale";
  ASSERT_EQ(got.codes, want.codes) << where << ": codes";
}

// A fused source row, with its sums and without (sums null: the row's codes only).
template <class Kernel>
void expect_source_equals_ref(Kernel kernel, const SourceRow& row, const std::vector<float>& x, const std::string& what) {
  const Quantized want = ref_of(x);
  Quantized got = empty_for(x.size());
  got.scale = kernel(row.codes.data(), row.scales.data(), row.cols, got.codes.data(), &got.sums);
  expect_same(got, want, what + " with sums");
  Quantized codes_only = empty_for(x.size());
  codes_only.scale = kernel(row.codes.data(), row.scales.data(), row.cols, codes_only.codes.data(), nullptr);
  expect_same_codes(codes_only, want, what + " codes only");
}

void expect_fp8_equals_ref(const SourceRow& row, const std::string& what) {
  expect_source_equals_ref(quantize_row_int8_from_fp8_simd, row, decoded_fp8(row), what + " (fused fp8)");
}

void expect_fp4_equals_ref(const SourceRow& row, const std::string& what) {
  expect_source_equals_ref(quantize_row_int8_from_fp4_simd, row, decoded_fp4(row), what + " (fused fp4)");
}

// Random codes (E4M3 without NaN, or any E2M1 byte) and E8M0 scales in [low, low + span).
SourceRow random_source(std::mt19937& rng, int cols, bool fp8, int low, int span) {
  SourceRow row{std::vector<uint8_t>(fp8 ? size_t(cols) : size_t(cols) / 2), std::vector<uint8_t>(size_t(cols + 31) / 32), cols};
  for (auto& c : row.codes) {
    c = uint8_t(rng());
    if (fp8 && E4M3::is_nan(c)) c = E4M3::max_code;
  }
  for (auto& s : row.scales) s = uint8_t(low + int(rng() % uint32_t(span)));
  return row;
}

} // namespace

// ---------------------------------------------------------------- float rows

TEST(Int8Simd, RandomRowsEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(8);
    for (int cols : kWidths)
      for (int trial = 0; trial < (cols > 4096 ? 3 : 40); ++trial)
        for (float spread : {0.0f, 4.0f, 30.0f}) expect_simd_equals_ref(random_row(rng, cols, spread), label("random", cols, trial, on));
  });
}

// amax 127 * 2^k makes the scale exactly 2^k: then every (j + 0.5) * 2^k is an exact tie,
// which goes to even, in every lane; one ulp either side goes to the nearer neighbour.
TEST(Int8Simd, TiesAtEveryHalfStepEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    for (int k : {-100, -20, -1, 0, 1, 30, 100}) {
      const float unit = std::ldexp(1.0f, k);
      std::vector<float> row = {127.0f * unit};
      for (int j = -127; j < 127; ++j) {
        const float tie = (float(j) + 0.5f) * unit;
        for (float at : {tie, std::nextafter(tie, kInf), std::nextafter(tie, -kInf)}) row.push_back(at);
      }
      ASSERT_EQ(ref_of(row).scale, unit);
      for (int cols : {int(row.size()), 33, 16}) {
        const std::vector<float> head(row.begin(), row.begin() + cols);
        expect_simd_equals_ref(head, label("ties 2^" + std::to_string(k), cols, 0, on));
      }
    }
  });
}

// Scales that are not powers of two: quotients land within an ulp of a half step (the
// amax's own quotient is 127 +- an ulp, amax / 2 is 63.5 +- an ulp).
TEST(Int8Simd, NearTiesEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(63);
    for (int trial = 0; trial < 2000; ++trial) {
      const float amax = std::bit_cast<float>(uint32_t(120u << 23) | uint32_t(rng() & 0x7FFFFF));
      const float scale = amax / 127.0f;
      std::vector<float> row = {trial % 2 ? amax : -amax};
      while (row.size() < 48) {
        const float half_step = (float(int(rng() % 254) - 127) + 0.5f) * scale;
        const uint32_t bits = std::bit_cast<uint32_t>(half_step);
        row.push_back(std::bit_cast<float>(bits + uint32_t(int(rng() % 5) - 2))); // within 2 ulps
        row.push_back(amax * 0.5f * (rng() & 1 ? 1.0f : -1.0f));
      }
      expect_simd_equals_ref(row, label("near ties", int(row.size()), trial, on));
    }
  });
}

TEST(Int8Simd, AllZeroRowsEqualRef) {
  test::for_each_simd_target([](const std::string& on) {
    for (int cols : kWidths) {
      std::vector<float> row(size_t(cols), 0.0f);
      for (size_t i = 0; i < row.size(); i += 3) row[i] = -0.0f;
      const Quantized want = ref_of(row);
      ASSERT_TRUE(want.sums.all_zero);
      expect_same(simd_of(row), want, label("all zero", cols, 0, on));
    }
  });
}

// Subnormal values under a normal scale, and rows whose whole amax is so small that the
// scale is subnormal (its quotients may reach 128: the clamp acts) or 0 (amax 50 * 2^-149:
// x / 0 = +-inf, clamped; such a row holds no zero, as 0 / 0 has no code).
TEST(Int8Simd, SubnormalsEqualRef) {
  const float denorm = std::numeric_limits<float>::denorm_min();
  test::for_each_simd_target([&](const std::string& on) {
    std::mt19937 rng(126);
    for (int cols : {5, 16, 33, 100, 2048}) {
      std::vector<float> row = random_row(rng, cols, 3.0f);
      for (size_t i = 0; i < row.size(); i += 2) row[i] = float(int(rng() % 2001) - 1000) * denorm;
      row[size_t(cols / 2)] = std::ldexp(1.0f, -119); // scale 2^-119 / 127: normal
      expect_simd_equals_ref(row, label("subnormal values", cols, 0, on));
      for (float amax : {std::ldexp(1.0f, -130), 1000.0f * denorm, std::ldexp(1.0f, -120), 126.0f * denorm, 50.0f * denorm}) {
        std::vector<float> tiny(static_cast<size_t>(cols));
        for (float& v : tiny) v = amax * float(int(rng() % 2001) - 1000) / 1000.0f;
        if (amax < 127.0f * denorm) std::fill(tiny.begin(), tiny.end(), amax);
        tiny[size_t(cols - 1)] = -amax;
        expect_simd_equals_ref(tiny, label("subnormal scale", cols, 0, on));
      }
    }
  });
}

// One value 10^4 (or far more) times the rest, anywhere in the row: everything else is 0.
TEST(Int8Simd, OneHugeValueEqualsRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(4);
    for (int cols : {17, 256, 7168}) {
      for (float huge : {1e30f, -3.0e38f, std::numeric_limits<float>::max(), 5.0e-30f}) {
        std::vector<float> row = random_row(rng, cols, 2.0f);
        for (float& v : row) v *= std::fabs(huge) * 1e-6f;
        row[rng() % row.size()] = huge;
        expect_simd_equals_ref(row, label("one huge", cols, 0, on));
      }
    }
  });
}

// ---------------------------------------------------------------- source rows

TEST(Int8Simd, Fp8RowsEqualDecodeAndRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(88);
    for (int cols : kWidths) {
      for (int trial = 0; trial < (cols > 4096 ? 2 : 12); ++trial) {
        // Scales around 2^-8 (the checkpoints'), a wide spread, and the extremes: byte 0
        // (2^-127, subnormal products) and bytes up to 2^118 (448 * 2^118 stays finite).
        expect_fp8_equals_ref(random_source(rng, cols, true, 112, 20), label("fp8", cols, trial, on));
        expect_fp8_equals_ref(random_source(rng, cols, true, 60, 120), label("fp8 spread", cols, trial, on));
        expect_fp8_equals_ref(random_source(rng, cols, true, 0, 3), label("fp8 tiny", cols, trial, on));
        expect_fp8_equals_ref(random_source(rng, cols, true, 230, 15), label("fp8 huge", cols, trial, on));
        // Bytes past 246 (x86 decodes those from the fields, not through fp16), with codes
        // up to 30 so that 30 * 2^123 stays finite.
        SourceRow top = random_source(rng, cols, true, 240, 11);
        for (auto& c : top.codes) c = uint8_t((c & 0x80) | std::min(c & 0x7F, 0x5F));
        expect_fp8_equals_ref(top, label("fp8 top scales", cols, trial, on));
      }
    }
  });
}

// The source's own ties: a row's amax code with the same mantissa one binade down (or the
// same code under a scale byte one lower) is amax / 2, a quotient of 63.5 +- an ulp.
TEST(Int8Simd, Fp8HalfAmaxEqualsDecodeAndRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(635);
    for (int trial = 0; trial < 300; ++trial) {
      SourceRow row = random_source(rng, 96, true, 120, 2);
      const uint8_t lead = uint8_t(0x48 + rng() % 0x30); // normal codes with room a binade down
      for (size_t c = 0; c < 96; ++c) row.codes[c] = uint8_t(rng() % 3 == 0 ? lead - 8 : rng() % 0x40) | uint8_t(rng() & 0x80);
      row.codes[rng() % 96] = lead;
      expect_fp8_equals_ref(row, label("fp8 half amax", 96, trial, on));
    }
  });
}

TEST(Int8Simd, Fp4RowsEqualDecodeAndRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(44);
    for (int cols : kWidths) {
      if (cols % 2) continue;
      for (int trial = 0; trial < (cols > 4096 ? 2 : 12); ++trial) {
        // FP4 ties are everywhere: 3 * 2^k is half of 6 * 2^k.
        expect_fp4_equals_ref(random_source(rng, cols, false, 115, 10), label("fp4", cols, trial, on));
        expect_fp4_equals_ref(random_source(rng, cols, false, 120, 2), label("fp4 two scales", cols, trial, on));
        expect_fp4_equals_ref(random_source(rng, cols, false, 0, 4), label("fp4 tiny", cols, trial, on));
        expect_fp4_equals_ref(random_source(rng, cols, false, 240, 13), label("fp4 huge", cols, trial, on)); // 6 * 2^125 at most
        // Scales over many binades: tables for 40 scales on AVX2, and rows of 90 (past its 64
        // tables) on the fused vector path.
        expect_fp4_equals_ref(random_source(rng, cols, false, 70, 40), label("fp4 spread", cols, trial, on));
        expect_fp4_equals_ref(random_source(rng, cols, false, 40, 90), label("fp4 wide", cols, trial, on));
      }
    }
  });
}

// The fused rows take the amax from a key per code (|code| and the scale byte): blocks
// whose scale byte is the row's largest but whose codes are all small (subnormal E4M3, or
// E2M1 0.5 and 1), so that the amax is another block's, a small code's, or one a binade
// off; and rows where a subnormal code is the amax outright.
TEST(Int8Simd, SourceAmaxKeysEqualDecodeAndRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(1717);
    for (int trial = 0; trial < 400; ++trial) {
      const int cols = 32 * int(1 + rng() % 12);
      SourceRow fp8 = random_source(rng, cols, true, 118, 6);
      SourceRow fp4 = random_source(rng, cols, false, 118, 6);
      const int small = int(rng() % 10); // largest |code| in the top blocks: 0..9 (E4M3), 0..2 (E2M1)
      for (size_t block = 0; block < fp8.scales.size(); ++block) {
        if (rng() % 3 != 0) continue;
        fp8.scales[block] = fp4.scales[block] = uint8_t(124 + rng() % (trial % 2 ? 2 : 8));
        for (size_t c = 32 * block; c < 32 * block + 32; ++c) fp8.codes[c] = uint8_t(rng() % (small + 1)) | uint8_t(rng() & 0x80);
        for (size_t b = 16 * block; b < 16 * block + 16; ++b) {
          fp4.codes[b] = uint8_t((rng() % (small % 3 + 1)) | (rng() % (small % 3 + 1)) << 4 | (rng() & 0x88));
        }
      }
      if (trial % 7 == 0) { // only small codes anywhere
        for (auto& c : fp8.codes) c = uint8_t((c & 0x80) | (c & 0x7F) % (small + 1));
        for (auto& c : fp4.codes) c &= 0x99;
      }
      expect_fp8_equals_ref(fp8, label("fp8 amax keys", cols, trial, on));
      expect_fp4_equals_ref(fp4, label("fp4 amax keys", cols, trial, on));
    }
  });
}

// A NaN code anywhere (first or last column, a partial last block, rows the fused paths
// hand on: a partial block, scale bytes past the fp16 decode's) makes the FP8 row return
// NaN on every target: the kernel's one pass over the row is the check.
TEST(Int8Simd, Fp8NanCodeReturnsNan) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(7);
    for (int cols : {32, 33, 64, 96, 250, 2048, 7168, 8200}) {
      for (int trial = 0; trial < 8; ++trial) {
        SourceRow row = trial % 4 == 3 ? random_source(rng, cols, true, 240, 11) : random_source(rng, cols, true, 112, 10);
        if (trial % 4 == 3)
          for (auto& c : row.codes) c = uint8_t((c & 0x80) | std::min(c & 0x7F, 0x5F));
        const size_t at = trial == 0 ? 0 : trial == 1 ? size_t(cols) - 1 : size_t(rng() % uint32_t(cols));
        row.codes[at] = rng() % 2 ? 0x7F : 0xFF;
        std::vector<int8_t> out(static_cast<size_t>(cols));
        Int8RowSums sums;
        const float scale = quantize_row_int8_from_fp8_simd(row.codes.data(), row.scales.data(), cols, out.data(), &sums);
        EXPECT_TRUE(std::isnan(scale)) << label("fp8 nan at " + std::to_string(at), cols, trial, on);
        const float codes_only = quantize_row_int8_from_fp8_simd(row.codes.data(), row.scales.data(), cols, out.data(), nullptr);
        EXPECT_TRUE(std::isnan(codes_only)) << label("fp8 nan (codes only) at " + std::to_string(at), cols, trial, on);
      }
    }
  });
}

TEST(Int8Simd, ZeroSourceRowsEqualDecodeAndRef) {
  test::for_each_simd_target([](const std::string& on) {
    for (int cols : {32, 96, 2048, 8200}) {
      SourceRow fp8{std::vector<uint8_t>(size_t(cols), 0x80), std::vector<uint8_t>(size_t(cols + 31) / 32, 127), cols};
      expect_fp8_equals_ref(fp8, label("fp8 zero", cols, 0, on));
      SourceRow fp4{std::vector<uint8_t>(size_t(cols) / 2, 0x08), std::vector<uint8_t>(size_t(cols + 31) / 32, 3), cols};
      expect_fp4_equals_ref(fp4, label("fp4 zero", cols, 0, on));
    }
  });
}

// ---------------------------------------------------------------- FP4 rows many at once

namespace {

// Rows back to back as a tensor holds them, each against the decode + the ref on its own:
// the scale and codes (the many-rows entry computes no sums).
void expect_fp4_rows_equal_ref(const std::vector<SourceRow>& rows, const std::string& what) {
  const int cols = rows.front().cols;
  std::vector<uint8_t> packed, scales;
  for (const SourceRow& row : rows) {
    packed.insert(packed.end(), row.codes.begin(), row.codes.end());
    scales.insert(scales.end(), row.scales.begin(), row.scales.end());
  }
  std::vector<int8_t> codes(rows.size() * size_t(cols), int8_t(0x55));
  std::vector<float> row_scales(rows.size(), -1.0f);
  quantize_rows_int8_from_fp4_simd(packed.data(), scales.data(), cols, rows.size(), codes.data(), row_scales.data());
  for (size_t r = 0; r < rows.size(); ++r) {
    Quantized got;
    got.scale = row_scales[r];
    got.codes.assign(codes.begin() + ptrdiff_t(r * size_t(cols)), codes.begin() + ptrdiff_t((r + 1) * size_t(cols)));
    expect_same_codes(got, ref_of(decoded_fp4(rows[r])), what + " row " + std::to_string(r));
  }
}

// A row whose blocks have the given largest E2M1 magnitude (0..7: every nibble of the block
// at most that, one exactly that, random signs) and scale bytes.
SourceRow fp4_row_of_blocks(std::mt19937& rng, const std::vector<std::pair<int, int>>& blocks) {
  SourceRow row{std::vector<uint8_t>(blocks.size() * 16), std::vector<uint8_t>(blocks.size()), int(blocks.size() * 32)};
  for (size_t b = 0; b < blocks.size(); ++b) {
    const auto [largest, scale] = blocks[b];
    row.scales[b] = uint8_t(scale);
    for (size_t i = 0; i < 32; ++i) {
      const uint32_t magnitude = i == rng() % 32 || i == 31 ? uint32_t(largest) : rng() % uint32_t(largest + 1);
      const uint8_t nibble = uint8_t(magnitude | (rng() % 2 ? 8u : 0u));
      uint8_t& byte = row.codes[b * 16 + i / 2];
      byte = i % 2 == 0 ? uint8_t((byte & 0xF0) | nibble) : uint8_t((byte & 0x0F) | (nibble << 4));
    }
  }
  return row;
}

} // namespace

// Narrow rows (one or two blocks) take shared tables on AVX3_DL and the row kernel
// elsewhere and for wider rows: random rows over every scale range the row tests use, the
// amax in either block, blocks of zeros beside any scale, equal amaxes from different
// magnitudes (1.0 * 2^(s + 1) and 2.0 * 2^s), scales too small or too large to be normal.
TEST(Int8Simd, Fp4RowsManyAtOnceEqualDecodeAndRef) {
  test::for_each_simd_target([](const std::string& on) {
    std::mt19937 rng(61);
    for (int cols : {32, 64, 96, 128, 2048}) {
      for (const auto& [low, span] : std::vector<std::pair<int, int>>{{115, 10}, {120, 2}, {0, 4}, {240, 15}, {70, 40}, {40, 90}}) {
        std::vector<SourceRow> rows;
        for (int r = 0; r < 40; ++r) rows.push_back(random_source(rng, cols, false, low, span));
        expect_fp4_rows_equal_ref(rows, label("fp4 rows", cols, low, on));
      }
    }
    for (int trial = 0; trial < 200; ++trial) {
      const int s = int(rng() % 255), t = int(rng() % 255);
      std::vector<SourceRow> rows = {
          fp4_row_of_blocks(rng, {{int(rng() % 8), s}}),
          fp4_row_of_blocks(rng, {{int(rng() % 8), s}, {int(rng() % 8), t}}),
          fp4_row_of_blocks(rng, {{0, s}, {int(1 + rng() % 7), t}}),
          fp4_row_of_blocks(rng, {{int(1 + rng() % 7), s}, {0, t}}),
          fp4_row_of_blocks(rng, {{2, std::min(s + 1, 254)}, {4, s}}),
          fp4_row_of_blocks(rng, {{4, s}, {2, std::min(s + 1, 254)}}),
          fp4_row_of_blocks(rng, {{7, s}, {1, std::min(s + 3, 254)}}),
          fp4_row_of_blocks(rng, {{0, s}, {0, t}}),
      };
      for (const SourceRow& row : rows) expect_fp4_rows_equal_ref({row}, label("fp4 blocks", row.cols, trial, on));
      std::vector<SourceRow> pairs(rows.begin() + 1, rows.end()); // two-block rows back to back
      expect_fp4_rows_equal_ref(pairs, label("fp4 two-block rows", 64, trial, on));
    }
  });
}
