#include "formats/safetensors.h"

#include <cstring>
#include <string_view>

#include "util/error.h"
#include "util/json.h"
#include "util/mmap.h"

namespace ossa {

namespace {

constexpr uint64_t k_max_header_bytes = uint64_t{100} << 20;  // the format's own limit (100 MB)

int dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2" || dtype == "F8_E8M0")
    return 1;
  return 0;
}

uint64_t get_u64(const JsonValue& v, const std::string& what) {
  if (!v.is_number() || !v.is_integer || v.integer < 0)
    throw ModelError(what + " must be a non-negative integer");
  return static_cast<uint64_t>(v.integer);
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto st = std::make_shared<SafetensorsFile>();
  st->file_ = std::make_shared<MappedFile>(path);
  const MappedFile& f = *st->file_;
  const std::string where = "safetensors file '" + path + "'";
  if (f.size() < 8)
    throw ModelError("corrupt " + where + ": shorter than its 8-byte header length");
  uint64_t header_len;
  std::memcpy(&header_len, f.data(), 8);
  if (header_len > k_max_header_bytes || header_len > f.size() - 8)
    throw ModelError("corrupt " + where + ": header length " + std::to_string(header_len) +
                     " exceeds the file size or 100 MB (truncated?)");
  st->data_offset_ = 8 + header_len;
  const uint64_t data_size = f.size() - st->data_offset_;
  const JsonValue header = parse_json(std::string_view(reinterpret_cast<const char*>(f.data() + 8),
                                                       static_cast<size_t>(header_len)),
                                      "the header of " + where);
  if (!header.is_object()) throw ModelError("corrupt " + where + ": header is not a JSON object");

  for (const auto& [name, entry] : header.object) {
    const std::string tw = "tensor '" + name + "' in " + where;
    if (name == "__metadata__") {
      if (!entry.is_object())
        throw ModelError("corrupt " + where + ": __metadata__ is not an object");
      for (const auto& [k, v] : entry.object) {
        if (!v.is_string())
          throw ModelError("corrupt " + where + ": __metadata__ values must be strings");
        st->metadata_[k] = v.string;
      }
      continue;
    }
    if (!entry.is_object()) throw ModelError("corrupt " + tw + ": entry is not an object");
    const JsonValue* dtype = entry.get("dtype");
    const JsonValue* shape = entry.get("shape");
    const JsonValue* offsets = entry.get("data_offsets");
    if (dtype == nullptr || !dtype->is_string() || shape == nullptr || !shape->is_array() ||
        offsets == nullptr || !offsets->is_array() || offsets->array.size() != 2)
      throw ModelError("corrupt " + tw + ": needs dtype, shape and data_offsets [begin, end]");
    SafetensorsInfo info;
    info.name = name;
    info.dtype = dtype->string;
    const int elem = dtype_size(info.dtype);
    if (elem == 0) throw ModelError("corrupt " + tw + ": unknown dtype '" + info.dtype + "'");
    if (shape->array.size() > 8) throw ModelError("corrupt " + tw + ": more than 8 dimensions");
    uint64_t n_elems = 1;
    for (const JsonValue& d : shape->array) {
      const uint64_t n = get_u64(d, "shape of " + tw);
      if (__builtin_mul_overflow(n_elems, n, &n_elems))
        throw ModelError("corrupt " + tw + ": shape overflows");
      info.shape.push_back(static_cast<int64_t>(n));
    }
    info.begin = get_u64(offsets->array[0], "data_offsets of " + tw);
    info.end = get_u64(offsets->array[1], "data_offsets of " + tw);
    uint64_t nbytes;
    if (__builtin_mul_overflow(n_elems, static_cast<uint64_t>(elem), &nbytes))
      throw ModelError("corrupt " + tw + ": shape overflows");
    if (info.end < info.begin || info.end - info.begin != nbytes)
      throw ModelError("corrupt " + tw + ": data_offsets [" + std::to_string(info.begin) + ", " +
                       std::to_string(info.end) + "] do not match its shape and dtype (" +
                       std::to_string(nbytes) + " bytes)");
    if (info.end > data_size)
      throw ModelError("corrupt " + tw + ": data runs past the end of the file (truncated?)");
    st->index_.emplace(name, st->tensors_.size());
    st->tensors_.push_back(std::move(info));
  }
  return st;
}

const std::string& SafetensorsFile::path() const { return file_->path(); }

const SafetensorsInfo* SafetensorsFile::find_tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* SafetensorsFile::bytes(const SafetensorsInfo& info) const {
  return file_->data() + data_offset_ + info.begin;
}

TensorView SafetensorsFile::view(const SafetensorsInfo& info) const {
  TensorView v;
  if (info.dtype == "F32")
    v.type = DType::F32;
  else if (info.dtype == "F16")
    v.type = DType::F16;
  else if (info.dtype == "BF16")
    v.type = DType::BF16;
  else
    throw ModelError("unsupported dtype '" + info.dtype + "' for tensor '" + info.name + "' in '" +
                     path() + "' (ossa reads F32, F16 and BF16 safetensors)");
  v.cols = info.shape.empty() ? 1 : info.shape.back();
  v.rows = 1;
  for (size_t d = 0; d + 1 < info.shape.size(); ++d) v.rows *= info.shape[d];  // checked in open()
  v.row_bytes = static_cast<size_t>(v.cols) * (v.type == DType::F32 ? 4 : 2);
  v.data = file_->data() + data_offset_ + info.begin;
  return v;
}

}  // namespace ossa
