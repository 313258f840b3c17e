#pragma once
// std::vector storage that is zero without being written: large buffers come straight from
// anonymous memory (the kernel maps a zeroed page on first touch), small ones from the heap,
// zero-filled. For work buffers sized once from empty (ForwardState::plan) that a step may use only
// a corner of: value-initializing them (what resize does with the standard allocator) touched every
// page up front -- ~190 MB for a 1B model's 2,048-token buffers, most of an engine's start-up --
// while a first request of a few tokens needs a few of them. The contents are the same zeros.
//
// construct() without arguments does nothing (the storage is already zero), so this is only for
// trivially constructible elements and vectors resized once from empty (a resize that regrows
// within the capacity would see old values, not zeros). 64-byte aligned, as AlignedVector.
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace ossa {

void* zero_pages_allocate(std::size_t bytes);  // throws std::bad_alloc
void zero_pages_free(void* p, std::size_t bytes) noexcept;

template <class T>
struct ZeroPageAllocator {
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_copyable_v<T>);
  using value_type = T;
  ZeroPageAllocator() = default;
  template <class U>
  ZeroPageAllocator(const ZeroPageAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(zero_pages_allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { zero_pages_free(p, n * sizeof(T)); }
  template <class U>
  void construct(U*) noexcept {}  // value-initialized: already zero
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const ZeroPageAllocator<U>&) const noexcept {  // (C++20 derives !=)
    return true;
  }
};

template <class T>
using ZeroPageVector = std::vector<T, ZeroPageAllocator<T>>;

}  // namespace ossa
