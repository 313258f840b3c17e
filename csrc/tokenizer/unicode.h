#pragma once
// Code point classes for the pre-tokenizer (\p{L}, \p{N}, \s) and UTF-8 helpers. The tables are
// generated from Python's unicodedata by scripts/gen_unicode_tables.py, so the C++ tokenizer and
// its Python twin classify every code point the same way.
#include <cstdint>
#include <string>
#include <string_view>

namespace ossa {

// Bit flags per code point.
enum : uint8_t {
  k_letter = 1,       // \p{L}: Lu Ll Lt Lm Lo
  k_number = 2,       // \p{N}: Nd Nl No
  k_white_space = 4,  // \s: the White_Space property
  k_mark = 8,         // \p{M}: Mn Mc Me
  k_upper = 16,       // Lu Lt (with k_letter): the o200k pattern's case classes
  k_lower = 32,       // Ll (with k_letter)
};

// Flags of a code point (0 for unassigned or out of range).
uint8_t unicode_flags(uint32_t cp);

// The Unicode version the tables were generated from.
const char* unicode_version();

// Decodes one code point at s[i] of valid UTF-8 and returns its length in bytes (1..4).
inline int utf8_decode(const unsigned char* s, uint32_t& cp) {
  unsigned char c = s[0];
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  if (c < 0xE0) {
    cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    return 2;
  }
  if (c < 0xF0) {
    cp = ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    return 3;
  }
  cp = ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
  return 4;
}

void utf8_append(std::string& out, uint32_t cp);

// Length of the longest prefix of s that is valid UTF-8 (no surrogates, no overlongs).
size_t utf8_valid_prefix(std::string_view s);

// Length of the longest prefix of s that ends on a code point boundary, given s is valid UTF-8
// except possibly for an incomplete final sequence.
size_t utf8_complete_prefix(std::string_view s);

// Lossy conversion: each maximal invalid subpart becomes U+FFFD (as Rust's from_utf8_lossy and
// Python's bytes.decode("utf-8", "replace") do).
std::string utf8_lossy(std::string_view s);

}  // namespace ossa

namespace ossa {
// Streaming form of utf8_lossy: converts the longest prefix of in whose decoding cannot change with
// more input (an incomplete but so far valid sequence at the end is held back) and appends it to
// out. Returns the number of bytes consumed.
size_t utf8_lossy_stream(std::string_view in, std::string& out);
}  // namespace ossa
