#pragma once
// Read-only memory map of a whole file. Throws ModelError if the file cannot be opened or mapped.
#include <cstddef>
#include <cstdint>
#include <string>

namespace ossa {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Zero-filled anonymous memory for large pools (the KV cache), populated when mapped
// (MAP_POPULATE): a step that first touches its blocks would otherwise take the page faults, and a
// server's first requests would pay for them; vLLM and llama.cpp also fill their caches at startup.
// Deliberately not advised for transparent huge pages: with the usual defrag=madvise setting every
// first touch of a 2 MiB page compacts memory synchronously, which measured slower, and attention
// did not gain from the larger pages (docs/performance.md). Throws std::bad_alloc if the mapping
// fails.
class LargeBuffer {
 public:
  LargeBuffer() = default;
  explicit LargeBuffer(size_t bytes);
  ~LargeBuffer();
  LargeBuffer(LargeBuffer&& o) noexcept : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  LargeBuffer& operator=(LargeBuffer&& o) noexcept;
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ossa
