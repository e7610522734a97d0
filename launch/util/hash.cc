#include "launch/util/hash.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "launch/util/error.h"

namespace joule {

std::string hex64(uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(v));
  return s;
}

std::string fnv1a64_hex(std::string_view text) {
  Fnv1a64 h;
  h.add(text);
  return hex64(h.value());
}

void add_file(Fnv1a64& h, const std::string& path, uint64_t offset, uint64_t length) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open to checksum it");
  in.seekg(static_cast<std::streamoff>(offset));
  char buf[1 << 16];
  while (length > 0 &&
         in.read(buf, static_cast<std::streamsize>(std::min<uint64_t>(sizeof buf, length))).gcount() > 0) {
    h.add(buf, static_cast<size_t>(in.gcount()));
    length -= static_cast<uint64_t>(in.gcount());
  }
  if (in.bad()) throw IoError(path + ": read error while checksumming it");
}

uint64_t fnv1a64_file(const std::string& path) {
  Fnv1a64 h;
  add_file(h, path);
  return h.value();
}

}  // namespace joule
