// NVFP4 row kernels on a CUDA device (RTN and the MSE search), bit-identical to
// quantize_row_nvfp4_ref: the same fp32 roundings (no FMA contraction: __fmul_rn /
// __fdiv_rn / __dmul_rn / __dadd_rn, IEEE division), the same fp64 fold per block; the
// per-block sums are added to the stats on the host in block order.
// Only in CUDA builds (SHARDQ_WITH_CUDA, set when kernels/cuda/*.cu is compiled).
#pragma once

#if defined(SHARDQ_WITH_CUDA) || defined(__CUDACC__)

#include <cstddef>
#include <cstdint>

namespace shardq {

struct BlockStats;
struct ScaleSearch;

// quantize_row_nvfp4_ref on `rows` consecutive rows of `cols` values (cols % 16 == 0), all
// in host memory: packed rows x cols/2 bytes, scales rows x cols/16 codes, stats as the ref
// accumulates them row after row. Runs on the current device; returns nullptr, or the CUDA
// error's text (outputs then undefined).
const char* quantize_rows_nvfp4_cuda(const float* x, int rows, int cols, float global_scale,
                                     const ScaleSearch& search, uint8_t* packed, uint8_t* scales, BlockStats& stats);

namespace cuda_detail {

// Per-block results of `blocks` consecutive blocks of 16 (host memory): 8 packed bytes and
// one scale code per block, its block_report_sums_nvfp4 sums, the winning candidate
// and flags (bit 0: zero block, bit 1: scale underflow). alphas: the candidates' fp32
// multipliers (ScaleSearch::alphas). Returns nullptr or the CUDA error's text.
const char* quantize_blocks_nvfp4_device(const float* x, size_t blocks, float global_scale, const float* alphas,
                                         int candidates, uint8_t* packed, uint8_t* scales, double* errors,
                                         double* references, int8_t* best_k, uint8_t* flags);

} // namespace cuda_detail
} // namespace shardq

#endif
