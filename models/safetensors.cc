#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "launch/util/json_field.h"

#include "launch/util/file_io.h"

namespace joule::models::safetensors {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& what) { throw FormatError(where + ": " + what); }

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

uint64_t get_offset(const json& v, const std::string& where, const std::string& name) {
  if (!v.is_number_unsigned())
    fail(where, "tensor '" + name + "': data_offsets must be non-negative integers, found " + v.dump());
  return v.get<uint64_t>();
}

}  // namespace

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::F64:
      return "F64";
    case DType::I64:
      return "I64";
    case DType::I32:
      return "I32";
  }
  return "?";
}

size_t dtype_bytes(DType d) {
  switch (d) {
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F64:
    case DType::I64:
      return 8;
  }
  return 0;
}

DType dtype_from_name(const std::string& name, const std::string& where) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32})
    if (name == dtype_name(d)) return d;
  fail(where, "unsupported dtype '" + name + "' (joule reads F32, F16, BF16, F64, I64, I32)");
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Header parse(const uint8_t* data, uint64_t size, const std::string& where) {
  if (size < 8)
    fail(where,
         "truncated: " + std::to_string(size) + " bytes, but a safetensors file starts with an 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > kMaxHeaderBytes)
    fail(where, "header length " + std::to_string(header_len) + " exceeds the " + std::to_string(kMaxHeaderBytes) +
                    "-byte limit (not a safetensors file?)");
  if (header_len > size - 8)
    fail(where, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                    std::to_string(size) + " bytes): truncated or not a safetensors file");
  if (header_len < 2 || data[8] != '{') fail(where, "header does not start with '{' (not a safetensors file?)");

  // nlohmann::json keeps the last of duplicate keys silently, so detect duplicates while parsing.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key) {
      const std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(data + 8, data + 8 + header_len, on_event);
  } catch (const json::exception& e) {
    fail(where, "header: " + joule::json_syntax_problem(std::string(data + 8, data + 8 + header_len), e));
  }
  if (!duplicate.empty()) fail(where, "duplicate tensor name '" + duplicate + "' in the header");
  if (!j.is_object()) fail(where, "header is not a JSON object");

  Header h;
  h.data_start = 8 + header_len;
  const uint64_t data_bytes = size - h.data_start;
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(where, "__metadata__ must be an object of strings");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail(where, "__metadata__ value for '" + k + "' must be a string, found " + v.dump());
        h.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
      fail(where, "tensor '" + name + "': entry must be an object with dtype, shape and data_offsets");
    TensorInfo t;
    t.name = name;
    if (!entry["dtype"].is_string()) fail(where, "tensor '" + name + "': dtype must be a string");
    t.dtype = dtype_from_name(entry["dtype"].get<std::string>(), where + ": tensor '" + name + "'");
    const json& shape = entry["shape"];
    if (!shape.is_array()) fail(where, "tensor '" + name + "': shape must be an array");
    uint64_t numel = 1;
    for (const json& d : shape) {
      if (!d.is_number_unsigned())
        fail(where, "tensor '" + name + "': shape entries must be non-negative integers, found " + d.dump());
      uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(INT64_MAX) || mul_overflows(numel, dim, &numel))
        fail(where, "tensor '" + name + "': shape " + shape.dump() + " overflows");
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const json& off = entry["data_offsets"];
    if (!off.is_array() || off.size() != 2) fail(where, "tensor '" + name + "': data_offsets must be [begin, end]");
    t.begin = get_offset(off[0], where, name);
    t.end = get_offset(off[1], where, name);
    if (t.begin > t.end)
      fail(where, "tensor '" + name + "': data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                      "] are reversed");
    if (t.end > data_bytes)
      fail(where, "tensor '" + name + "': data_offsets end " + std::to_string(t.end) +
                      " is out of range (the data section holds " + std::to_string(data_bytes) +
                      " bytes): truncated file?");
    uint64_t expected = 0;
    if (mul_overflows(numel, dtype_bytes(t.dtype), &expected) || expected != t.bytes())
      fail(where, "tensor '" + name + "': shape " + shape.dump() + " of " + dtype_name(t.dtype) + " needs " +
                      std::to_string(numel * dtype_bytes(t.dtype)) + " bytes but data_offsets span " +
                      std::to_string(t.bytes()));
    h.tensors.push_back(std::move(t));
  }

  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const TensorInfo& t = h.tensors[i];
    if (t.begin < cursor)
      fail(where, "tensor '" + t.name + "' [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                      ") overlaps tensor '" + h.tensors[i - 1].name + "' which ends at " + std::to_string(cursor));
    if (t.begin > cursor)
      fail(where, "bytes [" + std::to_string(cursor) + ", " + std::to_string(t.begin) +
                      ") of the data section belong to no tensor (gap before '" + t.name + "')");
    cursor = t.end;
  }
  if (cursor != data_bytes)
    fail(where, std::to_string(data_bytes - cursor) + " trailing bytes after the last tensor belong to no tensor");
  return h;
}

File File::open(const std::string& path) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
  File f;
  f.path_ = path;
  f.size_ = static_cast<uint64_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (p == MAP_FAILED) fail(path, std::string("cannot map: ") + std::strerror(errno));
    f.base_ = static_cast<const uint8_t*>(p);
  }
  f.header_ = parse(f.base_, f.size_, path);  // on throw, f's destructor unmaps
  return f;
}

File::File(File&& o) noexcept
    : path_(std::move(o.path_)), header_(std::move(o.header_)), base_(o.base_), size_(o.size_) {
  o.base_ = nullptr;
  o.size_ = 0;
}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (base_) munmap(const_cast<uint8_t*>(base_), size_);
    path_ = std::move(o.path_);
    header_ = std::move(o.header_);
    base_ = o.base_;
    size_ = o.size_;
    o.base_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

File::~File() {
  if (base_) munmap(const_cast<uint8_t*>(base_), size_);
}

const TensorInfo* File::find(const std::string& name) const {
  for (const TensorInfo& t : header_.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

void write(const std::string& path, const std::vector<TensorToWrite>& tensors,
           const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second)
      fail(path, "cannot write tensor name '" + t.name + "' twice (or the reserved name __metadata__)");
    uint64_t bytes = dtype_bytes(t.dtype);
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicFile out(path);
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  out.write(len_bytes, 8);
  out.write(text);
  for (const TensorToWrite& t : tensors) {
    uint64_t bytes = dtype_bytes(t.dtype);
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
    out.write(t.data, bytes);
  }
  out.commit();
}

}  // namespace joule::models::safetensors
