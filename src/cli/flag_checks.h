// Checks of flag values, shared by the subcommands. Every value is checked
// before anything (a session folder, a process) is made. A check says what
// is wrong and what to write instead; as CLI11 validators (which return ""
// for a good value) they run while the command line is parsed, and CLI11
// puts the flag's name in front.
#ifndef SHOAL_CLI_FLAG_CHECKS_H_
#define SHOAL_CLI_FLAG_CHECKS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace CLI {
class Validator;
}  // namespace CLI

namespace shoal::cli {

// The smallest object store worth having: objects of at least the inline
// threshold (100 KiB) go to the store, and a store is one shared-memory
// arena, so below a few such objects it only fails Puts.
inline constexpr int64_t kMinObjectStoreBytes = int64_t{1} << 20;

// The form every connection takes (SplitHostPort), said in the user's words.
absl::Status CheckHostPort(const std::string& address);
// A decimal number of 0 or more: "" when it is one, else why not.
std::string CheckNumber(const std::string& value);

CLI::Validator HostPort();
// An integer of at least `min`.
CLI::Validator AtLeast(int64_t min);
CLI::Validator NonNegativeNumber();
// A port to listen on: 0 asks for any free one (tests and the demo use it).
CLI::Validator ListenPort();
// An object store's size: 0 (none) or at least kMinObjectStoreBytes.
CLI::Validator StoreBytes();
// One of `allowed`, naming the nearest when it is a typo of one.
CLI::Validator OneOf(std::vector<std::string> allowed);

// What a node advertises, as `shoal start` and `_agent` take it; unset
// amounts are detected.
struct AdvertisedFlags {
  std::optional<double> num_cpus, num_gpus, num_tpus;
  std::string resources_json, labels_json;
};

// What CLI11's checks cannot see: values that are each well formed but that
// the node would refuse (2.5 GPUs, an amount too large, bad JSON).
absl::Status CheckAdvertised(const AdvertisedFlags& f);

// SHOAL_ADDRESS stands for --address when that is not given: it must have
// the same form.
absl::Status CheckAddressEnvironment(const std::string& address_flag);

// `path` from the root, so that a command naming it works from any folder.
std::string Absolute(const std::string& path);

}  // namespace shoal::cli

#endif  // SHOAL_CLI_FLAG_CHECKS_H_
