#include "cli/usage.h"

#include <CLI/CLI.hpp>
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/common.h"

namespace shoal::cli {

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1,
                                     std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t change = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + change});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::optional<std::string> ClosestName(std::string_view word,
                                       const std::vector<std::string>& names) {
  const std::string* closest = nullptr;
  size_t best = 0;
  for (const std::string& name : names) {
    size_t distance = EditDistance(word, name);
    if (closest == nullptr || distance < best) {
      closest = &name;
      best = distance;
    }
  }
  if (closest == nullptr || (best > 2 && 2 * best > word.size())) {
    return std::nullopt;
  }
  return *closest;
}

namespace {

// The long names ("--address") of the options `command` lists in --help.
std::vector<std::string> OptionNames(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : command.get_options()) {
    if (opt->get_group().empty()) continue;  // hidden
    for (const std::string& name : opt->get_lnames()) {
      names.push_back("--" + name);
    }
  }
  return names;
}

}  // namespace

std::optional<std::string> ExplainUnexpected(
    const CLI::App& command, const std::string& path,
    const std::vector<std::string>& args, bool takes_program) {
  // The command's own words start after the last word of its path.
  const std::string& name = command.get_name();
  size_t i = 0;
  for (size_t at = 0; at < args.size(); ++at) {
    if (args[at] == name) {
      i = at + 1;
      break;
    }
  }
  for (; i < args.size(); ++i) {
    const std::string& word = args[i];
    const bool option = word.size() > 1 && word[0] == '-';
    if (!option) {
      if (!takes_program) continue;
      // The program started here; CLI11 read its words as shoal's.
      std::vector<std::string> fixed;
      for (size_t j = 0; j < args.size(); ++j) {
        if (j == i) fixed.push_back("--");
        fixed.push_back(ShellQuote(args[j]));
      }
      return absl::StrCat("put -- before the command: shoal ",
                          absl::StrJoin(fixed, " "));
    }
    const std::string flag = word.substr(0, word.find('='));
    const CLI::Option* known = command.get_option_no_throw(flag);
    if (known == nullptr) {
      std::string message = absl::StrCat("unknown option ", flag);
      if (std::optional<std::string> near =
              ClosestName(flag, OptionNames(command))) {
        absl::StrAppend(&message, "; did you mean ", *near, "?");
      } else {
        absl::StrAppend(&message, " for ", path);
      }
      return message;
    }
    // Its value is the next word unless it came with `=` (or is a flag).
    if (known->get_items_expected_min() > 0 && flag.size() == word.size() &&
        (absl::StartsWith(word, "--") || word.size() == 2)) {
      ++i;
    }
  }
  return std::nullopt;
}

}  // namespace shoal::cli
