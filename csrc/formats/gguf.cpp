#include "formats/gguf.h"

#include <sys/stat.h>

#include <cstring>
#include <limits>
#include <mutex>

#include "util/error.h"
#include "util/mmap.h"

namespace ossa {

// File layout (v2/v3, little-endian):
//
//   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x      { string key | u32 type | value }
//   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32)
//   data section: tensor i at data_offset + offset_i (a multiple of the alignment)
//
// string = u64 length | bytes; array = u32 elem_type | u64 count | elements.
//
// The header is untrusted: every read is bounds-checked against the file, and counts are checked
// against the bytes left before anything is reserved, so a header cannot make us allocate more
// than a small multiple of the file size.

namespace {

constexpr int k_max_array_depth = 8;
constexpr uint64_t k_max_array_elems_total = uint64_t{1} << 24;  // across all metadata arrays
constexpr uint32_t k_max_dims = 4;

struct Reader {
  const uint8_t* data;
  size_t size;
  size_t pos;
  uint64_t array_elems = 0;

  size_t left() const { return size - pos; }

  [[noreturn]] void fail(const std::string& what) const {
    throw ModelError("corrupt GGUF file: " + what + " (at byte " + std::to_string(pos) + ")");
  }

  void need(uint64_t n, const char* what) const {
    if (n > left()) fail(std::string(what) + " runs past the end of the file");
  }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data + pos), static_cast<size_t>(n));
    pos += static_cast<size_t>(n);
    return s;
  }

  // The fewest bytes one value of `type` can occupy, to bound counts before reserving.
  static uint64_t min_size(GGUFType type) {
    switch (type) {
      case GGUFType::UINT8:
      case GGUFType::INT8:
      case GGUFType::BOOL:
        return 1;
      case GGUFType::UINT16:
      case GGUFType::INT16:
        return 2;
      case GGUFType::UINT32:
      case GGUFType::INT32:
      case GGUFType::FLOAT32:
        return 4;
      case GGUFType::UINT64:
      case GGUFType::INT64:
      case GGUFType::FLOAT64:
        return 8;
      case GGUFType::STRING:
        return 8;
      case GGUFType::ARRAY:
        return 12;
    }
    return 1;
  }

  GGUFType read_type(const char* what) {
    const uint32_t t = read<uint32_t>(what);
    if (t > static_cast<uint32_t>(GGUFType::FLOAT64))
      fail("unknown metadata value type " + std::to_string(t));
    return static_cast<GGUFType>(t);
  }

  GGUFValue read_value(GGUFType type, int depth) {
    GGUFValue v;
    v.type = type;
    switch (type) {
      case GGUFType::UINT8:
        v.value = static_cast<uint64_t>(read<uint8_t>("value"));
        break;
      case GGUFType::INT8:
        v.value = static_cast<int64_t>(read<int8_t>("value"));
        break;
      case GGUFType::UINT16:
        v.value = static_cast<uint64_t>(read<uint16_t>("value"));
        break;
      case GGUFType::INT16:
        v.value = static_cast<int64_t>(read<int16_t>("value"));
        break;
      case GGUFType::UINT32:
        v.value = static_cast<uint64_t>(read<uint32_t>("value"));
        break;
      case GGUFType::INT32:
        v.value = static_cast<int64_t>(read<int32_t>("value"));
        break;
      case GGUFType::UINT64:
        v.value = read<uint64_t>("value");
        break;
      case GGUFType::INT64:
        v.value = read<int64_t>("value");
        break;
      case GGUFType::FLOAT32:
        v.value = static_cast<double>(read<float>("value"));
        break;
      case GGUFType::FLOAT64:
        v.value = read<double>("value");
        break;
      case GGUFType::BOOL: {
        const uint8_t b = read<uint8_t>("value");
        if (b > 1) fail("bool value " + std::to_string(b));
        v.value = b != 0;
        break;
      }
      case GGUFType::STRING:
        v.value = read_string("string value");
        break;
      case GGUFType::ARRAY: {
        if (depth >= k_max_array_depth)
          fail("arrays nested deeper than " + std::to_string(k_max_array_depth));
        v.elem_type = read_type("array type");
        const uint64_t n = read<uint64_t>("array length");
        if (n > left() / min_size(v.elem_type))
          fail("array of " + std::to_string(n) + " elements cannot fit");
        array_elems += n;
        if (array_elems > k_max_array_elems_total) fail("more than 2^24 metadata array elements");
        auto arr = std::make_shared<GGUFArray>();
        arr->reserve(static_cast<size_t>(n));
        for (uint64_t i = 0; i < n; ++i) arr->push_back(read_value(v.elem_type, depth + 1));
        v.value = std::move(arr);
        break;
      }
    }
    return v;
  }
};

