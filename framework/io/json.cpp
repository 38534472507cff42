// json.cpp: a recursive-descent parser for the JSON subset of safetensors headers, and the
// string escaper the writer uses. The input is untrusted (any file a user points us at),
// so every read is bounds-checked, nesting is capped and integers are checked for overflow.
// Read next: safetensors.cpp.
#include "framework/io/json.h"

#include "framework/error.h"

namespace dplab {

const JsonValue* JsonValue::find(std::string_view key) const {
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return &items[i];
  return nullptr;
}

std::string_view json_kind_name(JsonValue::Kind k) {
  switch (k) {
    case JsonValue::Kind::Object: return "object";
    case JsonValue::Kind::Array: return "array";
    case JsonValue::Kind::String: return "string";
    case JsonValue::Kind::Integer: return "integer";
  }
  return "?";
}

namespace {

// A header nests three deep ({name: {shape: [..]}}); 64 is generous and keeps a hostile
// "[[[[[[..." from overflowing the stack.
constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  JsonValue parse_document() {
    skip_ws();
    JsonValue v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("end of the JSON value (only whitespace may follow)");
    return v;
  }

 private:
  [[noreturn]] void fail(std::string_view expected) const {
    if (pos_ >= s_.size())
      DPLAB_FAIL("invalid JSON header: expected {} at byte {}, but the header ended", expected,
                 pos_);
    char c = s_[pos_];
    std::string shown = (c >= 0x20 && c < 0x7f)
                            ? fmt::format("'{}'", c)
                            : fmt::format("byte 0x{:02x}", static_cast<unsigned char>(c));
    DPLAB_FAIL("invalid JSON header: expected {} at byte {}, found {}", expected, pos_, shown);
  }

  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t'))
      ++pos_;
  }

  bool consume(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  JsonValue parse_value(int depth) {
    if (depth > kMaxDepth)
      DPLAB_FAIL("invalid JSON header: nested deeper than {} levels", kMaxDepth);
    if (pos_ >= s_.size()) fail("a value");
    char c = s_[pos_];
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') {
      JsonValue v;
      v.kind = JsonValue::Kind::String;
      v.str = parse_string();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_integer();
    if (c == 't' || c == 'f' || c == 'n')
      DPLAB_FAIL(
          "invalid JSON header: true/false/null at byte {} do not occur in safetensors headers",
          pos_);
    fail("a value (object, array, string or integer)");
  }

  JsonValue parse_object(int depth) {
    JsonValue v;
    v.kind = JsonValue::Kind::Object;
    ++pos_;  // '{'
    skip_ws();
    if (consume('}')) return v;
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("a quoted key");
      size_t key_pos = pos_;
      std::string key = parse_string();
      if (v.find(key) != nullptr)
        DPLAB_FAIL("invalid JSON header: duplicate key \"{}\" at byte {}", key, key_pos);
      skip_ws();
      if (!consume(':')) fail("':' after a key");
      skip_ws();
      v.keys.push_back(std::move(key));
      v.items.push_back(parse_value(depth + 1));
      skip_ws();
      if (consume('}')) return v;
      if (!consume(',')) fail("',' or '}' in an object");
    }
  }

  JsonValue parse_array(int depth) {
    JsonValue v;
    v.kind = JsonValue::Kind::Array;
    ++pos_;  // '['
    skip_ws();
    if (consume(']')) return v;
    while (true) {
      skip_ws();
      v.items.push_back(parse_value(depth + 1));
      skip_ws();
      if (consume(']')) return v;
      if (!consume(',')) fail("',' or ']' in an array");
    }
  }

  // JSON integers: -?(0|[1-9][0-9]*). A '.', 'e' or 'E' after the digits is a float.
  JsonValue parse_integer() {
    size_t start = pos_;
    bool negative = consume('-');
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') fail("a digit");
    if (s_[pos_] == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9')
      DPLAB_FAIL("invalid JSON header: number with a leading zero at byte {}", start);
    uint64_t mag = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      uint64_t digit = static_cast<uint64_t>(s_[pos_] - '0');
      // Limit to int64: offsets and dims never come near it, and overflow must not wrap.
      if (mag > (static_cast<uint64_t>(INT64_MAX) - digit) / 10)
        DPLAB_FAIL("invalid JSON header: integer at byte {} does not fit in 64 bits", start);
      mag = mag * 10 + digit;
      ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))
      DPLAB_FAIL("invalid JSON header: non-integer number at byte {}; safetensors headers hold "
                 "integers only",
                 start);
    JsonValue v;
    v.kind = JsonValue::Kind::Integer;
    v.integer = negative ? -static_cast<int64_t>(mag) : static_cast<int64_t>(mag);
    return v;
  }

  unsigned parse_hex4() {
    if (pos_ + 4 > s_.size()) fail("4 hex digits after \\u");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_];
      unsigned d;
      if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') d = static_cast<unsigned>(c - 'A' + 10);
      else fail("a hex digit in \\u escape");
      code = code * 16 + d;
      ++pos_;
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("a closing '\"'");
      char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("no raw control character inside a string");
      if (c != '\\') {
        out += c;  // UTF-8 bytes pass through unchanged
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) fail("an escape character after '\\'");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = parse_hex4();
          // A high surrogate must be followed by \u and a low one: together one code point.
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!(consume('\\') && consume('u')))
              fail("a low surrogate \\u escape after a high one");
            unsigned lo = parse_hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("a low surrogate (\\uDC00-\\uDFFF)");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("no lone low surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: --pos_; fail("one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

size_t utf8_error_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    // Lead byte: the sequence length and the smallest code point it may encode.
    size_t len;
    unsigned cp, min_cp;
    if ((b & 0xE0) == 0xC0) len = 2, cp = b & 0x1F, min_cp = 0x80;
    else if ((b & 0xF0) == 0xE0) len = 3, cp = b & 0x0F, min_cp = 0x800;
    else if ((b & 0xF8) == 0xF0) len = 4, cp = b & 0x07, min_cp = 0x10000;
    else return i;
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

JsonValue parse_json(std::string_view text) {
  if (size_t bad = utf8_error_at(text); bad != std::string_view::npos)
    DPLAB_FAIL("invalid JSON header: not valid UTF-8 at byte {}", bad);
  return Parser(text).parse_document();
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        else out += c;
    }
  }
  out += '"';
}

}  // namespace dplab
