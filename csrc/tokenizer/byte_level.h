#pragma once
// GPT-2's byte-level alphabet: every byte is spelled as one printable code point, so a byte-level
// vocabulary is a set of ordinary strings. Printable Latin-1 bytes spell themselves; the other 68
// bytes map to U+0100.. in byte order.
#include <cstdint>
#include <string>
#include <string_view>

namespace ossa {

// The code point that spells byte b.
uint32_t byte_level_char(uint8_t b);
// Spells raw bytes in the alphabet.
std::string byte_level_encode(std::string_view raw);
// Undoes the spelling; false (raw untouched past what was written) if s has a code point outside
// it.
bool byte_level_decode(std::string_view s, std::string& raw);

}  // namespace ossa
