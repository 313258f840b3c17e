#include "util/json.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <unordered_set>

#include "util/error.h"

namespace ossa {

const JsonValue* JsonValue::get(std::string_view key) const {
  if (kind != Kind::Object) return nullptr;
  for (const auto& [k, v] : object)
    if (k == key) return &v;
  return nullptr;
}

const char* json_kind_name(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::Null:
      return "null";
    case JsonValue::Kind::Bool:
      return "boolean";
    case JsonValue::Kind::Number:
      return "number";
    case JsonValue::Kind::String:
      return "string";
    case JsonValue::Kind::Array:
      return "array";
    case JsonValue::Kind::Object:
      return "object";
  }
  return "?";
}

namespace {

struct Parser {
  std::string_view s;
  const std::string& what;
  int max_depth;
  size_t pos = 0;

  [[noreturn]] void fail(const std::string& msg) const {
    throw ModelError("invalid JSON in " + what + ": " + msg + " at offset " + std::to_string(pos));
  }

  void skip_ws() {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' || s[pos] == '\r'))
      ++pos;
  }

  char peek() {
    if (pos >= s.size()) fail("unexpected end");
    return s[pos];
  }

  void expect_literal(std::string_view lit) {
    if (s.substr(pos, lit.size()) != lit) fail("invalid literal");
    pos += lit.size();
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  uint32_t hex4() {
    if (s.size() - pos < 4) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s[pos++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<uint32_t>(c - 'A' + 10);
      else
        fail("bad hex digit in \\u escape");
    }
    return v;
  }

  std::string parse_string() {
    ++pos;  // opening quote
    std::string out;
    while (true) {
      if (pos >= s.size()) fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(s[pos]);
      if (c == '"') {
        ++pos;
        return out;
      }
      if (c < 0x20) fail("control character in string");
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos;
        continue;
      }
      ++pos;
      if (pos >= s.size()) fail("unterminated escape");
      const char e = s[pos++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xd800 && cp < 0xdc00) {  // high surrogate: a low one must follow
            if (s.substr(pos, 2) != "\\u") fail("lone surrogate");
            pos += 2;
            const uint32_t lo = hex4();
            if (lo < 0xdc00 || lo >= 0xe000) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            fail("lone surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }

  void parse_number(JsonValue& v) {
    const size_t start = pos;
    bool integral = true;
    if (s[pos] == '-') ++pos;
    if (pos >= s.size()) fail("bad number");
    if (s[pos] == '0') {
      ++pos;
    } else if (s[pos] >= '1' && s[pos] <= '9') {
      while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
    } else {
      fail("bad number");
    }
    if (pos < s.size() && s[pos] == '.') {
      integral = false;
      ++pos;
      if (pos >= s.size() || s[pos] < '0' || s[pos] > '9') fail("bad number");
      while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
    }
    if (pos < s.size() && (s[pos] == 'e' || s[pos] == 'E')) {
      integral = false;
      ++pos;
      if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) ++pos;
      if (pos >= s.size() || s[pos] < '0' || s[pos] > '9') fail("bad number");
      while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
    }
    const std::string text(s.substr(start, pos - start));
    v.kind = JsonValue::Kind::Number;
    v.number = std::strtod(text.c_str(), nullptr);
    if (integral) {
      errno = 0;
      char* end = nullptr;
      const long long i = std::strtoll(text.c_str(), &end, 10);
      if (errno == 0 && end == text.c_str() + text.size()) {
        v.is_integer = true;
        v.integer = static_cast<int64_t>(i);
      }
    }
  }

  void parse_value(JsonValue& v, int depth) {
    if (depth > max_depth) fail("nesting deeper than " + std::to_string(max_depth));
    skip_ws();
    const char c = peek();
    if (c == '{') {
      v.kind = JsonValue::Kind::Object;
      ++pos;
      skip_ws();
      if (peek() == '}') {
        ++pos;
        return;
      }
      std::unordered_set<std::string> seen;
      while (true) {
        skip_ws();
        if (peek() != '"') fail("expected a string key");
        std::string key = parse_string();
        if (!seen.insert(key).second) fail("duplicate key '" + key + "'");
        skip_ws();
        if (peek() != ':') fail("expected ':'");
        ++pos;
        v.object.emplace_back(std::move(key), JsonValue{});
        parse_value(v.object.back().second, depth + 1);
        skip_ws();
        const char d = peek();
        ++pos;
        if (d == '}') return;
        if (d != ',') fail("expected ',' or '}'");
      }
    } else if (c == '[') {
      v.kind = JsonValue::Kind::Array;
      ++pos;
      skip_ws();
      if (peek() == ']') {
        ++pos;
        return;
      }
      while (true) {
        v.array.emplace_back();
        parse_value(v.array.back(), depth + 1);
        skip_ws();
        const char d = peek();
        ++pos;
        if (d == ']') return;
        if (d != ',') fail("expected ',' or ']'");
      }
    } else if (c == '"') {
      v.kind = JsonValue::Kind::String;
      v.string = parse_string();
    } else if (c == 't') {
      expect_literal("true");
      v.kind = JsonValue::Kind::Bool;
      v.boolean = true;
    } else if (c == 'f') {
      expect_literal("false");
      v.kind = JsonValue::Kind::Bool;
    } else if (c == 'n') {
      expect_literal("null");
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      parse_number(v);
    } else if (c == 'N' || c == 'I') {
      // Python's json.dump writes NaN/Infinity; config.json files occasionally carry them.
      if (s.substr(pos, 3) == "NaN") {
        pos += 3;
        v.kind = JsonValue::Kind::Number;
        v.number = std::nan("");
      } else {
        expect_literal("Infinity");
        v.kind = JsonValue::Kind::Number;
        v.number = HUGE_VAL;
      }
    } else {
      fail(std::string("unexpected character '") + c + "'");
    }
  }
};

}  // namespace

JsonValue parse_json(std::string_view text, const std::string& what, int max_depth) {
  Parser p{text, what, max_depth};
  JsonValue v;
  p.parse_value(v, 0);
  p.skip_ws();
  if (p.pos != text.size()) p.fail("trailing characters");
  return v;
}

}  // namespace ossa