const char* type_name(GGUFType t) {
  static const char* const k_names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                        "int32",  "float32", "bool",   "string", "array",
                                        "uint64", "int64",   "float64"};
  return k_names[static_cast<uint32_t>(t)];
}

[[noreturn]] void wrong_type(const std::string& key, const GGUFValue& v, const char* wanted) {
  throw ModelError("GGUF metadata '" + key + "' has type " + type_name(v.type) + ", expected " +
                   wanted);
}

}  // namespace

namespace {
bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}
}  // namespace

std::shared_ptr<GGUFFile> GGUFFile::open(const std::string& path) {
  // The files open now, by path; an entry whose file has closed is dropped when next looked up.
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<GGUFFile>> open_files;
  struct stat before{};
  const bool regular = ::stat(path.c_str(), &before) == 0 && S_ISREG(before.st_mode);
  if (regular) {
    std::shared_ptr<GGUFFile> known;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = open_files.find(path);
      if (it != open_files.end() && !(known = it->second.lock())) open_files.erase(it);
    }
    if (known && known->dev_ == static_cast<uint64_t>(before.st_dev) &&
        known->ino_ == static_cast<uint64_t>(before.st_ino) &&
        known->file_->size() == static_cast<size_t>(before.st_size) &&
        std::memcmp(known->file_->data(), known->header_.data(), known->header_.size()) == 0)
      return known;
  }
  std::shared_ptr<GGUFFile> gguf = parse(path);
  // Shared only if the file did not change while it was parsed (the map is of that inode).
  struct stat after{};
  if (regular && ::stat(path.c_str(), &after) == 0 && same_file(before, after)) {
    gguf->dev_ = static_cast<uint64_t>(after.st_dev);
    gguf->ino_ = static_cast<uint64_t>(after.st_ino);
    std::lock_guard<std::mutex> lock(mu);
    open_files[path] = gguf;
  }
  return gguf;
}

