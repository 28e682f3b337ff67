// W8A8 INT8 rows on a CUDA device, bit-identical to quantize_row_int8_ref (kernels/int8.h):
// the same scale, codes and report sums, from fp32 rows or from FP8 / FP4 source rows
// decoded as the CPU's fused rows decode them. Device buffers live in a workspace that
// grows to the largest call and is reused, so a run allocates once per size it meets.
// Only in CUDA builds (SHARDQ_WITH_CUDA, set when kernels/cuda/*.cu is compiled).
#pragma once

#if defined(SHARDQ_WITH_CUDA) || defined(__CUDACC__)

#include <cstddef>
#include <cstdint>

namespace shardq {

struct Int8RowSums;

enum class Int8CudaSource {
  f32,       // rows x cols floats
  fp8_e4m3,  // rows x cols E4M3 codes, value = e4m3_to_float(code) * e8m0_to_float(scale)
  fp4_e2m1,  // rows x cols/2 bytes, low nibble = even column, value = e2m1_to_float * e8m0
};

// `rows` rows of `cols` values in host memory. FP8 / FP4: one E8M0 scale per 32 columns,
// scale row r / rows_per_scale_row for row r (32 for FP8's 32x32 blocks, 1 for FP4).
// Preconditions as the CPU kernels': finite values, no NaN code or scale byte, cols a
// multiple of 32 for FP8 / FP4 (even for FP4).
struct Int8CudaRows {
  Int8CudaSource source = Int8CudaSource::f32;
  const void* values = nullptr;
  const uint8_t* scales = nullptr;
  int rows = 0;
  int cols = 0;
  int rows_per_scale_row = 1;
};

// Device buffers for quantize(); one per host thread (a workspace is not thread-safe).
class Int8CudaWorkspace {
 public:
  Int8CudaWorkspace() = default;
  ~Int8CudaWorkspace();
  Int8CudaWorkspace(const Int8CudaWorkspace&) = delete;
  Int8CudaWorkspace& operator=(const Int8CudaWorkspace&) = delete;

  // Codes (rows x cols), one scale per row and, if `sums` is not null, each row's sums,
  // all into host memory. Runs on the current device; returns nullptr, or the CUDA
  // error's text (outputs then undefined).
  const char* quantize(const Int8CudaRows& rows, int8_t* codes, float* row_scales, Int8RowSums* sums);

 private:
  const char* reserve(size_t bytes);
  void* device_ = nullptr;
  size_t capacity_ = 0;
};

} // namespace shardq

#endif
