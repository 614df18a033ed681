#include "cli/command_line.h"

#include <CLI/CLI.hpp>
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/exit_status.h"
#include "cli/usage.h"

namespace shoal::cli {

std::vector<std::string> VisibleCommands(CLI::App& app) {
  std::vector<std::string> names;
  for (CLI::App* sub : app.get_subcommands(
           [](CLI::App* s) { return !s->get_group().empty(); })) {
    names.push_back(sub->get_name());
  }
  return names;
}

std::optional<std::string> UnknownCommand(CLI::App& app, int argc,
                                          char** argv) {
  if (argc == 1) {
    return absl::StrCat(
        "say a command: ", absl::StrJoin(VisibleCommands(app), ", "),
        " (`shoal --help` says what each does)");
  }
  CLI::App* current = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return std::nullopt;
    CLI::App* known = nullptr;
    for (CLI::App* sub :
         current->get_subcommands([](CLI::App*) { return true; })) {
      if (sub->get_name() == word) known = sub;
    }
    if (known != nullptr) {
      current = known;
      if (i + 1 == argc && current->get_require_subcommand_min() > 0) {
        return absl::StrCat("say a command after ", word, ": ",
                            absl::StrJoin(VisibleCommands(*current), ", "));
      }
      continue;
    }
    if (current->get_require_subcommand_min() == 0) return std::nullopt;
    const std::vector<std::string> visible = VisibleCommands(*current);
    std::string message = absl::StrCat("unknown command \"", word, "\"");
    if (std::optional<std::string> closest = ClosestName(word, visible)) {
      absl::StrAppend(&message, "; did you mean \"", *closest, "\"?");
    } else {
      absl::StrAppend(&message, "; the commands are ",
                      absl::StrJoin(visible, ", "));
    }
    return message;
  }
  return std::nullopt;
}

namespace {

// The commands read before an error ("shoal start"): `shoal start --help`
// lists the options that matter.
std::string CommandPath(const CLI::App* failed) {
  std::string command = failed->get_name();
  for (const CLI::App* at = failed; !at->get_subcommands().empty();) {
    at = at->get_subcommands().front();
    absl::StrAppend(&command, " ", at->get_name());
  }
  return command;
}

}  // namespace

std::optional<absl::StatusOr<int>> Parse(
    CLI::App& app, int argc, char** argv,
    const std::vector<const CLI::App*>& take_programs) {
  if (std::optional<std::string> unknown = UnknownCommand(app, argc, argv)) {
    return UsageError(*unknown);
  }
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) {
    return absl::StrCat("shoal: ", e.what(), "\nRun `", CommandPath(failed),
                        " --help` for the options.\n");
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      // CLI11 lists the words it did not expect, last first; say which
      // option was meant, or where the program should have started.
      const CLI::App* command = &app;
      while (!command->get_subcommands().empty()) {
        command = command->get_subcommands().front();
      }
      const std::string path = CommandPath(&app);
      const bool takes_program =
          std::find(take_programs.begin(), take_programs.end(), command) !=
          take_programs.end();
      if (std::optional<std::string> why = ExplainUnexpected(
              *command, path, std::vector<std::string>(argv + 1, argv + argc),
              takes_program)) {
        return UsageError(
            absl::StrCat(*why, "\nRun `", path, " --help` for the options."));
      }
    }
    // --help and --help-all "fail" with exit code 0 after printing help.
    return app.exit(e) == 0 ? 0 : kUsageError;
  }
  return std::nullopt;
}

}  // namespace shoal::cli
