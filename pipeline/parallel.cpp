#include "pipeline/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace shardq {
namespace {

// Helper threads kept for the life of the process. A plan calls parallel_for a dozen
// times, and a thread's start and end cost more than many items: its stack, and the
// allocator's heap of the thread, taken apart when it ends (for a plan of 100K tensors,
// whose names the helpers allocated, ~15% of the plan's instructions under callgrind).
// One loop at a time: a parallel_for that finds the pool in use (another thread's, or one
// nested in an item) runs its items on its own thread, with the same results.
class HelperPool {
 public:
  // Never destroyed: its threads wait until the process ends.
  static HelperPool& instance() {
    static HelperPool* const pool = new HelperPool();
    return *pool;
  }

  // Runs work() on up to `helpers` pool threads and on the caller's, and returns once
  // every call has returned; false, without running anything, when the pool is in use.
  bool try_run(size_t helpers, const std::function<void()>& work) {
    {
      std::lock_guard lock(mutex_);
      if (work_) return false;
      work_ = &work;
      wanted_ = helpers;
      while (threads_ < helpers) {
        std::thread([this] { serve(); }).detach();
        ++threads_;
      }
    }
    wake_.notify_all();
    work();
    std::unique_lock lock(mutex_);
    wanted_ = 0; // helpers not started yet would find no items left: they need not start
    done_.wait(lock, [&] { return running_ == 0; });
    work_ = nullptr;
    return true;
  }

 private:
  HelperPool() = default;

  void serve() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return wanted_ > 0; });
      --wanted_;
      ++running_;
      const std::function<void()>& work = *work_;
      lock.unlock();
      work();
      lock.lock();
      if (--running_ == 0) done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void()>* work_ = nullptr; // the loop in progress, if any
  size_t wanted_ = 0;                            // helpers it may still take
  size_t running_ = 0;                           // helpers in it now
  size_t threads_ = 0;
};

} // namespace

void parallel_for(size_t count, const std::function<void(size_t)>& body) {
  const size_t threads = std::min<size_t>(count, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::exception_ptr> failures(count);
  std::atomic<size_t> next{0};
  const std::function<void()> work = [&] {
    for (size_t i = next++; i < count; i = next++) {
      try {
        body(i);
      } catch (...) {
        failures[i] = std::current_exception();
      }
    }
  };
  if (threads <= 1 || !HelperPool::instance().try_run(threads - 1, work)) work();
  for (const auto& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

} // namespace shardq
