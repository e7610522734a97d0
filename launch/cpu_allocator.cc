#include "launch/cpu_allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <sanitizer/asan_interface.h>  // no-op macros unless built with ASan

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

namespace joule::launch {
namespace {

constexpr size_t kMinCached = size_t{1} << 20;
// Every block starts with this header; the data follows at this offset (LibTorch aligns to 64 bytes). The data
// pointer is also the DataPtr's context, as LibTorch's raw_allocate()/raw_deallocate() require, and the deleter
// finds the header from it.
constexpr size_t kHeader = 64;

struct Block {
  size_t bytes;  // the whole block, header included
  bool mapped;   // an mmap of our own (cached), or a small posix_memalign block (freed at once)
};

Block* header_of(void* data) { return reinterpret_cast<Block*>(static_cast<char*>(data) - kHeader); }

// Under AddressSanitizer a cached block's data is poisoned, so a use after free is reported as with malloc.
void poison(Block* b) { ASAN_POISON_MEMORY_REGION(reinterpret_cast<char*>(b) + kHeader, b->bytes - kHeader); }
void unpoison(Block* b) { ASAN_UNPOISON_MEMORY_REGION(reinterpret_cast<char*>(b) + kHeader, b->bytes - kHeader); }

class CachingCpuAllocator final : public c10::Allocator {
 public:
  CachingCpuAllocator() : page_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override { return take(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(size_t n) const override { return take(n); }
#endif

  void release(bool only_unused) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [bytes, list] : free_) {
      std::vector<Entry> keep;
      for (const Entry& e : list) {
        if (only_unused && e.freed_epoch == epoch_) {
          keep.push_back(e);
        } else {
          unmap(e.block);
        }
      }
      list.swap(keep);
    }
    ++epoch_;
  }

  CpuCacheStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  struct Entry {
    Block* block;
    uint64_t freed_epoch;
  };

  c10::DataPtr take(size_t n) const {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &give_back, cpu);
    if (n < kMinCached) {
      void* base = nullptr;
      if (posix_memalign(&base, kHeader, n + kHeader) != 0) base = nullptr;
      TORCH_CHECK(base, "CPU allocator: cannot allocate ", n, " bytes");
      Block* block = static_cast<Block*>(base);
      *block = {n + kHeader, false};
      char* data = static_cast<char*>(base) + kHeader;
      return c10::DataPtr(data, data, &give_back, cpu);
    }
    const size_t bytes = (n + kHeader + page_ - 1) / page_ * page_;
    Block* block = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        block = it->second.back().block;
        it->second.pop_back();
        stats_.cached_bytes -= bytes;
        ++stats_.hits;
        unpoison(block);
      }
    }
    if (!block) block = map(bytes);
    char* data = reinterpret_cast<char*>(block) + kHeader;
    return c10::DataPtr(data, data, &give_back, cpu);
  }

  Block* map(size_t bytes) const {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      release(false);  // what the cache holds, then once more
      p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    TORCH_CHECK(p != MAP_FAILED, "CPU allocator: cannot map ", bytes, " bytes: ", std::strerror(errno));
#ifdef MADV_HUGEPAGE
    if (bytes >= (size_t{2} << 20)) madvise(p, bytes, MADV_HUGEPAGE);  // fewer TLB misses in the GEMMs
#endif
    Block* block = static_cast<Block*>(p);
    *block = {bytes, true};
    std::lock_guard<std::mutex> lock(mu_);
    stats_.mapped_bytes += bytes;
    ++stats_.misses;
    return block;
  }

  void unmap(Block* block) const {  // mu_ held
    const size_t bytes = block->bytes;
    unpoison(block);
    munmap(block, bytes);
    stats_.mapped_bytes -= bytes;
    stats_.cached_bytes -= bytes;
    stats_.released_bytes += bytes;
  }

  static void give_back(void* data);
  c10::DeleterFnPtr raw_deleter() const override { return &give_back; }

  const size_t page_;
  mutable std::mutex mu_;
  mutable std::unordered_map<size_t, std::vector<Entry>> free_;
  mutable CpuCacheStats stats_;
  mutable uint64_t epoch_ = 0;
};

// Never destroyed: tensors may be freed during static destruction.
CachingCpuAllocator*& instance() {
  static CachingCpuAllocator* a = nullptr;
  return a;
}

void CachingCpuAllocator::give_back(void* data) {
  if (!data) return;
  Block* block = header_of(data);
  if (!block->mapped) {
    free(block);
    return;
  }
  CachingCpuAllocator* a = instance();
  std::lock_guard<std::mutex> lock(a->mu_);
  poison(block);
  a->free_[block->bytes].push_back({block, a->epoch_});
  a->stats_.cached_bytes += block->bytes;
}

std::mutex install_mu;

}  // namespace

bool install_caching_cpu_allocator() {
  std::lock_guard<std::mutex> lock(install_mu);
  if (instance()) return true;
  const char* env = std::getenv("JOULE_CPU_CACHING");
  if (env && std::strcmp(env, "0") == 0) return false;
  instance() = new CachingCpuAllocator();
  c10::SetCPUAllocator(instance(), /*priority=*/1);
  return true;
}

void release_unused_cpu_blocks() {
  if (CachingCpuAllocator* a = instance()) a->release(true);
}

void release_all_cpu_blocks() {
  if (CachingCpuAllocator* a = instance()) a->release(false);
}

bool caching_cpu_allocator_active() { return instance() != nullptr; }

CpuCacheStats cpu_cache_stats() {
  CachingCpuAllocator* a = instance();
  return a ? a->stats() : CpuCacheStats{};
}

}  // namespace joule::launch
