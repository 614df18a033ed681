#include "common/shell_quote.h"

#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shoal {
namespace {

TEST(ShellQuoteTest, QuotesWhatAShellReadsSpecially) {
  struct Case {
    std::string word;
    std::string quoted;
  };
  const std::vector<Case> cases = {
      {"127.0.0.1:6379", "127.0.0.1:6379"},
      {"--token=abc123", "--token=abc123"},
      {"/tmp/shoal-x/a_b,c@d%e+f", "/tmp/shoal-x/a_b,c@d%e+f"},
      {"", "''"},
      {"a b;touch X", "'a b;touch X'"},
      {"it's", "'it'\\''s'"},
      {"$(id)", "'$(id)'"},
      {"`id`", "'`id`'"},
      {"~", "'~'"},
      {"a*", "'a*'"},
      {"line\nnext", "'line\nnext'"},
      {"'", "''\\'''"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ShellQuote(c.word), c.quoted) << c.word;
  }
}

TEST(ShellQuoteTest, AFirstWordWithAnEqualsSignIsNotAnAssignment) {
  EXPECT_EQ(ShellCommand({"a=b", "c=d"}), "'a=b' c=d");
  EXPECT_EQ(ShellAssignment("SHOAL_TOKEN", "a b"), "SHOAL_TOKEN='a b'");
}

// What /bin/sh makes of `line`: each argument it passes to printf, ended by
// a NUL byte.
std::string ShellWords(const std::string& line) {
  int out[2];
  if (pipe(out) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    std::string script = absl::StrCat("printf '%s\\0' ", line);
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string read_back;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) > 0;) {
    read_back.append(buf, n);
  }
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "sh failed";
  return read_back;
}

TEST(ShellQuoteTest, TheShellReadsBackEveryByte) {
  std::vector<std::string> words = {
      "shoal", "start", "--token=a b;touch X", "", "'\"\\$`!*?[~#&|<>(){}",
      "\t \n"};
  std::string every_byte;
  for (int c = 1; c < 256; ++c) every_byte.push_back(static_cast<char>(c));
  words.push_back(every_byte);
  std::string expected;
  for (const std::string& w : words) {
    expected += w;
    expected.push_back('\0');
  }
  EXPECT_EQ(ShellWords(ShellCommand(words)), expected);
}

}  // namespace
}  // namespace shoal
