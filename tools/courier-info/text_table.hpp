// Left-aligned text columns for courier-info's human output.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace courier::info {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) { rows_.push_back(std::move(header)); }

  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  // A line printed under the previous row, starting at column `column`
  // (for a rejected plugin's reason under its path).
  void add_note(size_t column, std::string text) {
    notes_.push_back({rows_.size() - 1, column, std::move(text)});
  }

  // Every column padded to its widest cell, two spaces apart; the last
  // column is not padded, so lines carry no trailing blanks.
  std::string render(size_t indent) const {
    std::vector<size_t> widths;
    for (const auto& row : rows_) {
      widths.resize(std::max(widths.size(), row.size()));
      for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
    }
    std::string text;
    for (size_t r = 0; r < rows_.size(); ++r) {
      std::string line(indent, ' ');
      for (size_t i = 0; i < rows_[r].size(); ++i) {
        line += rows_[r][i];
        if (i + 1 < rows_[r].size()) line.append(widths[i] - rows_[r][i].size() + 2, ' ');
      }
      text += line + '\n';
      for (const Note& note : notes_) {
        if (note.row != r) continue;
        size_t offset = indent;
        for (size_t i = 0; i < note.column && i < widths.size(); ++i) offset += widths[i] + 2;
        text += std::string(offset, ' ') + note.text + '\n';
      }
    }
    return text;
  }

 private:
  struct Note {
    size_t row;
    size_t column;
    std::string text;
  };
  std::vector<std::vector<std::string>> rows_;
  std::vector<Note> notes_;
};

}  // namespace courier::info
