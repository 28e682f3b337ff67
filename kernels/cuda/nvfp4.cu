// NVFP4 block kernels on CUDA: one thread per block of 16, the scalar reference's steps
// (kernels/cpu/nvfp4_ref.cpp, kernels/formats.*) with every fp32/fp64 operation rounded
// explicitly (__fmul_rn, __fdiv_rn, __fadd_rn, __dmul_rn, __dadd_rn: nvcc may not contract
// them into FMAs) so the results equal the CPU's bit for bit (denormals kept: no -ftz).
// Compiled as C++17 by nvcc, so the C++20 format headers are not included: the few
// constants are repeated here.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/nvfp4_cuda.h"

namespace shardq {
namespace {

constexpr int kBlock = 16;
constexpr int kMaxCandidates = 16;    // kMaxMseCandidates
constexpr float kE2m1Max = 6.0f;
constexpr float kMinScale = 0x1p-9f;  // E4M3 min subnormal
constexpr float kMaxScale = 448.0f;   // E4M3 max
constexpr float kMinNormal = 0x1p-6f; // E4M3 min normal
constexpr uint8_t kZeroBlockCode = 0x38;
constexpr uint8_t kMaxCode = 0x7E;

// e4m3_from_float for s in [2^-9, 448] (formats.cpp: subnormals by one RNE rounding of
// s * 2^9, normals by rounding the mantissa to 3 bits, ties to even).
__device__ uint8_t e4m3_code_of_clamped(float s) {
  if (s < kMinNormal) return uint8_t(__float2int_rn(__fmul_rn(s, 512.0f)));
  const uint32_t bits = __float_as_uint(s);
  int exponent = int(bits >> 23) - 127 + 7;
  uint32_t kept = (bits & 0x7FFFFFu) >> 20;
  const uint32_t dropped = bits & 0xFFFFFu;
  if (dropped > 0x80000u || (dropped == 0x80000u && (kept & 1u))) ++kept;
  if (kept == 8) {
    kept = 0;
    ++exponent;
  }
  const uint32_t code = uint32_t(exponent) << 3 | kept;
  return uint8_t(code > kMaxCode ? kMaxCode : code);
}

// e4m3_to_float of a positive code.
__device__ float e4m3_value(uint8_t code) {
  const int exponent = code >> 3, mantissa = code & 7;
  if (exponent == 0) return __fmul_rn(float(mantissa), kMinScale);
  return __uint_as_float(uint32_t(exponent - 7 + 127) << 23 | uint32_t(mantissa) << 20);
}

// e2m1_from_float, round to nearest even (NaN -> 7, as formats.h).
__device__ uint8_t e2m1_nibble(float q) {
  const float a = q < 0.0f ? -q : q;
  const uint8_t index = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3
                      : a <= 2.5f  ? 4 : a < 3.5f  ? 5 : a <= 5.0f  ? 6 : 7;
  return uint8_t((q < 0.0f ? 0x8 : 0x0) | index);
}

__device__ float e2m1_value(uint8_t nibble) {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = magnitudes[nibble & 7];
  return (nibble & 8) ? -m : m;
}

// sum_block_fp64: t[i] + t[i + 8], then + 4, + 2, + 1.
__device__ double fold_block(double* t) {
  for (int half = kBlock / 2; half >= 1; half /= 2)
    for (int i = 0; i < half; ++i) t[i] = __dadd_rn(t[i], t[i + half]);
  return t[0];
}

// sum_block_fp32: the same fold in fp32.
__device__ float fold_block(float* t) {
  for (int half = kBlock / 2; half >= 1; half /= 2)
    for (int i = 0; i < half; ++i) t[i] = __fadd_rn(t[i], t[i + half]);
  return t[0];
}

// block_error_nvfp4: (double(deq) - double(x))^2, deq = (e2m1 * scale) * global.
__device__ double block_error(const float* x, const uint8_t* nibbles, float scale, float global_scale) {
  double terms[kBlock];
  for (int i = 0; i < kBlock; ++i) {
    const float deq = __fmul_rn(__fmul_rn(e2m1_value(nibbles[i]), scale), global_scale);
    const double diff = __dsub_rn(double(deq), double(x[i]));
    terms[i] = __dmul_rn(diff, diff);
  }
  return fold_block(terms);
}

// block_report_sums_nvfp4: scale p = 2^(127 - E), E = clamp(amax exponent, 1, 253); fp32
// terms ((deq - x) * p)^2 and (x * p)^2 folded, widened, times 2^(E - 127) twice (exact).
__device__ void report_sums(const float* x, float amax, const uint8_t* nibbles, float scale, float global_scale,
                            double* error, double* reference) {
  uint32_t exponent = __float_as_uint(amax) >> 23;
  exponent = exponent < 1u ? 1u : (exponent > 253u ? 253u : exponent);
  const float down = __uint_as_float((254u - exponent) << 23);
  const double up = double(__uint_as_float(exponent << 23));
  float errors[kBlock], references[kBlock];
  for (int i = 0; i < kBlock; ++i) {
    const float deq = __fmul_rn(__fmul_rn(e2m1_value(nibbles[i]), scale), global_scale);
    const float diff = __fmul_rn(__fsub_rn(deq, x[i]), down), value = __fmul_rn(x[i], down);
    errors[i] = __fmul_rn(diff, diff);
    references[i] = __fmul_rn(value, value);
  }
  *error = __dmul_rn(__dmul_rn(double(fold_block(errors)), up), up);
  *reference = __dmul_rn(__dmul_rn(double(fold_block(references)), up), up);
}

struct Candidates {
  float alpha[kMaxCandidates];
  int count;
};

// choose_and_quantize_block_nvfp4 + the row kernel's per-block report sums, one block per thread.
__global__ void quantize_blocks_kernel(const float* x, size_t blocks, float global_scale, Candidates candidates,
                                       uint8_t* packed, uint8_t* scales, double* errors, double* references,
                                       int8_t* best_ks, uint8_t* flags) {
  const size_t b = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  float v[kBlock];
  float amax = 0.0f;
  for (int i = 0; i < kBlock; ++i) {
    v[i] = x[b * kBlock + i];
    const float a = v[i] < 0.0f ? -v[i] : v[i];
    amax = amax < a ? a : amax; // std::max(amax, fabs(x))
  }
  const float six_global = __fmul_rn(kE2m1Max, global_scale);
  const bool zero = amax == 0.0f;
  const bool underflow = !zero && __fdiv_rn(amax, six_global) < kMinScale;

  uint8_t best_code = 0, best_nibbles[kBlock], trial[kBlock];
  double best_error = 0.0;
  int best_k = -1;
  for (int k = candidates.count - 1; k >= 0; --k) {
    uint8_t code = kZeroBlockCode;
    if (!zero) {
      const float unclamped = __fdiv_rn(__fmul_rn(candidates.alpha[k], amax), six_global);
      const float clamped = unclamped < kMinScale ? kMinScale : (kMaxScale < unclamped ? kMaxScale : unclamped);
      code = e4m3_code_of_clamped(clamped);
    }
    if (best_k >= 0 && code == best_code) continue;
    const float scale = e4m3_value(code);
    const float divisor = __fmul_rn(scale, global_scale);
    for (int i = 0; i < kBlock; ++i) trial[i] = e2m1_nibble(__fdiv_rn(v[i], divisor));
    const double error = candidates.count == 1 ? 0.0 : block_error(v, trial, scale, global_scale);
    if (best_k < 0 || error < best_error) {
      best_k = k;
      best_code = code;
      best_error = error;
      for (int i = 0; i < kBlock; ++i) best_nibbles[i] = trial[i];
    }
  }
  for (int i = 0; i < kBlock; i += 2)
    packed[b * (kBlock / 2) + i / 2] = uint8_t(best_nibbles[i + 1] << 4 | (best_nibbles[i] & 0xF));
  scales[b] = best_code;
  report_sums(v, amax, best_nibbles, e4m3_value(best_code), global_scale, &errors[b], &references[b]);
  best_ks[b] = int8_t(best_k);
  flags[b] = uint8_t((zero ? 1 : 0) | (underflow ? 2 : 0));
}

// Device buffers freed on every path.
struct DeviceBuffer {
  void* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

} // namespace

namespace cuda_detail {

const char* quantize_blocks_nvfp4_device(const float* x, size_t blocks, float global_scale, const float* alphas,
                                         int candidates, uint8_t* packed, uint8_t* scales, double* errors,
                                         double* references, int8_t* best_k, uint8_t* flags) {
  if (blocks == 0) return nullptr;
  if (candidates < 1 || candidates > kMaxCandidates) return "NVFP4 CUDA: candidates must be 1..16";
  Candidates table{};
  table.count = candidates;
  for (int k = 0; k < candidates; ++k) table.alpha[k] = alphas[k];
  // One allocation: x, packed, scales, errors, references, best_k, flags (8-byte aligned parts).
  const size_t x_bytes = blocks * kBlock * sizeof(float), packed_bytes = blocks * (kBlock / 2);
  const size_t sums_bytes = blocks * sizeof(double);
  const size_t errors_at = x_bytes + packed_bytes + ((blocks + 7) / 8) * 8;
  const size_t total = errors_at + 2 * sums_bytes + 2 * blocks;
  DeviceBuffer buffer;
  cudaError_t status = cudaMalloc(&buffer.ptr, total);
  if (status != cudaSuccess) return cudaGetErrorString(status);
  auto* base = static_cast<uint8_t*>(buffer.ptr);
  auto* d_x = reinterpret_cast<float*>(base);
  uint8_t* d_packed = base + x_bytes;
  uint8_t* d_scales = d_packed + packed_bytes;
  auto* d_errors = reinterpret_cast<double*>(base + errors_at);
  double* d_references = d_errors + blocks;
  auto* d_best_k = reinterpret_cast<int8_t*>(d_references + blocks);
  uint8_t* d_flags = reinterpret_cast<uint8_t*>(d_best_k) + blocks;
  if ((status = cudaMemcpy(d_x, x, x_bytes, cudaMemcpyHostToDevice)) != cudaSuccess) return cudaGetErrorString(status);
  constexpr int kThreads = 256;
  const unsigned grid = unsigned((blocks + kThreads - 1) / kThreads);
  quantize_blocks_kernel<<<grid, kThreads>>>(d_x, blocks, global_scale, table, d_packed, d_scales, d_errors,
                                             d_references, d_best_k, d_flags);
  if ((status = cudaGetLastError()) != cudaSuccess) return cudaGetErrorString(status);
  const struct {
    void* host;
    const void* device;
    size_t bytes;
  } copies[] = {{packed, d_packed, packed_bytes},       {scales, d_scales, blocks},
                {errors, d_errors, sums_bytes},         {references, d_references, sums_bytes},
                {best_k, d_best_k, blocks},             {flags, d_flags, blocks}};
  for (const auto& copy : copies)
    if ((status = cudaMemcpy(copy.host, copy.device, copy.bytes, cudaMemcpyDeviceToHost)) != cudaSuccess)
      return cudaGetErrorString(status);
  return nullptr;
}

} // namespace cuda_detail
} // namespace shardq
