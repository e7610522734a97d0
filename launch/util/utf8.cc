#include "launch/util/utf8.h"

#include <cstdint>
#include <cstdio>

namespace joule {

std::string utf8_problem(const std::string& text) {
  size_t line = 1;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t n = 4;  // continuation bytes; 4: not a lead byte
    uint32_t cp = 0;
    if (c < 0x80)
      n = 0, cp = c;
    else if ((c >> 5) == 0x6)
      n = 1, cp = c & 0x1Fu;
    else if ((c >> 4) == 0xE)
      n = 2, cp = c & 0x0Fu;
    else if ((c >> 3) == 0x1E)
      n = 3, cp = c & 0x07u;
    bool ok = n < 4 && i + n < text.size();
    for (size_t k = 1; ok && k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    // No overlong forms, no surrogates, nothing above U+10FFFF.
    if (ok && n > 0)
      ok = cp >= (n == 1 ? 0x80u : n == 2 ? 0x800u : 0x10000u) && !(cp >= 0xD800 && cp <= 0xDFFF) && cp <= 0x10FFFF;
    if (!ok) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "line %zu, byte %zu (0x%02x): not valid UTF-8", line, i + 1, c);
      return buf;
    }
    if (c == '\n') ++line;
    i += n + 1;
  }
  return "";
}

}  // namespace joule
