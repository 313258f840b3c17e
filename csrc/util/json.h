#pragma once
// A small strict JSON parser (RFC 8259) for safetensors headers and config.json. Input is
// untrusted: nesting depth is bounded, duplicate object keys are rejected, and every error is a
// ModelError naming the byte offset.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ossa {

struct JsonValue {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0.0;
  bool is_integer = false;  // the literal was an integer that fits int64 (then `integer` holds it)
  int64_t integer = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;  // in file order

  bool is_null() const { return kind == Kind::Null; }
  bool is_number() const { return kind == Kind::Number; }
  bool is_string() const { return kind == Kind::String; }
  bool is_array() const { return kind == Kind::Array; }
  bool is_object() const { return kind == Kind::Object; }
  // Member lookup; nullptr if absent or this is not an object.
  const JsonValue* get(std::string_view key) const;
};

// Throws ModelError("invalid JSON in <what>: ... at offset N").
JsonValue parse_json(std::string_view text, const std::string& what = "JSON", int max_depth = 64);

// A human-readable name of a kind ("object", "number", ...), for error messages.
const char* json_kind_name(JsonValue::Kind kind);

}  // namespace ossa
