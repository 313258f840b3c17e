#include "tokenizer/unicode.h"

#include <vector>

namespace ossa {
namespace {

struct CategoryRange {
  uint32_t first, last;
  uint8_t category;
};

#include "tokenizer/unicode_tables.inc"

// Indices into the generator's CATEGORIES list.
constexpr uint8_t k_cat_lu = 1, k_cat_ll = 2, k_cat_lt = 3, k_cat_lo = 5, k_cat_mn = 6,
                  k_cat_me = 8, k_cat_nd = 9, k_cat_no = 11;

// A flat table (1.1 MB) built once: the pre-tokenizer looks up every code point of the input.
const std::vector<uint8_t>& flag_table() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(0x110000, 0);
    for (const auto& r : k_category_ranges) {
      uint8_t f = 0;
      if (r.category >= k_cat_lu && r.category <= k_cat_lo) f = k_letter;
      if (r.category == k_cat_lu || r.category == k_cat_lt) f |= k_upper;
      if (r.category == k_cat_ll)
        f |= k_lower;
      else if (r.category >= k_cat_mn && r.category <= k_cat_me)
        f = k_mark;
      else if (r.category >= k_cat_nd && r.category <= k_cat_no)
        f = k_number;
      for (uint32_t cp = r.first; cp <= r.last; ++cp) t[cp] = f;
    }
    for (const auto& r : k_white_space_ranges)
      for (uint32_t cp = r.first; cp <= r.last; ++cp) t[cp] |= k_white_space;
    return t;
  }();
  return table;
}

// Length of a valid UTF-8 sequence at s (n bytes available), or 0 if it is invalid there.
int valid_sequence_length(const unsigned char* s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  auto cont = [&](size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (n < 2) return 0;
    unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    if (s[1] < lo || s[1] > hi) return 0;
    return cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (n < 2) return 0;
    unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    if (s[1] < lo || s[1] > hi) return 0;
    return cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// Length of the maximal invalid subpart at s: the longest prefix of a valid sequence, at least 1.
size_t invalid_subpart_length(const unsigned char* s, size_t n) {
  unsigned char c = s[0];
  int need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF)
    need = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  size_t i = 1;
  if (i < n && s[i] >= lo && s[i] <= hi) {
    ++i;
    while (i < static_cast<size_t>(need) && i < n && (s[i] & 0xC0) == 0x80) ++i;
  }
  return i;
}

}  // namespace

uint8_t unicode_flags(uint32_t cp) { return cp < 0x110000 ? flag_table()[cp] : 0; }

const char* unicode_version() { return OSSA_UNICODE_VERSION; }

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t utf8_valid_prefix(std::string_view s) {
  auto p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    int len = valid_sequence_length(p + i, n - i);
    if (len == 0) break;
    i += len;
  }
  return i;
}

size_t utf8_complete_prefix(std::string_view s) {
  size_t n = s.size();
  // Walk back over at most 3 continuation bytes to the last lead byte.
  size_t i = n;
  for (int k = 0; k < 4 && i > 0; ++k) {
    --i;
    unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) != 0x80) {
      size_t need = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      return n - i >= need ? n : i;
    }
  }
  return n;
}

std::string utf8_lossy(std::string_view s) {
  size_t valid = utf8_valid_prefix(s);
  if (valid == s.size()) return std::string(s);
  std::string out(s.substr(0, valid));
  auto p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = valid, n = s.size();
  while (i < n) {
    int len = valid_sequence_length(p + i, n - i);
    if (len > 0) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += invalid_subpart_length(p + i, n - i);
    }
  }
  return out;
}

}  // namespace ossa

namespace ossa {

size_t utf8_lossy_stream(std::string_view s, std::string& out) {
  auto p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    if (p[i] < 0x80) {
      out.push_back(static_cast<char>(p[i++]));
      continue;
    }
    int len = valid_sequence_length(p + i, n - i);
    if (len > 0) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    size_t sub = invalid_subpart_length(p + i, n - i);
    if (i + sub == n) {
      // Everything left is a prefix of a valid sequence only if it stopped for lack of bytes.
      unsigned char c = p[i];
      size_t need = (c >= 0xC2 && c <= 0xDF)   ? 2
                    : (c >= 0xE0 && c <= 0xEF) ? 3
                    : (c >= 0xF0 && c <= 0xF4) ? 4
                                               : 0;
      if (need > sub) break;
    }
    out.append("\xEF\xBF\xBD");
    i += sub;
  }
  return i;
}

}  // namespace ossa
