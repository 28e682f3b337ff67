// What the CUDA benchmarks share: whether a device is there, a host input buffer that is
// pageable (a std::vector, as a stage reads its rows) or pinned (cudaMallocHost, what a
// stage with a page-locked buffer would hand the kernel), and the timed loop. CUDA builds only.
#pragma once

#ifdef SHARDQ_WITH_CUDA
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
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

// Times `call` (returns nullptr or the CUDA error's text) once per iteration, after one
// untimed call that pays for the context, the module load and any workspace. An error
// skips the benchmark with `what` and the text, and returns false (no counters to set).
template <class Call>
bool time_device_calls(benchmark::State& state, const std::string& what, Call call) {
  if (const char* error = call()) {
    state.SkipWithError((what + ": " + error).c_str());
    return false;
  }
  for (auto _ : state) {
    if (const char* error = call()) {
      state.SkipWithError((what + ": " + error).c_str());
      return false;
    }
    benchmark::ClobberMemory();
  }
  return true;
}

} // namespace shardq::bench
#endif
