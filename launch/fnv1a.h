// FNV-1a (64-bit): the checksum joule writes beside files it must recognise again (checkpoint manifests, data-set
// shards) and the content fingerprint of the shard index. Not cryptographic: it finds damage and mix-ups, not
// tampering. Header-only, no LibTorch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>

#include "launch/error.h"

namespace joule::launch {

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

inline std::string hex64(uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(v));
  return s;
}

inline std::string fnv1a64_hex(std::string_view text) {
  Fnv1a64 h;
  h.add(text);
  return hex64(h.value());
}

// Adds `length` bytes of `path` from `offset` (to the end of the file by default) to `h`; IoError names the file.
inline void add_file(Fnv1a64& h, const std::string& path, uint64_t offset = 0, uint64_t length = UINT64_MAX) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw joule::IoError(path + ": cannot open to checksum it");
  in.seekg(static_cast<std::streamoff>(offset));
  char buf[1 << 16];
  while (length > 0 && in.read(buf, static_cast<std::streamsize>(std::min<uint64_t>(sizeof buf, length))).gcount() > 0) {
    h.add(buf, static_cast<size_t>(in.gcount()));
    length -= static_cast<uint64_t>(in.gcount());
  }
  if (in.bad()) throw joule::IoError(path + ": read error while checksumming it");
}

inline uint64_t fnv1a64_file(const std::string& path) {
  Fnv1a64 h;
  add_file(h, path);
  return h.value();
}

}  // namespace joule::launch
