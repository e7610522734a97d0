#!/usr/bin/env bash
# The processor's arithmetic ceiling, measured: a loop of independent multiply-accumulate instructions on registers
# (no memory traffic), on 1 thread and on THREADS threads, for each extension the kernel reports:
#   fp32 FMA      VFMADD231PS on 16 lanes (AVX-512) or 8 (AVX2): 2 FLOP a lane
#   bf16 dot      VDPBF16PS (AVX512_BF16): 16 fp32 lanes, each adding two bf16 products: 4 FLOP a lane
# No GEMM can run faster than these; BENCHMARKS.md sets joule's and PyTorch's GEMM and model rates against them.
# AMX's tile products (TDPBF16PS) are not measured here.
#   bash tools/bench/cpu_peak.sh [THREADS]     (default: every processor this process may run on)
# One JSON line per (kind, threads): GFLOP/s, the median of 5 timed loops of ~0.3 s.
set -euo pipefail
threads=${1:-$(nproc)}
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { [[ " $flags " == *" $1 "* ]]; }
kinds=()
if has avx512f; then kinds+=(fp32-avx512); elif has avx2 && has fma; then kinds+=(fp32-avx2); fi
if has avx512_bf16; then kinds+=(bf16-avx512); fi
if [ ${#kinds[@]} -eq 0 ]; then
  echo "cpu_peak.sh: neither AVX2 with FMA nor AVX-512 in /proc/cpuinfo's flags: nothing to measure" >&2
  exit 1
fi

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/peak.cc" <<'EOF'
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

// Independent accumulators, each starting at its own value so that no compiler may fold them into one chain: 24 of
// the 32 AVX-512 registers (with 12, Zen 5's VDPBF16PS reached 490 of its ~535 GFLOP/s a core: 12 did not cover its
// latency at 2 a cycle; 32 spill), 12 of AVX2's 16.
constexpr int kAcc = 24;
constexpr int kAcc2 = 12;

__attribute__((target("avx512f"))) float fp32_avx512(long n) {
  __m512 acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  __m512 x = _mm512_set1_ps(1e-3f), y = _mm512_set1_ps(0.999f);
  for (long i = 0; i < n; ++i) {
#pragma GCC unroll 24
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_fmadd_ps(x, y, acc[j]);
    asm volatile("" : "+v"(x));
  }
  float s = 0;
  for (auto& a : acc) s += _mm512_reduce_add_ps(a);
  return s;
}

__attribute__((target("avx2,fma"))) float fp32_avx2(long n) {
  __m256 acc[kAcc2];
  for (int j = 0; j < kAcc2; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  __m256 x = _mm256_set1_ps(1e-3f), y = _mm256_set1_ps(0.999f);
  for (long i = 0; i < n; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kAcc2; ++j) acc[j] = _mm256_fmadd_ps(x, y, acc[j]);
    asm volatile("" : "+v"(x));
  }
  float out[8], s = 0;
  for (auto& a : acc) {
    _mm256_storeu_ps(out, a);
    for (float v : out) s += v;
  }
  return s;
}

__attribute__((target("avx512f,avx512bf16"))) float bf16_avx512(long n) {
  __m512 acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3a83), y = (__m512bh)_mm512_set1_epi16(0x3f7f);  // 1e-3, 0.996
  for (long i = 0; i < n; ++i) {
#pragma GCC unroll 24
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], x, y);
    asm volatile("" : "+v"(x));
  }
  float s = 0;
  for (auto& a : acc) s += _mm512_reduce_add_ps(a);
  return s;
}

int main(int argc, char** argv) {
  const char* kind = argv[1];
  const int threads = std::atoi(argv[2]);
  float (*loop)(long) = nullptr;
  double flop_per_iter = 0;  // per loop iteration: kAcc (AVX2: kAcc2) instructions
  if (!std::strcmp(kind, "fp32-avx512")) loop = fp32_avx512, flop_per_iter = kAcc * 16 * 2;
  if (!std::strcmp(kind, "fp32-avx2")) loop = fp32_avx2, flop_per_iter = kAcc2 * 8 * 2;
  if (!std::strcmp(kind, "bf16-avx512")) loop = bf16_avx512, flop_per_iter = kAcc * 16 * 4;
  if (!loop || threads < 1) return 2;
  const auto timed = [&](long n) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    std::vector<float> sink(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { sink[static_cast<size_t>(t)] = loop(n); });
    for (auto& p : pool) p.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  long n = 1 << 16;
  while (timed(n) < 0.3) n *= 2;  // also the warm-up: the clocks settle before the timed loops
  std::vector<double> rates;
  for (int r = 0; r < 5; ++r) rates.push_back(flop_per_iter * static_cast<double>(n) * threads / timed(n) / 1e9);
  std::sort(rates.begin(), rates.end());
  std::printf("{\"kind\": \"%s\", \"threads\": %d, \"gflops\": %.1f, \"gflops_per_thread\": %.1f}\n", kind, threads,
              rates[2], rates[2] / threads);
}
EOF
g++ -O2 -std=c++17 -pthread "$dir/peak.cc" -o "$dir/peak"
for kind in "${kinds[@]}"; do
  "$dir/peak" "$kind" 1
  [ "$threads" -gt 1 ] && "$dir/peak" "$kind" "$threads"
done
exit 0
