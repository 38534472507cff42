// json.h: the small JSON subset a safetensors header uses, written and parsed by hand.
// A header is one object whose values are objects, strings, arrays of integers and
// integers; floats, true/false/null never appear there, so the parser rejects them with a
// message saying so. Objects keep their members in file order (keys sorted or not: both
// are accepted) and duplicate keys are an error, as in the reference (Rust) reader.
// Read next: safetensors.h, which turns a parsed header into tensors.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dplab {

struct JsonValue {
  enum class Kind { Object, Array, String, Integer };
  Kind kind = Kind::Object;
  std::string str;                // Kind::String
  int64_t integer = 0;            // Kind::Integer
  std::vector<JsonValue> items;   // Kind::Array elements; Kind::Object member values
  std::vector<std::string> keys;  // Kind::Object member names, parallel to items

  // The member named key, or nullptr. Linear: headers hold a handful of keys per object.
  const JsonValue* find(std::string_view key) const;
};

std::string_view json_kind_name(JsonValue::Kind k);  // "object", "array", ...

// The byte offset of the first invalid UTF-8 sequence in s (overlong forms, surrogates
// and code points past U+10FFFF included), or std::string_view::npos if s is valid.
// JSON text must be UTF-8, and Python's reader rejects a header that is not.
size_t utf8_error_at(std::string_view s);

// Parses text that holds exactly one JSON value, optionally followed by whitespace (the
// safetensors padding) and is valid UTF-8. Throws Error with the byte position and what
// was expected.
JsonValue parse_json(std::string_view text);

// Appends s as a JSON string literal, escaped the way serde_json (and so Python's
// safetensors) escapes: \" \\ \b \f \n \r \t, other control bytes as \u00xx, UTF-8 as is.
void append_json_string(std::string& out, std::string_view s);

}  // namespace dplab
