#include "data/run_deflate.h"

#include <libdeflate.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "launch/util/error.h"

namespace joule::data {
namespace {

constexpr int kLitLenSymbols = 286, kEndOfBlock = 256, kMaxCodeLength = 15, kMaxCodeLengthCodeLength = 7;
constexpr int kMaxMatch = 258, kMinMatch = 3;

// RFC 1951 3.2.5: the length symbols 257..285, their base lengths and extra bits.
constexpr std::array<uint16_t, 29> kLengthBase = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                                  31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr std::array<uint8_t, 29> kLengthExtra = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                                  2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};

// A match length's symbol (index into kLengthBase) for every length 3..258.
struct LengthTable {
  std::array<uint8_t, kMaxMatch + 1> code{};
  LengthTable() {
    // Each symbol up to the next one's base: 258 gets its own symbol (285), not 284 with all extra bits set.
    for (int c = 0; c < 29; ++c)
      for (int len = kLengthBase[c]; len < (c + 1 < 29 ? kLengthBase[c + 1] : kMaxMatch + 1); ++len)
        code[len] = static_cast<uint8_t>(c);
  }
};
const LengthTable kLengthTable;

// The block's symbols as values: a literal byte (0-255), or 256 + the length of a run (a match at distance 1).
constexpr uint16_t kRun = 256;

// Sorts keys weight << 16 | symbol (symbols ascending among equal weights): a two-pass radix sort on the weight's two
// low bytes when every weight fits in them (all of a shard chunk's do), else std::sort.
void sort_by_weight(uint64_t* keys, int n) {
  uint64_t max_key = 0;
  for (int i = 0; i < n; ++i) max_key = std::max(max_key, keys[i]);
  if (n < 32 || max_key >= (uint64_t{1} << 32)) {
    std::sort(keys, keys + n);
    return;
  }
  std::array<uint64_t, kLitLenSymbols> scratch;
  uint64_t* from = keys;
  uint64_t* to = scratch.data();
  for (int shift = 16; shift < 32; shift += 8) {  // stable passes, low byte first: ties keep their symbol order
    std::array<int, 257> start{};
    for (int i = 0; i < n; ++i) ++start[(from[i] >> shift & 0xFF) + 1];
    for (int b = 0; b < 256; ++b) start[static_cast<size_t>(b + 1)] += start[static_cast<size_t>(b)];
    for (int i = 0; i < n; ++i) to[start[from[i] >> shift & 0xFF]++] = from[i];
    std::swap(from, to);
  }
}

// Code lengths for `freq` (symbols with frequency 0 get length 0), no longer than `max_length`: Moffat and
// Katajainen's in-place minimum-redundancy lengths, then the Kraft sum brought back to 1 by lengthening the deepest
// codes' shorter neighbours (as miniz does). At least two symbols get a code (a lone symbol is paired with a dummy),
// so that every inflater accepts the code as complete.
void code_lengths(const uint32_t* freq, int symbols, int max_length, uint8_t* lengths) {
  // Used symbols as weight << 16 | symbol, sorted by weight: integer keys sort fastest.
  std::array<uint64_t, kLitLenSymbols> used;
  int n = 0;
  for (int s = 0; s < symbols; ++s)
    if (freq[s]) used[static_cast<size_t>(n++)] = static_cast<uint64_t>(freq[s]) << 16 | static_cast<uint64_t>(s);
  for (int s = 0; n < 2; ++s)  // pad to two symbols
    if (!freq[s]) used[static_cast<size_t>(n++)] = uint64_t{1} << 16 | static_cast<uint64_t>(s);
  sort_by_weight(used.data(), n);

  std::array<uint32_t, kLitLenSymbols> a;
  for (int i = 0; i < n; ++i) a[static_cast<size_t>(i)] = static_cast<uint32_t>(used[static_cast<size_t>(i)] >> 16);
  // Phase 1: internal nodes' weights, each replaced by its parent's index once used.
  a[0] += a[1];
  int root = 0, leaf = 2;
  for (int next = 1; next < n - 1; ++next) {
    if (leaf >= n || a[static_cast<size_t>(root)] < a[static_cast<size_t>(leaf)]) {
      a[static_cast<size_t>(next)] = a[static_cast<size_t>(root)];
      a[static_cast<size_t>(root++)] = static_cast<uint32_t>(next);
    } else {
      a[static_cast<size_t>(next)] = a[static_cast<size_t>(leaf++)];
    }
    if (leaf >= n || (root < next && a[static_cast<size_t>(root)] < a[static_cast<size_t>(leaf)])) {
      a[static_cast<size_t>(next)] += a[static_cast<size_t>(root)];
      a[static_cast<size_t>(root++)] = static_cast<uint32_t>(next);
    } else {
      a[static_cast<size_t>(next)] += a[static_cast<size_t>(leaf++)];
    }
  }
  // Phase 2: internal nodes' depths.
  a[static_cast<size_t>(n - 2)] = 0;
  for (int next = n - 3; next >= 0; --next) a[static_cast<size_t>(next)] = a[a[static_cast<size_t>(next)]] + 1;
  // Phase 3: leaves' depths, the heaviest (last) shallowest.
  int available = 1, depth = 0, next = n - 1;
  root = n - 2;
  while (available > 0) {
    int internal = 0;
    while (root >= 0 && a[static_cast<size_t>(root)] == static_cast<uint32_t>(depth)) {
      ++internal;
      --root;
    }
    while (available > internal) {
      a[static_cast<size_t>(next--)] = static_cast<uint32_t>(depth);
      --available;
    }
    available = 2 * internal;
    ++depth;
  }
  // Limit the depth: count codes per length (deeper ones counted at max_length), then restore the Kraft equality.
  std::array<int, kMaxCodeLength + 1> count{};
  for (int i = 0; i < n; ++i)
    ++count[static_cast<size_t>(std::min<uint32_t>(a[static_cast<size_t>(i)], static_cast<uint32_t>(max_length)))];
  uint32_t kraft = 0;
  for (int len = max_length; len > 0; --len)
    kraft += static_cast<uint32_t>(count[static_cast<size_t>(len)]) << (max_length - len);
  while (kraft != (1u << max_length)) {
    --count[static_cast<size_t>(max_length)];
    for (int len = max_length - 1; len > 0; --len)
      if (count[static_cast<size_t>(len)]) {
        --count[static_cast<size_t>(len)];
        count[static_cast<size_t>(len + 1)] += 2;
        break;
      }
    --kraft;
  }
  std::fill(lengths, lengths + symbols, 0);
  for (int len = 1, i = n; len <= max_length; ++len)
    for (int k = count[static_cast<size_t>(len)]; k > 0; --k)
      lengths[used[static_cast<size_t>(--i)] & 0xFFFF] = static_cast<uint8_t>(len);
}

// Every byte with its bits in reverse order.
struct ReversedBytes {
  std::array<uint8_t, 256> bits{};
  ReversedBytes() {
    for (int b = 0; b < 256; ++b)
      for (int k = 0; k < 8; ++k)
        if (b >> k & 1) bits[static_cast<size_t>(b)] |= static_cast<uint8_t>(1 << (7 - k));
  }
};
const ReversedBytes kReversedByte;

// Canonical codes (RFC 1951 3.2.2), bit-reversed: deflate sends Huffman codes most significant bit first into an
// LSB-first bit stream.
void canonical_codes(const uint8_t* lengths, int symbols, uint16_t* codes) {
  std::array<uint16_t, kMaxCodeLength + 2> count{}, next{};
  for (int s = 0; s < symbols; ++s) ++count[lengths[s]];
  count[0] = 0;
  for (int len = 1, code = 0; len <= kMaxCodeLength; ++len) {
    code = (code + count[static_cast<size_t>(len - 1)]) << 1;
    next[static_cast<size_t>(len)] = static_cast<uint16_t>(code);
  }
  for (int s = 0; s < symbols; ++s) {
    const int len = lengths[s];
    if (!len) continue;
    const uint32_t code = next[static_cast<size_t>(len)]++;
    const uint32_t reversed16 =
        static_cast<uint32_t>(kReversedByte.bits[code & 0xFF]) << 8 | kReversedByte.bits[code >> 8];
    codes[s] = static_cast<uint16_t>(reversed16 >> (16 - len));
  }
}

// An LSB-first bit writer into a buffer sized beforehand, with 8 bytes of slack. add() only gathers bits (at most 56
// before a flush); flush() stores the whole 64-bit buffer and advances by the bytes completed (no branch).
class BitWriter {
 public:
  explicit BitWriter(uint8_t* out) : out_(out) {}
  void add(uint64_t bits, int count) {
    buffer_ |= bits << filled_;
    filled_ += count;
  }
  void flush() {
    std::memcpy(out_, &buffer_, 8);
    out_ += filled_ >> 3;
    buffer_ >>= filled_ & ~7;
    filled_ &= 7;
  }
  void put(uint64_t bits, int count) {  // count <= 49
    add(bits, count);
    flush();
  }
  uint8_t* finish() {  // the last, partial byte, padded with zeros
    if (filled_ > 0) *out_++ = static_cast<uint8_t>(buffer_);
    return out_;
  }