std::shared_ptr<GGUFFile> GGUFFile::parse(const std::string& path) {
  auto gguf = std::make_shared<GGUFFile>();
  gguf->file_ = std::make_shared<MappedFile>(path);
  const MappedFile& f = *gguf->file_;
  Reader r{f.data(), f.size(), 0};

  if (f.size() < 4 || std::memcmp(f.data(), "GGUF", 4) != 0)
    throw ModelError("'" + path + "' is not a GGUF file (bad magic)");
  r.pos = 4;
  gguf->version_ = r.read<uint32_t>("version");
  if (gguf->version_ != 2 && gguf->version_ != 3)
    throw ModelError("unsupported GGUF version " + std::to_string(gguf->version_) + " in '" + path +
                     "' (ossa reads versions 2 and 3)");
  const uint64_t n_tensors = r.read<uint64_t>("tensor count");
  const uint64_t n_kv = r.read<uint64_t>("metadata count");
  // A kv needs at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least 8 + 4 + 4 + 8.
  if (n_kv > r.left() / 13)
    r.fail("metadata count " + std::to_string(n_kv) + " cannot fit in the file");
  if (n_tensors > r.left() / 24)
    r.fail("tensor count " + std::to_string(n_tensors) + " cannot fit in the file");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.read_string("metadata key");
    const GGUFType type = r.read_type("metadata type");
    GGUFValue value = r.read_value(type, 0);
    if (!gguf->metadata_.emplace(key, std::move(value)).second)
      r.fail("duplicate metadata key '" + key + "'");
  }

  uint64_t alignment = 32;
  if (const GGUFValue* a = gguf->find("general.alignment")) {
    if (a->type != GGUFType::UINT32) r.fail("general.alignment must be uint32");
    alignment = std::get<uint64_t>(a->value);
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
      r.fail("general.alignment " + std::to_string(alignment) + " is not a power of two");
  }

  gguf->tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GGUFTensorInfo info;
    info.name = r.read_string("tensor name");
    const uint32_t n_dims = r.read<uint32_t>("tensor dims");
    if (n_dims == 0 || n_dims > k_max_dims)
      r.fail("tensor '" + info.name + "' has " + std::to_string(n_dims) + " dimensions");
    int64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const int64_t ne = r.read<int64_t>("tensor shape");
      if (ne < 0) r.fail("tensor '" + info.name + "' has a negative dimension");
      if (__builtin_mul_overflow(n_elems, ne, &n_elems))
        r.fail("tensor '" + info.name + "' has an absurd number of elements");
      info.ne.push_back(ne);
    }
    info.ggml_type = r.read<uint32_t>("tensor type");
    info.offset = r.read<uint64_t>("tensor offset");
    if (info.offset % alignment != 0)
      r.fail("tensor '" + info.name + "' offset is not a multiple of the alignment");
    if (!gguf->tensor_index_.emplace(info.name, gguf->tensors_.size()).second)
      r.fail("duplicate tensor '" + info.name + "'");
    gguf->tensors_.push_back(std::move(info));
  }

  const uint64_t data_offset = (r.pos + alignment - 1) / alignment * alignment;
  if (data_offset > f.size() && n_tensors > 0)
    r.fail("data section starts past the end of the file");
  gguf->data_offset_ = data_offset;

  // Check every supported tensor's extent now, so later views are known to be inside the file.
  const uint64_t data_size = f.size() >= data_offset ? f.size() - data_offset : 0;
  for (const GGUFTensorInfo& info : gguf->tensors_) {
    if (!dtype_supported(info.ggml_type)) continue;  // reported by view(), if the tensor is used
    const DTypeTraits tr = dtype_traits(static_cast<DType>(info.ggml_type));
    if (info.ne[0] % tr.block_elems != 0)
      throw ModelError("tensor '" + info.name + "' of type " + ggml_type_name(info.ggml_type) +
                       " has " + std::to_string(info.ne[0]) +
                       " columns, not a multiple of the block size " +
                       std::to_string(tr.block_elems));
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(info.ne[0] / tr.block_elems),
                               static_cast<uint64_t>(tr.block_bytes), &nbytes))
      r.fail("tensor '" + info.name + "' size overflows");
    for (size_t d = 1; d < info.ne.size(); ++d)
      if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(info.ne[d]), &nbytes))
        r.fail("tensor '" + info.name + "' size overflows");
    if (info.offset > data_size || nbytes > data_size - info.offset)
      throw ModelError("corrupt GGUF file: tensor '" + info.name + "' (" + std::to_string(nbytes) +
                       " bytes at data offset " + std::to_string(info.offset) +
                       ") runs past the end of the file '" + path + "' (truncated?)");
  }
  gguf->header_.assign(f.data(), f.data() + r.pos);
  return gguf;
}

const GGUFValue* GGUFFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GGUFTensorInfo* GGUFFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string GGUFFile::get_string(const std::string& key, const std::string& dflt) const {
  const GGUFValue* v = find(key);
  if (v == nullptr) return dflt;
  if (v->type != GGUFType::STRING) wrong_type(key, *v, "string");
  return std::get<std::string>(v->value);
}

