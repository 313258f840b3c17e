#pragma once
// Unicode normalization form C (NFC), the `NFC` normalizer of Hugging Face tokenizer.json files
// (Qwen2 / Qwen2.5 and others): canonical decomposition, canonical ordering of combining marks,
// then canonical composition (UAX #15). Tables from Python's unicodedata (normalize_tables.inc,
// written by scripts/gen_unicode_tables.py), so the result equals unicodedata.normalize("NFC",
// text), the twin's.
#include <string>
#include <string_view>

namespace ossa {

// NFC of valid UTF-8 text. Text whose code points are all below U+0300 (ASCII, Latin-1, most of
// Latin Extended) is NFC already and comes back unchanged without decoding.
std::string nfc(std::string_view utf8);

// Whether nfc(utf8) would return utf8 unchanged by the fast test above (no code point >= U+0300).
bool nfc_trivially_stable(std::string_view utf8);

}  // namespace ossa
