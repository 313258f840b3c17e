#pragma once
// Typed, checked reads of a config.json object (a Hugging Face model folder's config): a missing
// or null key gives the default, a value of the wrong type throws ModelError naming the key.
#include <cstdint>
#include <string>

#include "util/error.h"
#include "util/json.h"

namespace ossa {

struct Json {
  const JsonValue& v;
  const std::string& path;

  const JsonValue* get(const char* key) const {
    const JsonValue* x = v.get(key);
    return x == nullptr || x->is_null() ? nullptr : x;
  }
  double number(const char* key, double dflt) const {
    const JsonValue* x = get(key);
    if (x == nullptr) return dflt;
    if (!x->is_number())
      throw ModelError(std::string("config '") + key + "' in '" + path + "' must be a number");
    return x->number;
  }
  int64_t integer(const char* key, int64_t dflt) const {
    const JsonValue* x = get(key);
    if (x == nullptr) return dflt;
    if (!x->is_number() || !x->is_integer)
      throw ModelError(std::string("config '") + key + "' in '" + path + "' must be an integer");
    return x->integer;
  }
  std::string string(const char* key, const std::string& dflt) const {
    const JsonValue* x = get(key);
    if (x == nullptr) return dflt;
    if (!x->is_string())
      throw ModelError(std::string("config '") + key + "' in '" + path + "' must be a string");
    return x->string;
  }
  bool boolean(const char* key, bool dflt) const {
    const JsonValue* x = get(key);
    if (x == nullptr) return dflt;
    if (x->kind != JsonValue::Kind::Bool)
      throw ModelError(std::string("config '") + key + "' in '" + path + "' must be true or false");
    return x->boolean;
  }
};

}  // namespace ossa
