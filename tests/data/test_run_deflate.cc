// zlib_compress_runs: every stream inflates (zlib, the library HDF5's deflate filter calls) to its input exactly,
// runs compress to almost nothing, and skewed byte frequencies that would need codes over 15 bits are limited.
#include <gtest/gtest.h>
#include <zlib.h>

#include <random>
#include <string>
#include <vector>

#include "data/run_deflate.h"

namespace {

std::vector<uint8_t> inflate_all(const std::string& stream, size_t size) {
  std::vector<uint8_t> out(size + 1);
  uLongf out_size = static_cast<uLongf>(out.size());
  const int rc = uncompress(out.data(), &out_size, reinterpret_cast<const Bytef*>(stream.data()),
                            static_cast<uLong>(stream.size()));
  EXPECT_EQ(rc, Z_OK) << "zlib refused the stream";
  out.resize(out_size);
  return out;
}

std::string round_trip(const std::vector<uint8_t>& in) {
  std::string stream;
  joule::data::zlib_compress_runs(in.data(), in.size(), stream);
  EXPECT_EQ(inflate_all(stream, in.size()), in);
  return stream;
}

TEST(RunDeflate, EdgeCasesInflateToTheirInput) {
  round_trip({});
  round_trip({7});
  round_trip({0, 0});
  round_trip({0, 0, 0});
  round_trip({1, 2});
  round_trip({255, 255, 255, 255, 0});
}

TEST(RunDeflate, RunsOfEveryLengthAroundTheMatchLimits) {
  std::vector<uint8_t> in;
  for (int len = 1; len <= 800; ++len) in.insert(in.end(), static_cast<size_t>(len), static_cast<uint8_t>(len % 3));
  round_trip(in);
}

TEST(RunDeflate, RunsCompressToAlmostNothing) {
  EXPECT_LT(round_trip(std::vector<uint8_t>(32768, 0)).size(), 100u);
  // An input mask chunk: 64 rows of ones then zeros.
  std::vector<uint8_t> mask;
  for (int r = 0; r < 64; ++r)
    for (int i = 0; i < 128; ++i) mask.push_back(i < 90 + r / 2 ? 1 : 0);
  EXPECT_LT(round_trip(mask).size(), 64u * 8);
}

TEST(RunDeflate, RandomBytesAndRandomRunStructure) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<uint8_t> in;
    const size_t size = rng() % 40000;
    const int alphabet = 1 + static_cast<int>(rng() % 256);
    while (in.size() < size) {
      const size_t run = rng() % 4 == 0 ? rng() % 600 : 1;
      in.insert(in.end(), std::min(run, size - in.size()),
                static_cast<uint8_t>(rng() % static_cast<uint64_t>(alphabet)));
    }
    round_trip(in);
  }
}

TEST(RunDeflate, SkewedFrequenciesGetCodesOfAtMost15Bits) {
  // Byte k appears fib(k) times, never twice in a row: an unlimited Huffman code would be ~25 bits deep.
  std::vector<uint64_t> fib = {1, 1};
  while (fib.size() < 26) fib.push_back(fib[fib.size() - 1] + fib[fib.size() - 2]);
  std::vector<uint8_t> in;
  std::vector<uint64_t> left = fib;
  for (bool any = true; any;) {
    any = false;
    for (size_t k = 0; k < left.size(); ++k)
      if (left[k]) {
        in.push_back(static_cast<uint8_t>(k));
        --left[k];
        any = true;
      }
  }
  round_trip(in);
}

}  // namespace
