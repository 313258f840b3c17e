#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/unicode.h"

namespace ossa {
namespace {

bool spells_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Alphabet {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 512> to_byte{};  // every spelling code point is < 0x144
  Alphabet() {
    to_byte.fill(-1);
    uint32_t extra = 0;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = spells_itself(b) ? static_cast<uint32_t>(b) : 256 + extra++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

uint32_t byte_level_char(uint8_t b) { return alphabet().to_char[b]; }

std::string byte_level_encode(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char b : raw) utf8_append(out, alphabet().to_char[b]);
  return out;
}

bool byte_level_decode(std::string_view s, std::string& raw) {
  raw.clear();
  const Alphabet& a = alphabet();
  auto p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    i += utf8_decode(p + i, cp);
    if (cp >= a.to_byte.size() || a.to_byte[cp] < 0) return false;
    raw.push_back(static_cast<char>(a.to_byte[cp]));
  }
  return true;
}

}  // namespace ossa
