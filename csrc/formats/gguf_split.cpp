#include "formats/gguf_split.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "util/error.h"

namespace ossa {

namespace {

// "dir/name-00002-of-00003.gguf" -> {"dir/name", 2, 3}; index 0 when the name is not a shard's.
struct ShardName {
  std::string prefix;
  int index = 0;
  int count = 0;
};

bool digits(const std::string& s, size_t at, size_t n) {
  if (at + n > s.size()) return false;
  for (size_t i = at; i < at + n; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

ShardName parse_shard_name(const std::string& path) {
  // -NNNNN-of-NNNNN.gguf is 20 characters.
  ShardName out;
  const size_t n = path.size();
  if (n < 20) return out;
  const size_t at = n - 20;
  if (path[at] != '-' || !digits(path, at + 1, 5) || path.compare(at + 6, 4, "-of-") != 0 ||
      !digits(path, at + 10, 5) || path.compare(at + 15, 5, ".gguf") != 0)
    return out;
  out.prefix = path.substr(0, at);
  out.index = std::stoi(path.substr(at + 1, 5));
  out.count = std::stoi(path.substr(at + 10, 5));
  return out;
}

std::string shard_path(const std::string& prefix, int index, int count) {
  char tail[32];
  std::snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", index, count);
  return prefix + tail;
}

struct SplitKeys {
  int64_t no = 0, count = 1;
};

SplitKeys split_keys(const GGUFFile& g, const std::string& path) {
  SplitKeys k;
  k.count = g.get_int("split.count", 1);
  k.no = g.get_int("split.no", 0);
  if (k.count < 1 || k.count > 99999 || k.no < 0 || k.no >= k.count)
    throw ModelError("'" + path + "' has invalid split keys (split.no " + std::to_string(k.no) +
                     ", split.count " + std::to_string(k.count) + ")");
  return k;
}

}  // namespace

std::pair<const GGUFFile*, const GGUFTensorInfo*> GGUFModelFiles::find_tensor(
    const std::string& name) const {
  for (const auto& g : shards)
    if (const GGUFTensorInfo* t = g->find_tensor(name); t != nullptr) return {g.get(), t};
  return {nullptr, nullptr};
}

std::vector<std::string> gguf_shard_paths(const std::string& path, const GGUFFile& opened) {
  const SplitKeys k = split_keys(opened, path);
  if (k.count == 1) return {path};
  const ShardName name = parse_shard_name(path);
  if (name.index == 0)
    throw ModelError(
        "'" + path + "' is shard " + std::to_string(k.no + 1) + " of " + std::to_string(k.count) +
        " of a split model (split.count), but its name does not end in -NNNNN-of-NNNNN.gguf, so "
        "the other shards cannot be found");
  if (name.count != k.count || name.index != k.no + 1)
    throw ModelError("'" + path + "' says it is shard " + std::to_string(k.no + 1) + " of " +
                     std::to_string(k.count) +
                     " (split.no, split.count), which its name contradicts");
  std::vector<std::string> out;
  for (int i = 1; i <= k.count; ++i)
    out.push_back(shard_path(name.prefix, i, static_cast<int>(k.count)));
  return out;
}

GGUFModelFiles open_gguf_model(const std::string& path) {
  std::shared_ptr<GGUFFile> given = GGUFFile::open(path);
  GGUFModelFiles m;
  m.paths = gguf_shard_paths(path, *given);
  if (m.paths.size() == 1) {
    m.shards.push_back(given);
    return m;
  }
  const int64_t count = static_cast<int64_t>(m.paths.size());
  std::set<std::string> names;
  size_t n_tensors = 0;
  for (int64_t i = 0; i < count; ++i) {
    const std::string& p = m.paths[static_cast<size_t>(i)];
    std::shared_ptr<GGUFFile> g;
    if (p == path) {
      g = given;
    } else {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(p, ec))
        throw ModelError("shard " + std::to_string(i + 1) + " of " + std::to_string(count) +
                         " of '" + path + "' is missing: '" + p + "'");
      g = GGUFFile::open(p);
    }
    const SplitKeys k = split_keys(*g, p);
    if (k.count != count || k.no != i)
      throw ModelError("'" + p + "' is not shard " + std::to_string(i + 1) + " of " +
                       std::to_string(count) + " (its split.no is " + std::to_string(k.no) +
                       ", split.count " + std::to_string(k.count) + "): a shard of another split?");
    for (const GGUFTensorInfo& t : g->tensors())
      if (!names.insert(t.name).second)
        throw ModelError("tensor '" + t.name + "' appears in two shards of '" + m.paths[0] + "'");
    n_tensors += g->tensors().size();
    m.shards.push_back(std::move(g));
  }
  const int64_t expect =
      m.shards[0]->get_int("split.tensors.count", static_cast<int64_t>(n_tensors));
  if (expect != static_cast<int64_t>(n_tensors))
    throw ModelError("the " + std::to_string(count) + " shards of '" + m.paths[0] + "' hold " +
                     std::to_string(n_tensors) + " tensors, but split.tensors.count says " +
                     std::to_string(expect));
  return m;
}

}  // namespace ossa
