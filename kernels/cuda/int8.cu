// INT8 row kernels on CUDA (kernels/cuda/int8_cuda.h): quantize_row_int8_ref's steps
// (kernels/cpu/int8_ref.cpp) through the same element rule, quantize_int8_element
// (kernels/int8.h), whose fp32 operations are rounded explicitly on the device (__fdiv_rn,
// __fmul_rn, __fsub_rn: nvcc may not contract them), so that codes, scales and sums equal
// the CPU's bit for bit (denormals kept: no -ftz). Sixteen threads per row, each over
// columns lane, lane + 16, ...: the amax is a max and the terms are integers, exact in any
// order.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/int8_cuda.h"
#include "kernels/int8.h"

namespace shardq {
namespace {

constexpr int kLanes = 16;        // threads per row
constexpr int kRowsPerBlock = 8;  // rows per CUDA block: 128 threads
constexpr unsigned kRowMask = 0xFFFFu; // the 16 lanes of a row within its warp half

// e8m0_to_float for a non-NaN byte (formats.h): byte 0 is the fp32 subnormal 2^-127.
__device__ float e8m0_value(uint8_t code) {
  return code == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(uint32_t(code) << 23);
}

// e4m3_to_float for a non-NaN code (formats.h): subnormals m * 2^-9, normals from the fields.
__device__ float e4m3_value(uint8_t code) {
  const int exponent = (code >> 3) & 0xF, mantissa = code & 7;
  const float magnitude = exponent == 0 ? __fmul_rn(float(mantissa), 0x1p-9f)
                                        : __uint_as_float(uint32_t(exponent - 7 + 127) << 23 | uint32_t(mantissa) << 20);
  return (code & 0x80) ? -magnitude : magnitude;
}

__device__ float e2m1_value(uint8_t nibble) {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = magnitudes[nibble & 7];
  return (nibble & 8) ? -m : m;
}

struct Source {
  Int8CudaSource kind;
  const void* values;
  const uint8_t* scales;
  int cols;
  int rows_per_scale_row;
};

// Column c of row r, decoded as the CPU decodes it (one fp32 product with the block scale).
__device__ float value_at(const Source& s, int r, int c) {
  if (s.kind == Int8CudaSource::f32) return static_cast<const float*>(s.values)[size_t(r) * s.cols + c];
  const float scale = e8m0_value(s.scales[size_t(r / s.rows_per_scale_row) * (s.cols / 32) + c / 32]);
  if (s.kind == Int8CudaSource::fp8_e4m3)
    return __fmul_rn(e4m3_value(static_cast<const uint8_t*>(s.values)[size_t(r) * s.cols + c]), scale);
  const uint8_t byte = static_cast<const uint8_t*>(s.values)[size_t(r) * (s.cols / 2) + c / 2];
  return __fmul_rn(e2m1_value(c % 2 == 0 ? byte & 0xF : byte >> 4), scale);
}

// An integer total of terms as a figure, as Int8Row::figures: times 2^(2(k - shift)), exact.
__device__ double figure(unsigned long long total, int k, int shift) {
  return __dmul_rn(__ull2double_rn(total), __longlong_as_double(int64_t(1023 + 2 * (k - shift)) << 52));
}

// Int8RowSums is plain data: the device writes the host compiler's layout (CUDA keeps it).
__global__ void quantize_rows_kernel(Source source, int rows, int8_t* codes, float* row_scales, Int8RowSums* sums) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kLanes;
  const int lane = threadIdx.x % kLanes;
  if (row >= rows) return; // a whole row's 16 threads leave together: the shuffles stay full
  const unsigned mask = kRowMask << (threadIdx.x & 16);
  const int cols = source.cols;
  float amax = 0.0f;
  for (int c = lane; c < cols; c += kLanes) {
    const float a = fabsf(value_at(source, row, c));
    amax = amax < a ? a : amax;
  }
  for (int offset = kLanes / 2; offset >= 1; offset /= 2) {
    const float other = __shfl_xor_sync(mask, amax, offset, kLanes);
    amax = amax < other ? other : amax;
  }
  const Int8Row terms_row = Int8Row::of_amax(amax);
  unsigned long long source_sq = 0, error_sq = 0;
  for (int c = lane; c < cols; c += kLanes) {
    const Int8Element element = quantize_int8_element(value_at(source, row, c), terms_row);
    codes[size_t(row) * cols + c] = element.code;
    source_sq += element.source_term;
    error_sq += element.error_term;
  }
  for (int offset = kLanes / 2; offset >= 1; offset /= 2) {
    source_sq += __shfl_xor_sync(mask, source_sq, offset, kLanes);
    error_sq += __shfl_xor_sync(mask, error_sq, offset, kLanes);
  }
  if (lane == 0) {
    row_scales[row] = terms_row.scale;
    sums[row].source_sq = figure(source_sq, terms_row.k, Int8::source_shift);
    sums[row].error_sq = figure(error_sq, terms_row.k, Int8::error_shift);
    sums[row].all_zero = amax == 0.0f;
  }
}

size_t source_bytes(const Int8CudaRows& rows) {
  const size_t values = size_t(rows.rows) * size_t(rows.cols);
  switch (rows.source) {
    case Int8CudaSource::f32: return values * sizeof(float);
    case Int8CudaSource::fp8_e4m3: return values;
    case Int8CudaSource::fp4_e2m1: return values / 2;
  }
  return 0;
}

size_t scale_bytes(const Int8CudaRows& rows) {
  if (rows.source == Int8CudaSource::f32) return 0;
  const size_t scale_rows = size_t((rows.rows + rows.rows_per_scale_row - 1) / rows.rows_per_scale_row);
  return scale_rows * size_t(rows.cols / 32);
}

size_t round_up(size_t bytes) { return (bytes + 15) / 16 * 16; }

} // namespace

