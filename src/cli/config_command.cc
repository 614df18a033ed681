#include "cli/config_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <nlohmann/json.hpp>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/context.h"
#include "common/environment.h"
#include "common/utf8.h"

namespace shoal::cli::config {
namespace {

using env::Setter;
using env::Type;
using env::Variable;

const char* TypeName(Type type) {
  switch (type) {
    case Type::kText:
      return "text";
    case Type::kInteger:
      return "integer";
    case Type::kFlag:
      return "flag (1/true/yes)";
    case Type::kPath:
      return "path";
    case Type::kAddress:
      return "HOST:PORT";
    case Type::kList:
      return "comma-separated list";
  }
  return "text";
}

const char* SetterKey(Setter setter) {
  switch (setter) {
    case Setter::kUser:
      return "user";
    case Setter::kShoal:
      return "shoal";
    case Setter::kOther:
      return "other";
  }
  return "user";
}

const char* SetterHeading(Setter setter) {
  switch (setter) {
    case Setter::kUser:
      return "Set by you";
    case Setter::kShoal:
      return "Set by Shoal for the workers, jobs and gang ranks it starts";
    case Setter::kOther:
      return "Set by other tools; Shoal reads them";
  }
  return "";
}

// The value as it may be shown: never a secret's, always valid UTF-8.
std::optional<std::string> Shown(const Variable& v, const Lookup& lookup) {
  std::optional<std::string> value = lookup(v.var);
  if (!value) return std::nullopt;
  if (v.secret) return std::string("(set, not shown)");
  return ToValidUtf8(*value);
}

// The variables `names` asks for, in the table's order; an error names the
// first that is not there.
absl::StatusOr<std::vector<const Variable*>> Chosen(
    const std::vector<std::string>& names) {
  std::vector<const Variable*> out;
  for (const Variable& v : env::Table()) {
    if (names.empty() ||
        std::find(names.begin(), names.end(), v.name) != names.end()) {
      out.push_back(&v);
    }
  }
  for (const std::string& name : names) {
    bool known = std::any_of(out.begin(), out.end(), [&](const Variable* v) {
      return name == v->name;
    });
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("Shoal neither reads nor sets ", ToValidUtf8(name),
                       "; run `shoal config` for the variables it knows"));
    }
  }
  return out;
}

void PrintJson(const std::vector<const Variable*>& chosen, const Lookup& lookup,
               std::ostream& out) {
  nlohmann::json list = nlohmann::json::array();
  for (const Variable* v : chosen) {
    nlohmann::json item = {{"name", v->name},
                           {"type", TypeName(v->type)},
                           {"set_by", SetterKey(v->set_by)},
                           {"default", v->default_value},
                           {"doc", v->doc}};
    if (v->type == Type::kInteger) item["minimum"] = v->minimum;
    std::optional<std::string> value = Shown(*v, lookup);
    item["value"] = value ? nlohmann::json(*value) : nlohmann::json(nullptr);
    list.push_back(std::move(item));
  }
  out << list.dump(2) << "\n";
}

// `text` in lines of at most `width` columns, each after `indent`.
std::string Wrapped(absl::string_view text, absl::string_view indent,
                    size_t width) {
  std::string out;
  size_t column = 0;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (column > 0 && column + 1 + word.size() > width) {
      out += "\n";
      column = 0;
    }
    absl::StrAppend(&out, column == 0 ? indent : " ", word);
    column += (column == 0 ? indent.size() : 1) + word.size();
  }
  return out + "\n";
}

void PrintText(const std::vector<const Variable*>& chosen, const Lookup& lookup,
               std::ostream& out) {
  std::optional<Setter> section;
  for (const Variable* v : chosen) {
    if (section != v->set_by) {
      out << (section ? "\n" : "") << SetterHeading(v->set_by) << ":\n";
      section = v->set_by;
    }
    std::string facts = TypeName(v->type);
    if (*v->default_value != '\0') {
      absl::StrAppend(&facts, ", default ", v->default_value);
    }
    if (v->type == Type::kInteger && v->minimum > 0) {
      absl::StrAppend(&facts, ", at least ", v->minimum);
    }
    out << "  " << v->name << " (" << facts << ")";
    if (std::optional<std::string> value = Shown(*v, lookup)) {
      out << " = " << *value;
    }
    out << "\n" << Wrapped(v->doc, "      ", 78);
  }
  if (chosen.size() == env::Table().size()) {
    out << "\nThe variables a launch sets for PyTorch, PyTorch/XLA and JAX "
           "are in docs/launch_contracts.md.\n";
  }
}

}  // namespace

CLI::App* Register(CLI::App& parent, Flags& f) {
  CLI::App* cmd = parent.add_subcommand(
      "config",
      "List the environment variables Shoal reads and sets, with their "
      "defaults and the values this shell has");
  cmd->add_option("names", f.names, "Only these variables (default: all)");
  cmd->add_flag("--json", f.json, "Print them as JSON");
  return cmd;
}

absl::StatusOr<int> PrintTable(const Flags& flags, const Lookup& lookup,
                               std::ostream& out) {
  absl::StatusOr<std::vector<const Variable*>> chosen = Chosen(flags.names);
  if (!chosen.ok()) return chosen.status();
  if (flags.json) {
    PrintJson(*chosen, lookup, out);
  } else {
    PrintText(*chosen, lookup, out);
  }
  return 0;
}

absl::StatusOr<int> Run(const Flags& flags, Context& ctx) {
  return PrintTable(flags, env::Find, *ctx.out);
}

}  // namespace shoal::cli::config
