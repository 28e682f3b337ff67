#include "stages/factors.h"

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/formats.h"
#include "kernels/nvfp4.h"
#include "stages/stage_error.h"

namespace shardq {

namespace {

constexpr int kWkvScaleBlock = 32; // wkv's 32x32 E8M0 blocks
constexpr int kGramRowGroup = 8;   // rows summed together before touching H (fixed order)
constexpr int N = kGptqCols;

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::string where(int layer, int column) {
  return "layers." + std::to_string(layer) + ".engram.wkv hash column " + std::to_string(column);
}

void check_shape(int out_rows, int in_cols, int column) {
  if (out_rows <= 0 || column < 0 || in_cols < (column + 1) * N)
    throw StageError("factors: wkv [" + std::to_string(out_rows) + ", " + std::to_string(in_cols) +
                     "] has no hash column " + std::to_string(column) + " (needs in >= 256 * (column + 1))");
}

bool all_finite(const RowMatrix& m) { return m.allFinite(); }

// Eigen blocks its products and triangular solves by the CPU's cache sizes, and the blocks
// set the order of the sums: left to the machine, a Spark and an x86 node would factor the
// same Gram into different bits. Fixed once for the process, before the first factor.
void fix_eigen_blocking() {
  static const bool fixed = [] {
    Eigen::setCpuCacheSizes(32 * 1024, 1024 * 1024, 1024 * 1024);
    return true;
  }();
  (void)fixed;
}

} // namespace

std::vector<float> dequantize_wkv_fp8(const uint8_t* codes, const uint8_t* scales, int out_rows, int in_cols) {
  const int scale_cols = (in_cols + kWkvScaleBlock - 1) / kWkvScaleBlock;
  std::vector<float> out(size_t(out_rows) * size_t(in_cols));
  static_assert(kWkvScaleBlock == 32, "each row is the source-row format: one E8M0 per 32 values");
  for (int r = 0; r < out_rows; ++r) {
    dequantize_row_fp8_e8m0_32_simd(codes + size_t(r) * size_t(in_cols),
                                    scales + size_t(r / kWkvScaleBlock) * size_t(scale_cols), in_cols,
                                    out.data() + size_t(r) * size_t(in_cols));
  }
  return out;
}

std::vector<double> column_gram(const float* wkv, int out_rows, int in_cols, int column) {
  check_shape(out_rows, in_cols, column);
  std::vector<double> gram(size_t(N) * N, 0.0);
  // A group of rows as fp64 (fp32 products are exact in fp64: only the sums round).
  double group[kGramRowGroup][N];
  for (int r0 = 0; r0 < out_rows; r0 += kGramRowGroup) {
    const int rows = std::min(kGramRowGroup, out_rows - r0);
    for (int k = 0; k < kGramRowGroup; ++k)
      for (int d = 0; d < N; ++d)
        group[k][d] = k < rows ? double(wkv[size_t(r0 + k) * size_t(in_cols) + size_t(column) * N + d]) : 0.0;
    // Upper triangle: H[i][j] += sum_k w_k[i] w_k[j]; the inner j loop is contiguous.
    for (int i = 0; i < N; ++i) {
      double* h = gram.data() + size_t(i) * N;
      for (int j = i; j < N; ++j) {
        double sum = 0.0;
        for (int k = 0; k < kGramRowGroup; ++k) sum += group[k][i] * group[k][j];
        h[j] += sum;
      }
    }
  }
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < i; ++j) gram[size_t(i) * N + j] = gram[size_t(j) * N + i];
  return gram;
}

HashColumnFactor compute_column_factor(const float* wkv, int out_rows, int in_cols, int column, double damp,
                                       int layer) {
  fix_eigen_blocking();
  HashColumnFactor factor;
  factor.column = column;
  factor.gram = column_gram(wkv, out_rows, in_cols, column);

  RowMatrix h = Eigen::Map<const RowMatrix>(factor.gram.data(), N, N);
  for (int d = 0; d < N; ++d)
    if (h(d, d) == 0.0) h(d, d) = 1.0; // dead value: no consumer sees it
  const double mean_diag = h.diagonal().mean();
  h.diagonal().array() += damp * mean_diag;
  if (!all_finite(h))
    throw StageError("factors: " + where(layer, column) + ": damped H_c is not finite (damp " +
                     std::to_string(damp) + ")");

  const Eigen::LLT<RowMatrix> chol(h);
  if (chol.info() != Eigen::Success)
    throw StageError("factors: " + where(layer, column) + ": H_c + damp * mean(diag) is not positive definite (damp " +
                     std::to_string(damp) + ", mean diag " + std::to_string(mean_diag) + ")");
  const RowMatrix h_inv = chol.solve(RowMatrix::Identity(N, N));
  const Eigen::LLT<RowMatrix> chol_inv(h_inv);
  if (chol_inv.info() != Eigen::Success || !all_finite(h_inv))
    throw StageError("factors: " + where(layer, column) + ": H_c^-1 is not positive definite (damp " +
                     std::to_string(damp) + ")");
  const RowMatrix upper = chol_inv.matrixU();
  factor.upper.assign(upper.data(), upper.data() + size_t(N) * N);
  return factor;
}

GramRoot gram_root(const double* gram, int layer, int column) {
  fix_eigen_blocking();
  const RowMatrix h = Eigen::Map<const RowMatrix>(gram, N, N);
  if (!all_finite(h)) throw StageError("factors: " + where(layer, column) + ": H_c is not finite");
  const Eigen::LDLT<RowMatrix> ldlt(h);
  GramRoot root;
  root.upper.assign(size_t(N) * N, 0.0f);
  const RowMatrix lower = ldlt.matrixL();
  for (int i = 0; i < N; ++i) {
    const double d = std::sqrt(std::max(ldlt.vectorD()(i), 0.0));
    for (int j = i; j < N; ++j) root.upper[size_t(i) * N + j] = float(d * lower(j, i));
  }
  // (P v)[k] for v = 0, 1, ..., 255 is the index P puts at k.
  const Eigen::VectorXd indices = ldlt.transpositionsP() * Eigen::VectorXd::LinSpaced(N, 0.0, double(N - 1));
  for (int k = 0; k < N; ++k) root.order.push_back(int32_t(indices(k)));
  return root;
}

double gram_anisotropy(const std::vector<double>& gram) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = 0.0;
  for (int d = 0; d < N; ++d) {
    lo = std::min(lo, gram[size_t(d) * N + d]);
    hi = std::max(hi, gram[size_t(d) * N + d]);
  }
  return lo == 0.0 ? std::numeric_limits<double>::infinity() : hi / lo;
}

} // namespace shardq
