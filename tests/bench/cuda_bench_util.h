// What the CUDA benchmarks share: whether a device is there, and a host input buffer that
// is pageable (a std::vector, as a stage reads its rows) or pinned (cudaMallocHost, what a
// stage with a page-locked buffer would hand the kernel). CUDA builds only.
#pragma once

#ifdef SHARDQ_WITH_CUDA
#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "tests/unit/cuda_test_util.h"

namespace shardq::bench {

template <typename T>
class HostBuffer {
 public:
  HostBuffer(size_t count, bool pinned) : pinned_(pinned) {
    if (!pinned_) {
      pageable_.resize(count);
      data_ = pageable_.data();
    } else if (cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(T)) != cudaSuccess) {
      data_ = nullptr;
    }
  }
  ~HostBuffer() {
    if (pinned_ && data_ != nullptr) cudaFreeHost(data_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  // nullptr when a pinned allocation failed.
  T* data() const { return data_; }

 private:
  bool pinned_;
  std::vector<T> pageable_;
  T* data_ = nullptr;
};

} // namespace shardq::bench
#endif
