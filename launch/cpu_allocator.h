// A caching allocator for LibTorch's CPU tensors, in the manner of PyTorch's CUDA caching allocator. A training
// step allocates and frees the same large buffers (activations, their gradients, GEMM outputs) in the same order
// every step. glibc either maps and page-faults them anew each time (its default: measured 30 % slower on a
// bert-large step) or, tuned to keep freed memory, fragments its heap so that peak RSS grows 20 % past what is
// live. This allocator keeps each freed block of 1 MiB or more (its own anonymous mapping, with transparent huge
// pages advised) in a free list by exact size and hands it to the next request of that size. Blocks that no
// request took between two calls of release_unused_cpu_blocks() (once per training step) go back to the OS, so a
// changed shape (phase 2's longer sequences) does not leave the old sizes resident. Smaller requests are
// posix_memalign'ed and freed at once, as LibTorch's default allocator does. JOULE_CPU_CACHING=0 leaves LibTorch's
// allocator in place. No LibTorch here.
#pragma once

#include <cstdint>

namespace joule::launch {

struct CpuCacheStats {
  uint64_t hits = 0, misses = 0;  // large requests served from the cache / by a new mapping
  uint64_t mapped_bytes = 0;      // all mappings: in use and cached
  uint64_t cached_bytes = 0;      // of those, free in the cache
  uint64_t released_bytes = 0;    // returned to the OS so far
};

// Installs the allocator as LibTorch's CPU allocator (before tensors are made; tensors made earlier keep their
// own deleters). Returns false when JOULE_CPU_CACHING=0 turned it off. Idempotent.
bool install_caching_cpu_allocator();
// Unmaps every cached block that has been free since the previous call.
void release_unused_cpu_blocks();
// Unmaps every cached block.
void release_all_cpu_blocks();
CpuCacheStats cpu_cache_stats();
// Whether install_caching_cpu_allocator() put it in place in this process.
bool caching_cpu_allocator_active();

}  // namespace joule::launch