int64_t GGUFFile::get_int(const std::string& key, int64_t dflt) const {
  const GGUFValue* v = find(key);
  if (v == nullptr) return dflt;
  if (const auto* i = std::get_if<int64_t>(&v->value)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v->value)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw ModelError("GGUF metadata '" + key + "' is out of range");
    return static_cast<int64_t>(*u);
  }
  wrong_type(key, *v, "an integer");
}

double GGUFFile::get_float(const std::string& key, double dflt) const {
  const GGUFValue* v = find(key);
  if (v == nullptr) return dflt;
  if (const auto* d = std::get_if<double>(&v->value)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v->value)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&v->value)) return static_cast<double>(*u);
  wrong_type(key, *v, "a number");
}

bool GGUFFile::get_bool(const std::string& key, bool dflt) const {
  const GGUFValue* v = find(key);
  if (v == nullptr) return dflt;
  if (v->type != GGUFType::BOOL) wrong_type(key, *v, "bool");
  return std::get<bool>(v->value);
}

namespace {
const GGUFArray* find_array(const GGUFFile& f, const std::string& key, GGUFType elem,
                            const char* wanted) {
  const GGUFValue* v = f.find(key);
  if (v == nullptr) return nullptr;
  if (v->type != GGUFType::ARRAY) wrong_type(key, *v, wanted);
  const auto& arr = *std::get<std::shared_ptr<GGUFArray>>(v->value);
  (void)elem;
  return &arr;
}
}  // namespace

std::vector<std::string> GGUFFile::get_string_array(const std::string& key) const {
  std::vector<std::string> out;
  const GGUFArray* arr = find_array(*this, key, GGUFType::STRING, "an array of strings");
  if (arr == nullptr) return out;
  out.reserve(arr->size());
  for (const GGUFValue& e : *arr) {
    if (e.type != GGUFType::STRING) wrong_type(key, e, "an array of strings");
    out.push_back(std::get<std::string>(e.value));
  }
  return out;
}

std::vector<double> GGUFFile::get_float_array(const std::string& key) const {
  std::vector<double> out;
  const GGUFArray* arr = find_array(*this, key, GGUFType::FLOAT32, "an array of numbers");
  if (arr == nullptr) return out;
  out.reserve(arr->size());
  for (const GGUFValue& e : *arr) {
    if (const auto* d = std::get_if<double>(&e.value))
      out.push_back(*d);
    else if (const auto* i = std::get_if<int64_t>(&e.value))
      out.push_back(static_cast<double>(*i));
    else if (const auto* u = std::get_if<uint64_t>(&e.value))
      out.push_back(static_cast<double>(*u));
    else
      wrong_type(key, e, "an array of numbers");
  }
  return out;
}

std::vector<int64_t> GGUFFile::get_int_array(const std::string& key) const {
  std::vector<int64_t> out;
  const GGUFArray* arr = find_array(*this, key, GGUFType::INT32, "an array of integers");
  if (arr == nullptr) return out;
  out.reserve(arr->size());
  for (const GGUFValue& e : *arr) {
    if (const auto* i = std::get_if<int64_t>(&e.value))
      out.push_back(*i);
    else if (const auto* u = std::get_if<uint64_t>(&e.value))
      out.push_back(static_cast<int64_t>(*u));
    else
      wrong_type(key, e, "an array of integers");
  }
  return out;
}

TensorView GGUFFile::view(const GGUFTensorInfo& info) const {
  if (!dtype_supported(info.ggml_type))
    throw ModelError("unsupported tensor type '" + ggml_type_name(info.ggml_type) +
                     "' for tensor '" + info.name + "'");
  const DType type = static_cast<DType>(info.ggml_type);
  const DTypeTraits tr = dtype_traits(type);
  TensorView v;
  v.type = type;
  v.cols = info.ne[0];
  v.rows = 1;
  for (size_t d = 1; d < info.ne.size(); ++d) v.rows *= info.ne[d];  // checked in open()
  v.row_bytes = static_cast<size_t>(v.cols / tr.block_elems) * static_cast<size_t>(tr.block_bytes);
  v.data = file_->data() + data_offset_ + info.offset;
  return v;
}

}  // namespace ossa
