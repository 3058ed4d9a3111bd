#include "json_writer.hpp"

#include <fmt/format.h>

namespace courier::info {

namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 if the bytes
// there do not form one (overlong forms and surrogates included).
size_t utf8_sequence_length(std::string_view text, size_t i) {
  auto byte = [&](size_t at) { return static_cast<unsigned char>(text[at]); };
  unsigned char lead = byte(i);
  // The lead byte gives the length, its payload bits, and the smallest code
  // point that needs this many bytes (anything smaller is an overlong form).
  struct Form {
    unsigned char first, last;
    size_t length;
    unsigned char payload_mask;
    uint32_t minimum;
  };
  constexpr Form kForms[] = {
      {0xc2, 0xdf, 2, 0x1f, 0x80}, {0xe0, 0xef, 3, 0x0f, 0x800}, {0xf0, 0xf4, 4, 0x07, 0x10000}};
  const Form* form = nullptr;
  for (const Form& candidate : kForms) {
    if (lead >= candidate.first && lead <= candidate.last) form = &candidate;
  }
  if (form == nullptr) return 0;
  size_t length = form->length;
  uint32_t code = lead & form->payload_mask;
  uint32_t minimum = form->minimum;
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3f);
  }
  bool surrogate = code >= 0xd800 && code <= 0xdfff;
  return code < minimum || code > 0x10ffff || surrogate ? 0 : length;
}

}  // namespace

std::string json_quote(std::string_view text) {
  std::string quoted = "\"";
  for (size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '"':
        quoted += "\\\"";
        break;
      case '\\':
        quoted += "\\\\";
        break;
      case '\b':
        quoted += "\\b";
        break;
      case '\f':
        quoted += "\\f";
        break;
      case '\n':
        quoted += "\\n";
        break;
      case '\r':
        quoted += "\\r";
        break;
      case '\t':
        quoted += "\\t";
        break;
      default:
        if (c < 0x20) {
          quoted += fmt::format("\\u{:04x}", c);
        } else if (c < 0x80) {
          quoted += static_cast<char>(c);
        } else if (size_t length = utf8_sequence_length(text, i)) {
          quoted.append(text.substr(i, length));
          i += length;
          continue;
        } else {
          quoted += "\\ufffd";
        }
    }
    ++i;
  }
  quoted += '"';
  return quoted;
}

void JsonWriter::newline() {
  out_ += '\n';
  out_.append(2 * levels_.size(), ' ');
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!levels_.empty()) {
    if (!levels_.back().empty) out_ += ',';
    levels_.back().empty = false;
    newline();
  }
}

void JsonWriter::key(std::string_view name) {
  before_value();
  out_ += json_quote(name);
  out_ += ": ";
  after_key_ = true;
}

void JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  levels_.push_back({true});
}

void JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  levels_.push_back({false});
}

void JsonWriter::end_object() {
  bool empty = levels_.back().empty;
  levels_.pop_back();
  if (!empty) newline();
  out_ += '}';
  if (levels_.empty()) out_ += '\n';
}

void JsonWriter::end_array() {
  bool empty = levels_.back().empty;
  levels_.pop_back();
  if (!empty) newline();
  out_ += ']';
}

void JsonWriter::string(std::string_view text) {
  before_value();
  out_ += json_quote(text);
}

void JsonWriter::number(uint64_t value) {
  before_value();
  out_ += fmt::format("{}", value);
}

void JsonWriter::boolean(bool value) {
  before_value();
  out_ += value ? "true" : "false";
}

void JsonWriter::null() {
  before_value();
  out_ += "null";
}

void JsonWriter::field_or_null(std::string_view name, std::string_view text) {
  key(name);
  if (text.empty()) {
    null();
  } else {
    string(text);
  }
}

void JsonWriter::field_list(std::string_view name, const std::vector<std::string>& items) {
  key(name);
  begin_array();
  for (const std::string& item : items) string(item);
  end_array();
}

}  // namespace courier::info
