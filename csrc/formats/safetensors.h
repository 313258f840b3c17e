#pragma once
// A safetensors reader over a memory map:
//
//   u64 header_len (LE) | header_len bytes of JSON | data
//   JSON: { "<name>": {"dtype": "F32", "shape": [r, c], "data_offsets": [begin, end]}, ...,
//           "__metadata__": {"k": "v"} }     (offsets relative to the start of the data)
//
// The header is untrusted: its size, every offset and every shape is checked against the file.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/tensor.h"

namespace ossa {

class MappedFile;

struct SafetensorsInfo {
  std::string name;
  std::string dtype;  // as written: "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // relative to the data section
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::vector<SafetensorsInfo>& tensors() const { return tensors_; }
  const SafetensorsInfo* find_tensor(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A rows x cols view (rows = product of all but the last dimension; a vector is 1 x n).
  // Throws ModelError naming the dtype for anything but F32/F16/BF16.
  TensorView view(const SafetensorsInfo& info) const;
  // The tensor's bytes as stored (any dtype; info.end - info.begin of them, checked in open()).
  const uint8_t* bytes(const SafetensorsInfo& info) const;
  const std::string& path() const;
  std::shared_ptr<MappedFile> file() const { return file_; }

 private:
  std::shared_ptr<MappedFile> file_;
  std::vector<SafetensorsInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  uint64_t data_offset_ = 0;
};

}  // namespace ossa
