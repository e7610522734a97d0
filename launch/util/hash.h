// The hashes joule uses, one of each. No LibTorch.
// - Fnv1a64: FNV-1a (64-bit), the checksum joule writes beside files it must recognise again (checkpoint manifests,
//   data-set shards) and the content fingerprint of the shard index. Not cryptographic: it finds damage and
//   mix-ups, not tampering.
// - mix64: SplitMix64's output function (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
//   OOPSLA 2014), a bijective 64-bit mix whose outputs for consecutive counters pass BigCrush: the global shuffle's
//   Feistel rounds, dropout's counter-based masks and data creation's generator all draw from it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace joule {

// SplitMix64's increment (2^64 / golden ratio): counter k's draw is mix64(seed + k * kGoldenGamma).
inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;

inline constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class Fnv1a64 {
 public:
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
  }
  void add(std::string_view s) { add(s.data(), s.size()); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

// 16 lower-case hex digits.
std::string hex64(uint64_t v);
std::string fnv1a64_hex(std::string_view text);
// Adds `length` bytes of `path` from `offset` (to the end of the file by default) to `h`; IoError names the file.
void add_file(Fnv1a64& h, const std::string& path, uint64_t offset = 0, uint64_t length = UINT64_MAX);
uint64_t fnv1a64_file(const std::string& path);

}  // namespace joule
