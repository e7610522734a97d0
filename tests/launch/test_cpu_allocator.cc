// launch/cpu_allocator.h: blocks of 1 MiB or more are reused by exact size, released when a step did not reuse
// them, aligned, and safe to allocate and free from several threads. Each ctest case is its own process; run as
// one binary, the later tests simply find the allocator installed.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include "launch/cpu_allocator.h"

using joule::launch::cpu_cache_stats;

namespace {
void install() {
  if (!joule::launch::install_caching_cpu_allocator()) GTEST_SKIP() << "JOULE_CPU_CACHING=0";
  joule::launch::release_all_cpu_blocks();
}
}  // namespace

TEST(CpuAllocator, ReusesAFreedBlockOfTheSameSizeAndReleasesItWhenAStepDoesNotTakeIt) {
  install();
  const auto s0 = cpu_cache_stats();
  torch::Tensor a = torch::empty({1 << 20});  // 4 MiB
  const void* first = a.data_ptr();
  a.fill_(3.0f);
  a = torch::Tensor();
  const auto s1 = cpu_cache_stats();
  EXPECT_EQ(s1.misses, s0.misses + 1);
  EXPECT_GE(s1.cached_bytes, 4u << 20);
  torch::Tensor b = torch::empty({1 << 20});
  EXPECT_EQ(b.data_ptr(), first);
  EXPECT_EQ(cpu_cache_stats().hits, s1.hits + 1);
  EXPECT_EQ(cpu_cache_stats().cached_bytes, s0.cached_bytes);
  torch::Tensor c = torch::empty({(1 << 20) + 4096});  // another size: a mapping of its own
  EXPECT_NE(c.data_ptr(), first);
  EXPECT_EQ(cpu_cache_stats().misses, s1.misses + 1);
  b = torch::Tensor();
  c = torch::Tensor();
  const auto freed = cpu_cache_stats();
  joule::launch::release_unused_cpu_blocks();  // freed during this step: kept for the next
  EXPECT_EQ(cpu_cache_stats().cached_bytes, freed.cached_bytes);
  joule::launch::release_unused_cpu_blocks();  // a whole step without a taker: released
  const auto released = cpu_cache_stats();
  EXPECT_EQ(released.cached_bytes, 0u);
  EXPECT_EQ(released.mapped_bytes, freed.mapped_bytes - freed.cached_bytes);
  EXPECT_EQ(released.released_bytes, freed.released_bytes + freed.cached_bytes);
}

TEST(CpuAllocator, SmallTensorsAreNotCachedAndLargeOnesAreAlignedAndHoldTheirValues) {
  install();
  const auto s0 = cpu_cache_stats();
  torch::Tensor small = torch::ones({1000});
  EXPECT_EQ(cpu_cache_stats().misses, s0.misses);
  torch::Tensor x = torch::arange(3 << 20, torch::kFloat);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data_ptr()) % 64, 0u);
  torch::Tensor y = x * 2;  // a second block in use at the same time
  EXPECT_NE(x.data_ptr(), y.data_ptr());
  EXPECT_EQ(y[(3 << 20) - 1].item<float>(), 2.0f * ((3 << 20) - 1));
  EXPECT_EQ(x.sum().item<double>(), (3.0 * (1 << 20)) * ((3 << 20) - 1) / 2);
  EXPECT_EQ(small.sum().item<float>(), 1000.0f);
  // LibTorch's kernels also take raw buffers (GELU did, and crashed the first version of this allocator).
  for (size_t n : {size_t{100}, size_t{5} << 20}) {
    void* raw = c10::GetCPUAllocator()->raw_allocate(n);
    std::memset(raw, 1, n);
    c10::GetCPUAllocator()->raw_deallocate(raw);
  }
}

TEST(CpuAllocator, ThreadsAllocatingAndFreeingConcurrentlyShareTheCache) {
  install();
  const auto s0 = cpu_cache_stats();
  auto work = [](float value) {
    for (int i = 0; i < 200; ++i) {
      torch::Tensor t = torch::full({1 << 19}, value);  // 2 MiB
      ASSERT_EQ(t[12345].item<float>(), value);
    }
  };
  std::thread a(work, 1.0f), b(work, 2.0f);
  a.join();
  b.join();
  const auto s1 = cpu_cache_stats();
  EXPECT_EQ(s1.hits + s1.misses - s0.hits - s0.misses, 400u);
  EXPECT_LE(s1.misses - s0.misses, 4u);         // at most a few blocks live at once, each reused
  EXPECT_EQ(s1.mapped_bytes, s1.cached_bytes);  // every block back in the cache
}

#if defined(__SANITIZE_ADDRESS__)
TEST(CpuAllocator, AReadOfACachedBlockIsReportedUnderAddressSanitizer) {
  install();
  EXPECT_DEATH(
      {
        torch::Tensor t = torch::ones({1 << 20});
        const float* p = t.data_ptr<float>();
        t = torch::Tensor();  // back in the cache, poisoned
        volatile float x = p[10];
        (void)x;
      },
      "use-after-poison");
}
#endif
