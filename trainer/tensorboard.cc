#include "trainer/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "launch/util/error.h"

namespace joule::trainer {
namespace fs = std::filesystem;
namespace {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), a table of 256.
const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// TFRecord's masked checksum: the CRC rotated right by 15 bits plus a constant.
uint32_t masked_crc(const std::string& bytes) {
  const uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(const std::string& in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

// Protocol buffer wire format: a key is (field number << 3) | wire type; 0 varint, 1 64-bit, 2 length-delimited,
// 5 32-bit.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, int field, double v) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 1);
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put_le(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 5);
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  put_le(out, bits, 4);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event (tensorflow/core/util/event.proto): 1 wall_time (double), 2 step (int64), 3 file_version (string),
// 5 summary (Summary).
std::string event(double wall_time, int64_t step, const std::string* file_version, const std::string* summary) {
  std::string e;
  put_double(e, 1, wall_time);
  if (step != 0) {
    put_varint(e, 2 << 3 | 0);
    put_varint(e, static_cast<uint64_t>(step));
  }
  if (file_version) put_bytes(e, 3, *file_version);
  if (summary) put_bytes(e, 5, *summary);
  return e;
}

// Keeps the whole records of `path` whose step is at most `last_step` (the file-version event included); rewrites
// the file when anything goes. Returns how many events went.
int64_t prune(const std::string& path, int64_t last_step) {
  int64_t torn = 0;
  const std::vector<std::string> records = read_tfrecords(path, &torn);
  std::string kept;
  int64_t dropped = 0;
  for (const std::string& r : records) {
    if (event_step(r) > last_step) {
      ++dropped;
      continue;
    }
    kept += tfrecord(r);
  }
  if (dropped > 0 || torn > 0) write_file_atomically(path, kept);
  return dropped;
}

}  // namespace

uint32_t crc32c(const std::string& bytes) {
  const auto& t = crc_table();
  uint32_t c = 0xffffffffu;
  for (const char ch : bytes) c = t[(c ^ static_cast<unsigned char>(ch)) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

std::string tfrecord(const std::string& data) {
  std::string length;
  put_le(length, data.size(), 8);
  std::string out = length;
  put_le(out, masked_crc(length), 4);
  out += data;
  put_le(out, masked_crc(data), 4);
  return out;
}

std::string file_version_event(double wall_time) {
  const std::string version = "brain.Event:2";
  return event(wall_time, 0, &version, nullptr);
}

std::string scalars_event(double wall_time, int64_t step, const Scalars& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {  // Summary: 1 value (Value: 1 tag, 2 simple_value)
    std::string value;
    put_bytes(value, 1, tag);
    put_float(value, 2, static_cast<float>(v));
    put_bytes(summary, 1, value);
  }
  return event(wall_time, step, nullptr, &summary);
}

std::vector<std::string> read_tfrecords(const std::string& path, int64_t* torn_bytes) {
  const std::string bytes = read_text_file(path);
  std::vector<std::string> out;
  size_t at = 0;
  while (at + 12 <= bytes.size()) {
    const std::string length_bytes = bytes.substr(at, 8);
    if (get_le(bytes, at + 8, 4) != masked_crc(length_bytes))
      throw IoError(path + ": the record at byte " + std::to_string(at) + " has a damaged length",
                    "the file is not a TensorBoard event file, or it was damaged: move it out of the tb/ directory");
    const uint64_t length = get_le(bytes, at, 8);
    if (length > bytes.size() - at - 12 || bytes.size() - at - 12 - length < 4) break;  // torn: cut short
    const std::string data = bytes.substr(at + 12, length);
    if (get_le(bytes, at + 12 + length, 4) != masked_crc(data))
      throw IoError(path + ": the record at byte " + std::to_string(at) + " does not match its checksum",
                    "the file was damaged: move it out of the tb/ directory");
    out.push_back(data);
    at += 12 + length + 4;
  }
  if (torn_bytes) *torn_bytes = static_cast<int64_t>(bytes.size() - at);
  return out;
}

int64_t event_step(const std::string& e) {
  size_t at = 0;
  const auto varint = [&]() {
    uint64_t v = 0;
    for (int shift = 0; at < e.size() && shift < 64; shift += 7) {
      const auto b = static_cast<unsigned char>(e[at++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
    }
    return v;
  };
  while (at < e.size()) {
    const uint64_t key = varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (type == 0) {
      const uint64_t v = varint();
      if (field == 2) return static_cast<int64_t>(v);
    } else if (type == 1) {
      at += 8;
    } else if (type == 5) {
      at += 4;
    } else if (type == 2) {
      at += varint();
    } else {
      break;  // not an Event we write
    }
  }
  return 0;
}

TensorBoardLog::TensorBoardLog(const std::string& dir, int64_t start_step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_write_error(dir, "creating the directory", ec.value());
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().find("tfevents") != std::string::npos && entry.is_regular_file(ec))
      dropped_ += prune(entry.path().string(), start_step);
  char host[256] = "host";
  ::gethostname(host, sizeof host - 1);
  const double now = now_seconds();
  // A new file, never another segment's (two opened within a second by one process get a suffix).
  const std::string base = (fs::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." +
                                             host + "." + std::to_string(::getpid())))
                               .string();
  for (int n = 0; !fd_.valid(); ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    if (!fs::exists(path_, ec)) fd_ = open_file(path_, O_WRONLY | O_CREAT | O_EXCL | O_APPEND, "create");
  }
  const std::string first = tfrecord(file_version_event(now));
  write_all(fd_.get(), path_, first.data(), first.size());
}

void TensorBoardLog::scalars(int64_t step, const Scalars& values) {
  const std::string record = tfrecord(scalars_event(now_seconds(), step, values));
  write_all(fd_.get(), path_, record.data(), record.size());
}

}  // namespace joule::trainer
