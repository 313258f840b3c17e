#include "kernels/matmul_profile.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace ossa {
namespace {

constexpr int k_types = 64;  // DType values are below this
struct Counters {
  std::atomic<int64_t> ns{0}, bytes{0}, items{0};
};
Counters g_counts[2][k_types];  // [one row?][type]
std::atomic<int> g_threads{1};

void print_matmul_profile() {
  const int threads = g_threads.load();
  std::fprintf(
      stderr,
      "ossa matmul profile by weight type (%d threads; GB/s = bytes / (thread time / threads)):\n",
      threads);
  for (int one = 1; one >= 0; --one)
    for (int t = 0; t < k_types; ++t) {
      const Counters& c = g_counts[one][t];
      if (c.items.load() == 0) continue;
      const double s = static_cast<double>(c.ns.load()) * 1e-9 / threads;
      std::fprintf(stderr, "  %-5s %-9s %10.2f ms %9.1f MB %7.1f GB/s\n",
                   dtype_name(static_cast<DType>(t)), one ? "1 row" : "many rows", s * 1e3,
                   static_cast<double>(c.bytes.load()) * 1e-6,
                   s > 0 ? static_cast<double>(c.bytes.load()) * 1e-9 / s : 0.0);
    }
}

}  // namespace

bool matmul_profiling() {
  static const bool on = [] {
    const char* v = std::getenv("OSSA_PROFILE");
    const bool enabled = v != nullptr && v[0] != '\0' && v[0] != '0';
    if (enabled) std::atexit(print_matmul_profile);
    return enabled;
  }();
  return on;
}

void matmul_profile_item(DType t, int64_t n_rows, int64_t bytes, int64_t ns) {
  const auto i = static_cast<uint32_t>(t);
  if (i >= k_types) return;
  Counters& c = g_counts[n_rows == 1 ? 1 : 0][i];
  c.ns.fetch_add(ns, std::memory_order_relaxed);
  c.bytes.fetch_add(bytes, std::memory_order_relaxed);
  c.items.fetch_add(1, std::memory_order_relaxed);
}

void matmul_profile_threads(int threads) { g_threads.store(threads, std::memory_order_relaxed); }

}  // namespace ossa
