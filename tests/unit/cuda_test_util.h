// What the CUDA parity tests share: whether a device is there to run them on.
#pragma once

#ifdef SHARDQ_WITH_CUDA
#include <cuda_runtime_api.h>

namespace shardq::test {

inline bool have_cuda_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

} // namespace shardq::test
#endif
