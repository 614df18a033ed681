// Commands that Shoal prints for a user to paste into a shell ("to add a
// node, run there: shoal start --address ... --token ..."), written so that
// a POSIX shell reads back exactly the words they were made of, whatever
// bytes those words hold.
#ifndef SHOAL_COMMON_SHELL_QUOTE_H_
#define SHOAL_COMMON_SHELL_QUOTE_H_

#include <string>
#include <vector>

namespace shoal {

// `word` as one shell word: unchanged when it has only letters, digits and
// _-./:=@%+, (nothing a shell reads specially), else in single quotes, each
// ' inside written as '\''. The empty word is ''.
std::string ShellQuote(const std::string& word);

// `words` quoted one by one and joined by spaces: a command line that
// `sh -c` runs with exactly these arguments.
std::string ShellCommand(const std::vector<std::string>& words);

// NAME=VALUE for a command's prefix (`SHOAL_ADDRESS=... ./program`), VALUE
// quoted. REQUIRES: `name` is a shell variable name.
std::string ShellAssignment(const std::string& name, const std::string& value);

}  // namespace shoal

#endif  // SHOAL_COMMON_SHELL_QUOTE_H_
