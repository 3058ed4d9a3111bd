// A small streaming JSON writer for courier-info --json: objects, arrays,
// strings, numbers, booleans and null, pretty-printed with two-space
// indentation. It tracks commas and nesting so callers cannot produce
// malformed output by forgetting one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace courier::info {

class JsonWriter {
 public:
  explicit JsonWriter(std::string& out) : out_(out) {}

  void begin_object();
  void end_object();
  void begin_array();
  void end_array();
  // Names the next value; only inside an object.
  void key(std::string_view name);

  // Separate names instead of overloads: a string literal would otherwise
  // convert to bool.
  void string(std::string_view text);
  void number(uint64_t value);
  void boolean(bool value);
  void null();

  // Shorthands for "key": value.
  void field(std::string_view name, std::string_view text) {
    key(name);
    string(text);
  }
  void field(std::string_view name, uint64_t value) {
    key(name);
    number(value);
  }
  void field_bool(std::string_view name, bool value) {
    key(name);
    boolean(value);
  }
  // "key": "text", or "key": null when text is empty.
  void field_or_null(std::string_view name, std::string_view text);
  void field_list(std::string_view name, const std::vector<std::string>& items);

 private:
  struct Level {
    bool is_object;
    bool empty = true;
  };
  void before_value();
  void newline();

  std::string& out_;
  std::vector<Level> levels_;
  bool after_key_ = false;
};

// `text` as a JSON string literal, quotes included. Bytes that are not valid
// UTF-8 become U+FFFD, so the output is valid JSON whatever a plugin reports.
std::string json_quote(std::string_view text);

}  // namespace courier::info
