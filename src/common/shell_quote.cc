#include "common/shell_quote.h"

#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace shoal {
namespace {

bool Plain(const std::string& word) {
  if (word.empty()) return false;
  for (char c : word) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) &&
        std::string_view("_-./:=@%+,").find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

std::string SingleQuoted(const std::string& word) {
  return absl::StrCat("'", absl::StrReplaceAll(word, {{"'", "'\\''"}}), "'");
}

}  // namespace

std::string ShellQuote(const std::string& word) {
  return Plain(word) ? word : SingleQuoted(word);
}

std::string ShellCommand(const std::vector<std::string>& words) {
  std::string line;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) line += ' ';
    // A first word NAME=VALUE would be read as an assignment, not as the
    // command.
    bool assignment = i == 0 && words[i].find('=') != std::string::npos;
    line += assignment ? SingleQuoted(words[i]) : ShellQuote(words[i]);
  }
  return line;
}

std::string ShellAssignment(const std::string& name, const std::string& value) {
  return absl::StrCat(name, "=", ShellQuote(value));
}

}  // namespace shoal
