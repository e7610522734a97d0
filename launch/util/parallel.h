// The one small thread pool of joule's CPU-side work (data creation, vocabulary counting): `threads` workers take
// the indices 0..n-1 in a fixed stride (worker w: w, w + threads, ...), so which worker handles which index is
// deterministic. The first exception a worker throws is rethrown to the caller once every worker has stopped; the
// others stop at their next index. Header only, no LibTorch.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace joule {

// Calls fn(i, worker) for every i in [0, n), on min(threads, n) threads (at least 1).
template <typename Fn>
void parallel_for(size_t n, int threads, Fn fn) {
  const int workers = std::max(1, std::min<int>(threads, static_cast<int>(std::min<size_t>(n, 1u << 20))));
  std::atomic<bool> failed{false};
  std::exception_ptr first;
  std::mutex mutex;
  auto work = [&](int w) {
    try {
      for (size_t i = static_cast<size_t>(w); i < n && !failed.load(std::memory_order_relaxed);
           i += static_cast<size_t>(workers))
        fn(i, w);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!first) first = std::current_exception();
      failed = true;
    }
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < workers; ++w) pool.emplace_back(work, w);
  work(0);  // the calling thread is worker 0
  for (auto& t : pool) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace joule
