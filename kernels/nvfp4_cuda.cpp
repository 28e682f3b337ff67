// Host side of the CUDA NVFP4 row kernels: per-block results from the device, stats added
// in block order exactly as quantize_row_nvfp4_ref adds them. Compiled in CUDA builds only.
#ifdef SHARDQ_WITH_CUDA

#include <vector>

#include "kernels/cuda/nvfp4_cuda.h"
#include "kernels/nvfp4.h"

namespace shardq {

const char* quantize_rows_nvfp4_cuda(const float* x, int rows, int cols, float global_scale,
                                     const ScaleSearch& search, uint8_t* packed, uint8_t* scales, BlockStats& stats) {
  const size_t blocks = size_t(rows) * size_t(cols / Nvfp4::block);
  const auto alphas = search.alphas();
  std::vector<double> errors(blocks), references(blocks);
  std::vector<int8_t> best_k(blocks);
  std::vector<uint8_t> flags(blocks);
  if (const char* error = cuda_detail::quantize_blocks_nvfp4_device(
          x, blocks, global_scale, alphas.data(), search.candidates, packed, scales, errors.data(),
          references.data(), best_k.data(), flags.data()))
    return error;
  for (size_t b = 0; b < blocks; ++b) {
    ++stats.blocks;
    if (flags[b] & 1) ++stats.zero_blocks;
    if (flags[b] & 2) ++stats.scale_underflows;
    ++stats.candidate_wins[size_t(best_k[b])];
    stats.error_sq += errors[b];
    stats.reference_sq += references[b];
  }
  return nullptr;
}

} // namespace shardq

#endif
