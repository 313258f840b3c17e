#pragma once
// Split GGUF models as llama.cpp writes them (gguf-split, convert_hf_to_gguf --split-max-*):
//
//   name-00001-of-00003.gguf   split.no 0, split.count 3, split.tensors.count T, the model's
//   metadata,
//                              its first tensors
//   name-00002-of-00003.gguf   split.no 1, split.count 3, the next tensors (metadata: the split
//   keys) name-00003-of-00003.gguf   split.no 2, ...
//
// Every shard is a complete GGUF file with its own header and data section. Opening any shard opens
// all of them; a missing shard, a shard whose split keys disagree with its name or with the others,
// a tensor in two shards, or tensor counts that do not add up to split.tensors.count is a
// ModelError naming the file. A file without split.count (or with split.count 1) is one whole
// model.
#include <memory>
#include <string>
#include <vector>

#include "formats/gguf.h"

namespace ossa {

struct GGUFModelFiles {
  std::vector<std::shared_ptr<GGUFFile>> shards;  // in split.no order; shards[0] holds the metadata
  std::vector<std::string> paths;

  const GGUFFile& metadata() const { return *shards[0]; }
  // The shard holding tensor `name` and its info, or {nullptr, nullptr}.
  std::pair<const GGUFFile*, const GGUFTensorInfo*> find_tensor(const std::string& name) const;
};

// The paths of every shard of the model `path` belongs to (just `path` for an unsplit file); checks
// only the name and the opened file's split keys.
std::vector<std::string> gguf_shard_paths(const std::string& path, const GGUFFile& opened);

// Open the model `path` is a file of: all its shards, checked against one another.
GGUFModelFiles open_gguf_model(const std::string& path);

}  // namespace ossa