Int8CudaWorkspace::~Int8CudaWorkspace() {
  if (device_ != nullptr) cudaFree(device_);
}

const char* Int8CudaWorkspace::reserve(size_t bytes) {
  if (bytes <= capacity_) return nullptr;
  if (device_ != nullptr) cudaFree(device_);
  device_ = nullptr;
  capacity_ = 0;
  const cudaError_t status = cudaMalloc(&device_, bytes);
  if (status != cudaSuccess) return cudaGetErrorString(status);
  capacity_ = bytes;
  return nullptr;
}

const char* Int8CudaWorkspace::quantize(const Int8CudaRows& rows, int8_t* codes, float* row_scales, Int8RowSums* sums) {
  if (rows.rows <= 0) return nullptr;
  if (rows.cols <= 0) return "INT8 CUDA: cols must be positive";
  if (rows.source != Int8CudaSource::f32 && (rows.cols % 32 != 0 || rows.rows_per_scale_row < 1))
    return "INT8 CUDA: FP8 / FP4 rows need cols % 32 == 0 and rows_per_scale_row >= 1";
  const size_t n = size_t(rows.rows);
  // One allocation: source values, scales, codes, then per row its scale and its sums.
  const size_t values_at = 0, scales_at = round_up(source_bytes(rows));
  const size_t codes_at = scales_at + round_up(scale_bytes(rows));
  const size_t row_scales_at = codes_at + round_up(n * size_t(rows.cols));
  const size_t sums_at = row_scales_at + round_up(n * sizeof(float));
  if (const char* error = reserve(sums_at + n * sizeof(Int8RowSums))) return error;
  auto* base = static_cast<uint8_t*>(device_);
  cudaError_t status = cudaMemcpy(base + values_at, rows.values, source_bytes(rows), cudaMemcpyHostToDevice);
  if (status == cudaSuccess && scale_bytes(rows) > 0)
    status = cudaMemcpy(base + scales_at, rows.scales, scale_bytes(rows), cudaMemcpyHostToDevice);
  if (status != cudaSuccess) return cudaGetErrorString(status);
  const Source source{rows.source, base + values_at, base + scales_at, rows.cols, rows.rows_per_scale_row};
  auto* d_codes = reinterpret_cast<int8_t*>(base + codes_at);
  auto* d_scales = reinterpret_cast<float*>(base + row_scales_at);
  auto* d_sums = reinterpret_cast<Int8RowSums*>(base + sums_at);
  const unsigned grid = unsigned((n + kRowsPerBlock - 1) / kRowsPerBlock);
  quantize_rows_kernel<<<grid, kRowsPerBlock * kLanes>>>(source, rows.rows, d_codes, d_scales, d_sums);
  if ((status = cudaGetLastError()) != cudaSuccess ||
      (status = cudaMemcpy(codes, d_codes, n * size_t(rows.cols), cudaMemcpyDeviceToHost)) != cudaSuccess ||
      (status = cudaMemcpy(row_scales, d_scales, n * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess ||
      (sums != nullptr &&
       (status = cudaMemcpy(sums, d_sums, n * sizeof(Int8RowSums), cudaMemcpyDeviceToHost)) != cudaSuccess))
    return cudaGetErrorString(status);
  return nullptr;
}

} // namespace shardq
