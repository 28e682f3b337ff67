// Stage `factors`: the GPTQ Hessian proxy of one Engram hash column and its factor
// (docs/gptq.md "Hessian proxy and factor"). H_c = W_c^T W_c with W_c the 256 columns of the
// layer's dequantized wkv that read hash column c (docs/gptq.md "Why W_c").
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gptq.h"

namespace shardq {


struct HashColumnFactor {
  int column = 0;
  std::vector<double> gram;  // 256x256 row-major, W_c^T W_c exactly as accumulated: no
                             // dead-column fix, no damping (the weighted-error metric)
  std::vector<double> upper; // 256x256 row-major, U_c upper triangular, U^T U = (H_c + damp)^-1
};

// Dequantize the FP8 wkv weight: E4M3 codes [out_rows, in_cols] times E8M0 scales over
// 32x32 blocks, shape [ceil(out_rows/32), ceil(in_cols/32)] (the last block row/column
// may be partial). Exact in fp32. Returns row-major [out_rows, in_cols].
std::vector<float> dequantize_wkv_fp8(const uint8_t* codes, const uint8_t* scales, int out_rows, int in_cols);

// H_c accumulated in fp64 in a fixed order (rows ascending, in groups of 8), so that every
// machine running this binary gets the same bits. Returns 256x256 row-major.
std::vector<double> column_gram(const float* wkv, int out_rows, int in_cols, int column);

// Factor of hash column `column` of Engram layer `layer` (the layer only names errors):
// dead columns (diag == 0) get H[d,d] = 1, then damp * mean(diag) is added to the
// diagonal, then U = upper Cholesky factor of H^-1 (Cholesky, inverse from the factor,
// Cholesky again; Eigen LLT, fp64). Throws StageError naming layer and column when a
// matrix is not positive definite or not finite.
HashColumnFactor compute_column_factor(const float* wkv, int out_rows, int in_cols, int column, double damp,
                                       int layer);

// The weighted error's form of an undamped Gram (kernels/gptq.h GramRoot): Eigen's pivoted
// LDL^T in fp64, H = P^T L D L^T P, G = D^1/2 L^T (negative D from rounding clamped to 0)
// rounded to fp32. Throws StageError naming layer and column when H is not finite.
GramRoot gram_root(const double* gram, int layer, int column);

// max / min of diag(gram) over the 256 values (the anisotropy figure of the study);
// +infinity when a column is dead (diag 0).
double gram_anisotropy(const std::vector<double>& gram);

} // namespace shardq
