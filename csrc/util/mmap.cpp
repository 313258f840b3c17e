#include "util/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>
#include <utility>

#include "util/error.h"
#include "util/zero_pages.h"

namespace ossa {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ModelError("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ModelError("'" + path + "' is not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw ModelError("cannot map '" + path + "': " + std::strerror(errno));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

#if !defined(MADV_POPULATE_WRITE)
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

struct LargeBuffer::Populator {
  std::atomic<bool> stop{false};
  std::thread thread;
};

namespace {
constexpr size_t k_populate_chunk = size_t{16} << 20;  // how soon a stop request is seen
}

LargeBuffer::LargeBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<uint8_t*>(p);
  const size_t first = std::min(bytes, k_populate_chunk);
  if (::madvise(p, first, MADV_POPULATE_WRITE) != 0) {  // an older kernel: populate now
    ::munmap(p, bytes);
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
               -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<uint8_t*>(p);
    return;
  }
  if (first == bytes) return;
  populator_ = std::make_unique<Populator>();
  Populator* pop = populator_.get();
  uint8_t* data = data_;
  pop->thread = std::thread([pop, data, first, bytes] {
    for (size_t at = first; at < bytes && !pop->stop.load(std::memory_order_relaxed);
         at += k_populate_chunk)
      ::madvise(data + at, std::min(k_populate_chunk, bytes - at), MADV_POPULATE_WRITE);
  });
}

void LargeBuffer::release() noexcept {
  if (populator_) {
    populator_->stop.store(true, std::memory_order_relaxed);
    if (populator_->thread.joinable()) populator_->thread.join();
    populator_.reset();
  }
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

LargeBuffer::LargeBuffer(LargeBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      populator_(std::move(o.populator_)) {}

LargeBuffer& LargeBuffer::operator=(LargeBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    populator_ = std::move(o.populator_);
  }
  return *this;
}

LargeBuffer::LargeBuffer() = default;
LargeBuffer::~LargeBuffer() { release(); }

// util/zero_pages.h: anonymous memory from 64 KiB on (glibc would mmap such sizes too, but may
// hand back freed heap memory that is not zero), else the aligned heap, zero-filled.
namespace {
constexpr size_t k_zero_pages_min = size_t{64} << 10;
constexpr std::align_val_t k_zero_pages_align{64};
}  // namespace

void* zero_pages_allocate(size_t bytes) {
  if (bytes < k_zero_pages_min) {
    void* p = ::operator new(std::max<size_t>(bytes, 1), k_zero_pages_align);
    std::memset(p, 0, bytes);
    return p;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

void zero_pages_free(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < k_zero_pages_min)
    ::operator delete(p, k_zero_pages_align);
  else
    ::munmap(p, bytes);
}

}  // namespace ossa