 private:
  uint8_t* out_;
  uint64_t buffer_ = 0;
  int filled_ = 0;
};

// Bytes equal to `b` from p[0] on, at most `limit`.
size_t run_length(const uint8_t* p, size_t limit, uint8_t b) {
  const uint64_t pattern = 0x0101010101010101ull * b;
  size_t n = 0;
  while (n + 8 <= limit) {
    uint64_t word;
    std::memcpy(&word, p + n, 8);
    if (const uint64_t diff = word ^ pattern) return n + static_cast<size_t>(__builtin_ctzll(diff) / 8);
    n += 8;
  }
  while (n < limit && p[n] == b) ++n;
  return n;
}

}  // namespace

void zlib_compress_runs(const uint8_t* in, size_t size, std::string& out) {
  if (size > UINT32_MAX)
    throw joule::InternalError("zlib_compress_runs: an input over 4 GiB (symbol counts are 32-bit)");
  // 1. The block's symbols: each byte a literal, and the bytes repeating it after it as runs (distance 1).
  thread_local std::vector<uint16_t> tokens;
  tokens.resize(size + 1);
  uint16_t* token = tokens.data();
  std::array<uint32_t, kLitLenSymbols> freq{};
  for (size_t i = 0; i < size;) {
    const uint8_t b = in[i++];
    *token++ = b;
    ++freq[b];
    if (i + 2 > size || in[i] != b || in[i + 1] != b) continue;  // fewer than 2 repeats: literals (runs start at 3)
    size_t run = run_length(in + i, size - i, b);
    i += run;
    for (; run >= kMinMatch; run -= std::min<size_t>(run, kMaxMatch)) {
      const size_t len = std::min<size_t>(run, kMaxMatch);
      *token++ = static_cast<uint16_t>(kRun + len);
      ++freq[257u + kLengthTable.code[len]];
    }
    for (; run > 0; --run) {
      *token++ = b;
      ++freq[b];
    }
  }
  const uint16_t* const tokens_end = token;
  freq[kEndOfBlock] = 1;

  // 2. The codes: literal/length by frequency; one distance code (distance 1), one bit long.
  std::array<uint8_t, kLitLenSymbols + 1> lengths{};  // literal/length lengths, then the distance code's
  std::array<uint16_t, kLitLenSymbols> codes{};
  code_lengths(freq.data(), kLitLenSymbols, kMaxCodeLength, lengths.data());
  canonical_codes(lengths.data(), kLitLenSymbols, codes.data());
  int literal_codes = kLitLenSymbols;
  while (literal_codes > 257 && lengths[static_cast<size_t>(literal_codes - 1)] == 0) --literal_codes;
  lengths[static_cast<size_t>(literal_codes)] = 1;  // the distance code

  // 3. The code lengths, run-length coded (RFC 1951 3.2.7: 16 repeats the previous length 3-6 times, 17 and 18 are
  // 3-10 and 11-138 zeros), and the Huffman code of that alphabet.
  struct CodeLength {
    uint8_t symbol, extra_bits, extra;
  };
  std::array<CodeLength, kLitLenSymbols + 1> cl_tokens;
  int cl_count = 0;
  std::array<uint32_t, 19> cl_freq{};
  const int total_lengths = literal_codes + 1;
  for (int i = 0; i < total_lengths;) {
    const uint8_t len = lengths[static_cast<size_t>(i)];
    int run = 1;
    while (i + run < total_lengths && lengths[static_cast<size_t>(i + run)] == len) ++run;
    i += run;
    if (len == 0) {
      for (; run >= 11; run -= std::min(run, 138))
        cl_tokens[static_cast<size_t>(cl_count++)] = {18, 7, static_cast<uint8_t>(std::min(run, 138) - 11)};
      if (run >= 3) {
        cl_tokens[static_cast<size_t>(cl_count++)] = {17, 3, static_cast<uint8_t>(run - 3)};
        run = 0;
      }
    } else {
      cl_tokens[static_cast<size_t>(cl_count++)] = {len, 0, 0};
      for (--run; run >= 3; run -= std::min(run, 6))
        cl_tokens[static_cast<size_t>(cl_count++)] = {16, 2, static_cast<uint8_t>(std::min(run, 6) - 3)};
    }
    for (; run > 0; --run) cl_tokens[static_cast<size_t>(cl_count++)] = {len, 0, 0};
  }
  for (int t = 0; t < cl_count; ++t) ++cl_freq[cl_tokens[static_cast<size_t>(t)].symbol];
  std::array<uint8_t, 19> cl_lengths{};
  std::array<uint16_t, 19> cl_codes{};
  code_lengths(cl_freq.data(), 19, kMaxCodeLengthCodeLength, cl_lengths.data());
  canonical_codes(cl_lengths.data(), 19, cl_codes.data());
  static constexpr uint8_t kOrder[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
  int cl_sent = 19;
  while (cl_sent > 4 && cl_lengths[kOrder[cl_sent - 1]] == 0) --cl_sent;

  // 4. The stream: zlib header, the block, Adler-32 of the input.
  thread_local std::vector<uint8_t> buffer;
  const size_t bound = 2 + 400 + size * kMaxCodeLength / 8 + 8 + 4 + 8;  // + 8: the bit writer's slack
  if (buffer.size() < bound) buffer.resize(bound);
  buffer[0] = 0x78;  // deflate, 32 KiB window
  buffer[1] = 0x01;  // "fastest" compression level, no dictionary; (0x78 << 8 | 0x01) % 31 == 0
  BitWriter bits(buffer.data() + 2);
  bits.put(1, 1);  // the final block
  bits.put(2, 2);  // dynamic Huffman codes
  bits.put(static_cast<uint64_t>(literal_codes - 257), 5);
  bits.put(0, 5);  // one distance code
  bits.put(static_cast<uint64_t>(cl_sent - 4), 4);
  for (int i = 0; i < cl_sent; ++i) bits.put(cl_lengths[kOrder[i]], 3);
  for (int t = 0; t < cl_count; ++t) {
    const CodeLength& c = cl_tokens[static_cast<size_t>(t)];
    bits.put(cl_codes[c.symbol], cl_lengths[c.symbol]);
    if (c.extra_bits) bits.put(c.extra, c.extra_bits);
  }
  // Every value's bits: a literal's code; a run's length code, extra bits and the distance code (one 0 bit). Two
  // values (at most 2 x 21 bits) go out per flush.
  struct Bits {
    uint32_t bits;
    uint32_t count;
  };
  std::array<Bits, kRun + kMaxMatch + 1> table;
  for (int b = 0; b < 256; ++b)
    table[static_cast<size_t>(b)] = {codes[static_cast<size_t>(b)], lengths[static_cast<size_t>(b)]};
  for (int len = kMinMatch; len <= kMaxMatch; ++len) {
    const size_t c = kLengthTable.code[static_cast<size_t>(len)], symbol = 257 + c;
    table[kRun + static_cast<size_t>(len)] = {codes[symbol] | static_cast<uint32_t>(len - kLengthBase[c])
                                                                  << lengths[symbol],
                                              lengths[symbol] + kLengthExtra[c] + 1u};
  }
  const uint16_t* t = tokens.data();
  for (; t + 2 <= tokens_end; t += 2) {
    bits.add(table[t[0]].bits, static_cast<int>(table[t[0]].count));
    bits.add(table[t[1]].bits, static_cast<int>(table[t[1]].count));
    bits.flush();
  }
  if (t < tokens_end) bits.put(table[*t].bits, static_cast<int>(table[*t].count));
  bits.put(codes[kEndOfBlock], lengths[kEndOfBlock]);
  uint8_t* end = bits.finish();
  const uint32_t adler = libdeflate_adler32(1, in, size);
  for (int shift = 24; shift >= 0; shift -= 8) *end++ = static_cast<uint8_t>(adler >> shift);
  const size_t written = static_cast<size_t>(end - buffer.data());
  if (written > bound) throw joule::InternalError("zlib_compress_runs: the stream overran its bound");
  out.assign(reinterpret_cast<const char*>(buffer.data()), written);
}

}  // namespace joule::data
