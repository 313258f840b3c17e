#pragma once
// A GGUF (v2/v3) reader over a memory map. Every offset, count and size is checked against the
// file before use, so a corrupt or truncated file raises ModelError instead of crashing.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "formats/tensor.h"

namespace ossa {

class MappedFile;

enum class GGUFType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

struct GGUFValue;
using GGUFArray = std::vector<GGUFValue>;

// Scalars are widened: all integers to int64/uint64, floats to double. Arrays keep their element
// type.
struct GGUFValue {
  GGUFType type = GGUFType::UINT8;
  GGUFType elem_type = GGUFType::UINT8;  // for ARRAY
  std::variant<int64_t, uint64_t, double, bool, std::string, std::shared_ptr<GGUFArray>> value;
};

struct GGUFTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ne[0] is the contiguous dimension
  uint32_t ggml_type = 0;
  uint64_t offset = 0;  // relative to the data section
};

class GGUFFile {
 public:
  // Parses the file's header, or returns the GGUFFile already open for it: while one is alive
  // (a loaded model holds its shards), opening the same file again (the tokenizer, the metadata,
  // the shard list of one LLM(...)) shares its parse, as long as the path names the same inode
  // with the same size and the same header bytes (a file rewritten or replaced is parsed anew).
  static std::shared_ptr<GGUFFile> open(const std::string& path);

  uint32_t version() const { return version_; }
  const std::map<std::string, GGUFValue>& metadata() const { return metadata_; }
  const GGUFValue* find(const std::string& key) const;

  // Typed accessors; a missing key gives the default, a key of the wrong type throws ModelError.
  std::string get_string(const std::string& key, const std::string& dflt = "") const;
  int64_t get_int(const std::string& key, int64_t dflt) const;
  double get_float(const std::string& key, double dflt) const;
  bool get_bool(const std::string& key, bool dflt) const;
  std::vector<std::string> get_string_array(const std::string& key) const;  // empty if missing
  std::vector<double> get_float_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;

  const std::vector<GGUFTensorInfo>& tensors() const { return tensors_; }
  const GGUFTensorInfo* find_tensor(const std::string& name) const;
  // A view of a tensor as a rows x cols matrix (rows = product of ne[1..]); throws ModelError for
  // unsupported types or data past the end of the file.
  TensorView view(const GGUFTensorInfo& info) const;

  std::shared_ptr<MappedFile> file() const { return file_; }

 private:
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  std::map<std::string, GGUFValue> metadata_;
  std::vector<GGUFTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
  uint64_t data_offset_ = 0;
  // What open() compares before sharing this parse: the file's identity and its header's bytes.
  uint64_t dev_ = 0, ino_ = 0;
  std::vector<uint8_t> header_;

  static std::shared_ptr<GGUFFile> parse(const std::string& path);
};

}  // namespace ossa
