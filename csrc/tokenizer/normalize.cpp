#include "tokenizer/normalize.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tokenizer/unicode.h"

namespace ossa {
namespace {

struct CombiningClass {
  uint32_t cp;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t a, b,
      c;  // k_decompositions: {cp, first, second}; k_compositions: {first, second, composite}
};

#include "tokenizer/normalize_tables.inc"

// Hangul syllables: S = 0xAC00 + (L * 21 + V) * 28 + T, decomposed and composed arithmetically.
constexpr uint32_t k_s_base = 0xAC00, k_l_base = 0x1100, k_v_base = 0x1161, k_t_base = 0x11A7;
constexpr uint32_t k_l_count = 19, k_v_count = 21, k_t_count = 28,
                   k_n_count = k_v_count * k_t_count;
constexpr uint32_t k_s_count = k_l_count * k_n_count;

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = k_combining + std::size(k_combining);
  const auto* it = std::lower_bound(k_combining, end, cp,
                                    [](const CombiningClass& c, uint32_t v) { return c.cp < v; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= k_s_base && cp < k_s_base + k_s_count) {
    const uint32_t s = cp - k_s_base;
    out.push_back(k_l_base + s / k_n_count);
    out.push_back(k_v_base + (s % k_n_count) / k_t_count);
    if (s % k_t_count != 0) out.push_back(k_t_base + s % k_t_count);
    return;
  }
  if (cp >= 0xC0) {
    const auto* end = k_decompositions + std::size(k_decompositions);
    const auto* it = std::lower_bound(k_decompositions, end, cp,
                                      [](const Decomposition& d, uint32_t v) { return d.a < v; });
    if (it != end && it->a == cp) {
      decompose(it->b, out);
      if (it->c != 0) decompose(it->c, out);
      return;
    }
  }
  out.push_back(cp);
}

// The primary composite of a + b, or 0 if there is none.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= k_l_base && a < k_l_base + k_l_count && b >= k_v_base && b < k_v_base + k_v_count)
    return k_s_base + ((a - k_l_base) * k_v_count + (b - k_v_base)) * k_t_count;
  if (a >= k_s_base && a < k_s_base + k_s_count && (a - k_s_base) % k_t_count == 0 &&
      b > k_t_base && b < k_t_base + k_t_count)
    return a + (b - k_t_base);
  const auto* end = k_compositions + std::size(k_compositions);
  const auto* it = std::lower_bound(k_compositions, end, std::pair{a, b},
                                    [](const Decomposition& d, std::pair<uint32_t, uint32_t> v) {
                                      return d.a < v.first || (d.a == v.first && d.b < v.second);
                                    });
  return it != end && it->a == a && it->b == b ? it->c : 0;
}

}  // namespace

bool nfc_trivially_stable(std::string_view utf8) {
  // U+0300 is CC 80 in UTF-8: a lead byte below 0xCC starts a code point below U+0300.
  for (unsigned char c : utf8)
    if (c >= 0xCC) return false;
  return true;
}

std::string nfc(std::string_view utf8) {
  if (nfc_trivially_stable(utf8)) return std::string(utf8);
  // 1. Full canonical decomposition.
  std::vector<uint32_t> cps;
  cps.reserve(utf8.size());
  const auto* s = reinterpret_cast<const unsigned char*>(utf8.data());
  for (size_t i = 0; i < utf8.size();) {
    uint32_t cp = 0;
    i += static_cast<size_t>(utf8_decode(s + i, cp));
    decompose(cp, cps);
  }
  // 2. Canonical ordering: each run of non-starters sorted by combining class, stably.
  std::vector<uint8_t> ccc(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) ccc[i] = combining_class(cps[i]);
  for (size_t i = 0; i < cps.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc[j] != 0) ++j;
    for (size_t a = i + 1; a < j; ++a)  // insertion sort: runs are short
      for (size_t b = a; b > i && ccc[b - 1] > ccc[b]; --b) {
        std::swap(ccc[b - 1], ccc[b]);
        std::swap(cps[b - 1], cps[b]);
      }
    i = j;
  }
  // 3. Canonical composition: a character composes with the last starter unless a character kept
  // between them blocks it (class 0, or a class >= its own; kept classes rise along a run, so the
  // last one decides). last_class -1: nothing kept since the starter.
  size_t kept = 0;
  ptrdiff_t starter = -1;
  int last_class = -1;
  for (size_t i = 0; i < cps.size(); ++i) {
    const int c = ccc[i];
    if (starter >= 0 && (last_class == -1 || (last_class != 0 && last_class < c))) {
      const uint32_t composite = compose(cps[static_cast<size_t>(starter)], cps[i]);
      if (composite != 0) {
        cps[static_cast<size_t>(starter)] = composite;
        continue;
      }
    }
    if (c == 0) {
      starter = static_cast<ptrdiff_t>(kept);
      last_class = -1;
    } else {
      last_class = c;
    }
    cps[kept] = cps[i];
    ++kept;
  }
  std::string out;
  out.reserve(utf8.size());
  for (size_t i = 0; i < kept; ++i) utf8_append(out, cps[i]);
  return out;
}

}  // namespace ossa
