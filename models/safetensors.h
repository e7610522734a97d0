// safetensors reader/writer (HuggingFace's format): an 8-byte little-endian header length, a JSON
// header mapping each tensor name to {dtype, shape, data_offsets}, then the raw little-endian data.
// Files are treated as hostile: every number in the header is checked before it is used. No LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "launch/util/error.h"

namespace joule::models::safetensors {

// Every problem with a file; the message starts with the file's path.
class FormatError : public joule::Error {
 public:
  explicit FormatError(const std::string& message,
                       std::string hint = "the file is not a complete safetensors file: export or download it again")
      : joule::Error(message, std::move(hint)) {}
};

enum class DType { F32, F16, BF16, F64, I64, I32 };
const char* dtype_name(DType d);  // "F32", ...
size_t dtype_bytes(DType d);
DType dtype_from_name(const std::string& name, const std::string& where);  // throws FormatError

inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section (after the header)
  uint64_t end = 0;
  uint64_t bytes() const { return end - begin; }
  int64_t numel() const;
};

// A parsed header: tensors in file-offset order, the optional string metadata, and where data starts.
struct Header {
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length
};

// Validates `size` bytes of a whole file: header length in range, JSON an object of well-formed
// entries, known dtypes, byte counts matching shapes, offsets inside the data, no overlaps, no gaps,
// no duplicate names. `where` (the file path) starts every error message.
Header parse(const uint8_t* data, uint64_t size, const std::string& where);

// A read-only mapping of a safetensors file, validated on open.
class File {
 public:
  static File open(const std::string& path);
  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  const std::string& path() const { return path_; }
  const Header& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const TensorInfo* find(const std::string& name) const;  // nullptr when absent
  const uint8_t* data(const TensorInfo& t) const { return base_ + header_.data_start + t.begin; }

 private:
  File() = default;
  std::string path_;
  Header header_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // dtype_bytes(dtype) * numel(shape) bytes, little-endian
};

// Writes atomically: into PATH.tmp, fsync, rename. Names must be unique; the header is padded with
// spaces to a multiple of 8 bytes as the reference writer does.
void write(const std::string& path, const std::vector<TensorToWrite>& tensors,
           const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace joule::models::safetensors
