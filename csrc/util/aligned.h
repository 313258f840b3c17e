#pragma once
// std::vector with 64-byte (cache-line) aligned storage.
//
// Why: an AMX tile row is 64 bytes. From an ordinary vector (16-byte aligned by malloc) every row
// straddles two cache lines, and a tile load then touches twice the lines; on this project's
// machines that made the AMX matmuls ~30% slower (kernels/matmul_amx.cpp). Activation rows read
// with 64-byte vector loads gain the same way.
#include <cstddef>
#include <new>
#include <vector>

namespace ossa {

template <class T>
struct CacheAlignedAllocator {
  using value_type = T;
  static constexpr std::align_val_t k_align{64};
  CacheAlignedAllocator() = default;
  template <class U>
  CacheAlignedAllocator(const CacheAlignedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), k_align)); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, k_align); }
  template <class U>
  bool operator==(const CacheAlignedAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const CacheAlignedAllocator<U>&) const noexcept {
    return false;
  }
};

template <class T>
using AlignedVector = std::vector<T, CacheAlignedAllocator<T>>;

}  // namespace ossa
