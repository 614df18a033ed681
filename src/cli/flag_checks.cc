#include "cli/flag_checks.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/usage.h"
#include "common/environment.h"
#include "common/net.h"
#include "scheduling/resource_set.h"

namespace shoal::cli {

absl::Status CheckHostPort(const std::string& address) {
  std::string host;
  int port = 0;
  if (SplitHostPort(address, &host, &port).ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "must be HOST:PORT with a port from 1 to 65535, e.g. 10.0.0.1:6379 "
      "(got \"",
      address, "\")"));
}

// Digits with an optional fraction and exponent. Not hexadecimal ("0x10" is
// not 16), "inf" or "nan", which strtod would take.
std::string CheckNumber(const std::string& value) {
  double number = 0;
  const bool decimal =
      !value.empty() &&
      (absl::ascii_isdigit(static_cast<unsigned char>(value[0])) ||
       value[0] == '.') &&
      value.find_first_not_of("0123456789.eE+-") == std::string::npos;
  if (!decimal || !absl::SimpleAtod(value, &number) || !std::isfinite(number) ||
      number < 0) {
    return absl::StrCat("must be a number of 0 or more (got \"", value, "\")");
  }
  return "";
}

CLI::Validator HostPort() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        absl::Status status = CheckHostPort(value);
        return status.ok() ? "" : std::string(status.message());
      },
      "");
}

CLI::Validator AtLeast(int64_t min) {
  return CLI::Validator(
      [min](std::string& value) -> std::string {
        int64_t number = 0;
        if (!absl::SimpleAtoi(value, &number) || number < min) {
          return absl::StrCat("must be a whole number of ", min,
                              " or more (got \"", value, "\")");
        }
        return "";
      },
      "");
}

CLI::Validator NonNegativeNumber() { return CLI::Validator(CheckNumber, ""); }

CLI::Validator ListenPort() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        int port = -1;
        if (!absl::SimpleAtoi(value, &port) || port < 0 || port > 65535) {
          return absl::StrCat(
              "must be a port from 1 to 65535, or 0 for any free port (got \"",
              value, "\")");
        }
        return "";
      },
      "");
}

CLI::Validator StoreBytes() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        int64_t bytes = -1;
        if (!absl::SimpleAtoi(value, &bytes) || bytes < 0 ||
            (bytes > 0 && bytes < kMinObjectStoreBytes)) {
          return absl::StrCat(
              "must be a byte count of at least ", kMinObjectStoreBytes,
              " (1 MiB), or 0 for no object store (got \"", value, "\")");
        }
        return "";
      },
      "");
}

CLI::Validator OneOf(std::vector<std::string> allowed) {
  return CLI::Validator(
      [allowed](std::string& value) -> std::string {
        for (const std::string& a : allowed) {
          if (value == a) return "";
        }
        std::string message =
            absl::StrCat("must be ", absl::StrJoin(allowed, " or "), " (got \"",
                         value, "\")");
        if (std::optional<std::string> near = ClosestName(value, allowed)) {
          absl::StrAppend(&message, "; did you mean ", *near, "?");
        }
        return message;
      },
      "");
}

absl::Status CheckAdvertised(const AdvertisedFlags& f) {
  const std::pair<const char*, const std::optional<double>*> amounts[] = {
      {"CPU", &f.num_cpus}, {"GPU", &f.num_gpus}, {"TPU", &f.num_tpus}};
  for (const auto& [name, amount] : amounts) {
    if (!amount->has_value()) continue;
    auto set = ResourceSet::FromDoubles({{name, **amount}});
    if (!set.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--num-", absl::AsciiStrToLower(name),
                       "s: ", set.status().message()));
    }
  }
  if (!f.resources_json.empty()) {
    auto set = ResourceSet::FromJson(f.resources_json);
    if (!set.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resources: ", set.status().message()));
    }
  }
  if (!f.labels_json.empty()) {
    auto labels = ParseLabelsJson(f.labels_json);
    if (!labels.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--labels: ", labels.status().message()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckAddressEnvironment(const std::string& address_flag) {
  std::optional<std::string> env = env::Find(env::Var::kAddress);
  if (!address_flag.empty() || !env) return absl::OkStatus();
  absl::Status status = CheckHostPort(*env);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(
      absl::StrCat("SHOAL_ADDRESS ", status.message()));
}

std::string Absolute(const std::string& path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  return error ? path : absolute.lexically_normal().string();
}

}  // namespace shoal::cli
