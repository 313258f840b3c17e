#pragma once
// Read-only memory map of a whole file. Throws ModelError if the file cannot be opened or mapped.
#include <cstddef>
#include <cstdint>
#include <memory>
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

// Zero-filled anonymous memory for large pools (the KV cache), populated in the background: a
// thread owned by the buffer prefaults it chunk by chunk (MADV_POPULATE_WRITE, which maps the pages
// without writing them, so it cannot race with the owner's writes), so constructing a 1 GiB pool
// costs no time (populating it took ~0.5 s of LLM(...)'s start), and steps after the first find
// their blocks mapped: a step that first touched them would otherwise take the page faults (vLLM
// and llama.cpp also fill their caches at startup). Where the kernel lacks MADV_POPULATE_WRITE
// (before Linux 5.14) the mapping is populated when made (MAP_POPULATE). Deliberately not advised
// for transparent huge pages: with the usual defrag=madvise setting every first touch of a 2 MiB
// page compacts memory synchronously, which measured slower, and attention did not gain from the
// larger pages (docs/performance.md). Throws std::bad_alloc if the mapping fails.
class LargeBuffer {
 public:
  LargeBuffer();
  explicit LargeBuffer(size_t bytes);
  ~LargeBuffer();
  LargeBuffer(LargeBuffer&& o) noexcept;
  LargeBuffer& operator=(LargeBuffer&& o) noexcept;
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release() noexcept;
  struct Populator;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::unique_ptr<Populator> populator_;
};

}  // namespace ossa
