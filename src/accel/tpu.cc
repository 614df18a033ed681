#include "accel/tpu.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "accel/device_count.h"
#include "accel/fs_util.h"

namespace shoal::accel {
namespace {

constexpr char kAcceptedTypes[] =
    "expected <generation>-<number> with generation v2, v3, v4, v5p, "
    "v5litepod (v5e) or v6e, such as v4-8, v5p-16, v5litepod-16 or v6e-8";
constexpr char kGoogleVendorId[] = "0x1ae0";
// Chips of one TPU VM in a multi-host slice, as a 2x2x1 block.
constexpr int kChipsPerMultiHost = 4;

enum class CountRule {
  kPowerOfTwo,    // v2, v3: 4, 8, 16 ... chips
  kWholeHosts,    // v4, v5p: any multiple of 4 chips
  kLitePodSizes,  // v5e, v6e: 1, 4, 8, 16 ... chips
};

struct Generation {
  absl::string_view prefix;
  int cores_per_chip;  // what the number in the type counts per chip
  int dims;            // of the chip grid
  int max_chips;
  CountRule rule;
  absl::string_view accepted;  // the numbers accepted, for errors
};

constexpr Generation kGenerations[] = {
    {"v2", 2, 2, 256, CountRule::kPowerOfTwo,
     "a power of two from 8 to 512 (TensorCores, 2 per chip), e.g. v2-8, "
     "v2-32"},
    {"v3", 2, 2, 1024, CountRule::kPowerOfTwo,
     "a power of two from 8 to 2048 (TensorCores, 2 per chip), e.g. v3-8, "
     "v3-32"},
    {"v4", 2, 3, 4096, CountRule::kWholeHosts,
     "a multiple of 8 from 8 to 8192 (TensorCores, 2 per chip, 4 chips per "
     "host), e.g. v4-8, v4-16, v4-32"},
    {"v5p", 2, 3, 8960, CountRule::kWholeHosts,
     "a multiple of 8 from 8 to 17920 (TensorCores, 2 per chip, 4 chips per "
     "host), e.g. v5p-8, v5p-16, v5p-32"},
    {"v5litepod", 1, 2, 256, CountRule::kLitePodSizes,
     "1, 4, 8, 16, 32, 64, 128 or 256 (chips), e.g. v5litepod-4, "
     "v5litepod-16"},
    {"v6e", 1, 2, 256, CountRule::kLitePodSizes,
     "1, 4, 8, 16, 32, 64, 128 or 256 (chips), e.g. v6e-8, v6e-16"},
};

bool IsPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

bool ChipCountAllowed(const Generation& gen, int chips) {
  if (chips < 1 || chips > gen.max_chips) return false;
  switch (gen.rule) {
    case CountRule::kPowerOfTwo:
      return chips >= 4 && IsPowerOfTwo(chips);
    case CountRule::kWholeHosts:
      return chips % kChipsPerMultiHost == 0;
    case CountRule::kLitePodSizes:
      return chips == 1 || (chips >= 4 && IsPowerOfTwo(chips));
  }
  return false;
}

// The grid Cloud TPU uses when no topology is given: start from one host's
// 2x2(x1) block and double the smallest dimension (the last one on ties);
// an odd factor left over (v5p-24: 12 chips) multiplies the smallest
// dimension. Gives 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4 ... and 2x2, 2x4, 4x4,
// 4x8 ... as in the Cloud TPU documentation.
std::vector<int> DefaultTopology(int chips, int dims) {
  if (chips == 1) return std::vector<int>(dims, 1);
  std::vector<int> grid =
      dims == 3 ? std::vector<int>{2, 2, 1} : std::vector<int>{2, 2};
  int odd = chips;
  while (odd % 2 == 0) odd /= 2;
  auto smallest = [&grid] {
    size_t best = 0;
    for (size_t i = 1; i < grid.size(); ++i) {
      if (grid[i] <= grid[best]) best = i;
    }
    return best;
  };
  for (int have = 4; have < chips / odd; have *= 2) grid[smallest()] *= 2;
  if (odd > 1) {
    grid[smallest()] *= odd;
    std::sort(grid.begin(), grid.end());
  }
  return grid;
}

absl::StatusOr<std::vector<int>> ParseTopology(absl::string_view text) {
  std::vector<int> grid;
  for (absl::string_view part : absl::StrSplit(text, 'x')) {
    int value = 0;
    if (!AllDigits(part) || !absl::SimpleAtoi(part, &value) || value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "malformed TPU topology \"", text, "\"; expected AxB or AxBxC"));
    }
    grid.push_back(value);
  }
  if (grid.size() < 2 || grid.size() > 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed TPU topology \"", text, "\"; expected AxB or AxBxC"));
  }
  return grid;
}

std::string Bounds(const std::array<int, 3>& bounds) {
  return absl::StrJoin(bounds, ",");
}

std::string FormatQuantity(double quantity) { return absl::StrCat(quantity); }

}  // namespace

std::string TpuAcceleratorType::TopologyString() const {
  return absl::StrJoin(topology, "x");
}

std::string TpuAcceleratorType::GenerationLabel() const {
  return absl::StrCat("TPU-", absl::AsciiStrToUpper(generation));
}

std::string TpuAcceleratorType::HeadResourceName() const {
  return absl::StrCat("TPU-", name, "-head");
}

std::string TpuAcceleratorType::ChipsPerHostBoundsString() const {
  return Bounds(chips_per_host_bounds);
}

std::string TpuAcceleratorType::HostBoundsString() const {
  return Bounds(host_bounds);
}

absl::StatusOr<TpuAcceleratorType> TpuTypeFromTopology(
    absl::string_view version, absl::string_view topology) {
  std::string gen_name =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(version));
  if (absl::StartsWith(gen_name, "tpu-")) gen_name = "v" + gen_name.substr(5);
  if (gen_name == "v5e") gen_name = "v5litepod";
  const Generation* gen = nullptr;
  for (const Generation& candidate : kGenerations) {
    if (candidate.prefix == gen_name) gen = &candidate;
  }
  if (gen == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown TPU generation \"", version,
                     "\"; use v2, v3, v4, v5p, v5e (v5litepod) or v6e"));
  }
  absl::StatusOr<std::vector<int>> grid = ParseTopology(topology);
  if (!grid.ok()) return grid.status();
  int64_t chips = 1;
  for (int d : *grid) chips = std::min<int64_t>(chips * d, 1LL << 31);
  if (static_cast<int>(grid->size()) != gen->dims) {
    return absl::InvalidArgumentError(
        absl::StrCat("TPU topology \"", topology, "\" is not a ", gen->dims,
                     "-D grid, as ", gen->prefix, " slices are"));
  }
  return ParseTpuAcceleratorType(
      absl::StrCat(gen->prefix, "-", chips * gen->cores_per_chip), topology);
}

absl::StatusOr<TpuAcceleratorType> ParseTpuAcceleratorType(
    absl::string_view type, absl::string_view topology) {
  std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(type));
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TPU accelerator type is empty; ", kAcceptedTypes));
  }
  size_t dash = name.rfind('-');
  int number = 0;
  if (dash == std::string::npos || !AllDigits(name.substr(dash + 1)) ||
      !absl::SimpleAtoi(name.substr(dash + 1), &number)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed TPU accelerator type \"", name, "\"; ", kAcceptedTypes));
  }
  absl::string_view prefix = absl::string_view(name).substr(0, dash);
  const Generation* gen = nullptr;
  for (const Generation& candidate : kGenerations) {
    if (candidate.prefix == prefix) gen = &candidate;
  }
  if (gen == nullptr) {
    std::string hint = prefix == "v5e" ? " (v5e is written v5litepod-N)" : "";
    return absl::InvalidArgumentError(
        absl::StrCat("unknown TPU generation \"", prefix, "\" in \"", name,
                     "\"", hint, "; ", kAcceptedTypes));
  }
  if (number % gen->cores_per_chip != 0 ||
      !ChipCountAllowed(*gen, number / gen->cores_per_chip)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid TPU accelerator type \"", name, "\": for ",
                     gen->prefix, " the number must be ", gen->accepted));
  }

  TpuAcceleratorType result;
  result.name = name;
  result.generation = std::string(gen->prefix);
  result.chips = number / gen->cores_per_chip;
  bool single_host = gen->rule == CountRule::kLitePodSizes
                         ? result.chips <= 8
                         : result.chips <= kChipsPerMultiHost;
  result.hosts = single_host ? 1 : result.chips / kChipsPerMultiHost;
  result.chips_per_host = result.chips / result.hosts;

  if (topology.empty()) {
    result.topology = DefaultTopology(result.chips, gen->dims);
  } else {
    absl::StatusOr<std::vector<int>> grid = ParseTopology(topology);
    if (!grid.ok()) return grid.status();
    // Each dimension may be up to 2^31 - 1: multiplied in 64 bits and
    // capped, so that the product cannot overflow (nor wrap to the count).
    int64_t product = 1;
    for (int d : *grid) product = std::min<int64_t>(product * d, 1LL << 31);
    if (static_cast<int>(grid->size()) != gen->dims ||
        product != result.chips) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TPU topology \"", topology, "\" does not fit ", name, ", which has ",
          result.chips, " chips in a ", gen->dims, "-D grid such as ",
          absl::StrJoin(DefaultTopology(result.chips, gen->dims), "x")));
    }
    result.topology = *std::move(grid);
  }

  std::array<int, 3> grid3 = {1, 1, 1};
  std::copy(result.topology.begin(), result.topology.end(), grid3.begin());
  if (single_host) {
    result.chips_per_host_bounds = grid3;
  } else {
    result.chips_per_host_bounds = {2, 2, 1};
    for (int i = 0; i < 3; ++i) {
      if (grid3[i] % result.chips_per_host_bounds[i] != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "TPU topology \"", result.TopologyString(), "\" of ", name,
            " cannot be cut into hosts of 2x2x1 chips; use a topology whose "
            "first two dimensions are even"));
      }
      result.host_bounds[i] = grid3[i] / result.chips_per_host_bounds[i];
    }
  }
  return result;
}

absl::StatusOr<std::optional<TpuSliceFacts>> ParseTpuSliceFacts(
    const std::map<std::string, std::string>& env) {
  auto get = [&env](const char* key) -> std::string {
    auto it = env.find(key);
    return it == env.end()
               ? std::string()
               : std::string(absl::StripAsciiWhitespace(it->second));
  };
  std::string type_text = get(kTpuAcceleratorTypeEnv);
  if (type_text.empty()) return std::nullopt;

  TpuSliceFacts facts;
  absl::StatusOr<TpuAcceleratorType> type =
      ParseTpuAcceleratorType(type_text, get(kTpuTopologyEnv));
  if (!type.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kTpuAcceleratorTypeEnv, "=", type_text, " ", kTpuTopologyEnv, "=",
        get(kTpuTopologyEnv), ": ", type.status().message()));
  }
  facts.type = *std::move(type);
  const int hosts = facts.type.hosts;

  std::string worker = get(kTpuWorkerIdEnv);
  if (!worker.empty()) {
    int id = -1;
    if (!AllDigits(worker) || !absl::SimpleAtoi(worker, &id) || id >= hosts) {
      return absl::InvalidArgumentError(
          absl::StrCat(kTpuWorkerIdEnv, "=", worker, " is not a worker of ",
                       facts.type.name, ", which has workers 0..", hosts - 1));
    }
    facts.worker_id = id;
  } else if (hosts == 1) {
    facts.worker_id = 0;
  }

  std::string hostnames = get(kTpuWorkerHostnamesEnv);
  for (absl::string_view host : absl::StrSplit(hostnames, ',')) {
    host = absl::StripAsciiWhitespace(host);
    if (!host.empty()) facts.worker_hostnames.emplace_back(host);
  }
  if (!facts.worker_hostnames.empty() &&
      static_cast<int>(facts.worker_hostnames.size()) != hosts) {
    return absl::InvalidArgumentError(absl::StrCat(
        kTpuWorkerHostnamesEnv, " lists ", facts.worker_hostnames.size(),
        " host(s) but ", facts.type.name, " has ", hosts,
        "; list one host per worker, in worker order"));
  }

  facts.slice_name = get(kTpuNameEnv);
  static const std::set<std::string, std::less<>> kReserved = {
      "CPU", "GPU", "TPU", "memory", "object_store_memory"};
  if (kReserved.contains(facts.slice_name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kTpuNameEnv, "=", facts.slice_name,
                     " collides with a built-in resource; rename the slice"));
  }
  return facts;
}

TpuChipScan ScanTpuChips(const std::string& device_root) {
  TpuChipScan scan;
  std::string dev = internal::JoinPath(device_root, "dev");
  for (const std::string& name : internal::ListDirectory(dev)) {
    if (!absl::StartsWith(name, "accel") ||
        !AllDigits(absl::string_view(name).substr(5))) {
      continue;
    }
    if (internal::GetEntryKind(internal::JoinPath(dev, name)) ==
        internal::EntryKind::kOther) {
      ++scan.num_chips;
    }
  }
  if (scan.num_chips > 0) {
    scan.source = "/dev/accel*";
    return scan;
  }

  std::string vfio = internal::JoinPath(device_root, "dev/vfio");
  for (const std::string& group : internal::ListDirectory(vfio)) {
    if (!AllDigits(group)) continue;  // skips the /dev/vfio/vfio container
    std::string devices = internal::JoinPath(
        device_root,
        absl::StrCat("sys/kernel/iommu_groups/", group, "/devices"));
    for (const std::string& device :
         internal::ListDirectory(devices, /*max_entries=*/64)) {
      absl::StatusOr<std::string> vendor = internal::ReadSmallFile(
          internal::JoinPath(devices, device + "/vendor"), 64);
      if (vendor.ok() && absl::AsciiStrToLower(absl::StripAsciiWhitespace(
                             *vendor)) == kGoogleVendorId) {
        ++scan.num_chips;
        break;
      }
    }
  }
  if (scan.num_chips > 0) scan.source = "/dev/vfio";
  return scan;
}

absl::Status ValidateTpuChipRequest(double quantity, int chips_on_host) {
  if (quantity == 0) return absl::OkStatus();
  const std::string asked = FormatQuantity(quantity);
  if (quantity != 1 && quantity != 2 && quantity != 4 && quantity != 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a task may hold 1, 2, 4 or 8 TPU chips of one host (asked for ", asked,
        "); use a gang (placement group) for more than one host"));
  }
  if (chips_on_host <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("this node has no TPU chips (asked for ", asked,
                     "); run the task on a TPU host"));
  }
  if (quantity > chips_on_host) {
    return absl::InvalidArgumentError(
        absl::StrCat("a task may hold at most ", chips_on_host,
                     " TPU chips on this host (asked for ", asked,
                     "); use a gang (placement group) for more than one host"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceEnvironment> TpuVisibleChipsEnvironment(
    const std::vector<int>& chip_ids, int chips_on_host,
    const std::vector<std::string>& chip_names) {
  DeviceEnvironment env;
  if (chip_ids.empty()) return env;
  std::vector<int> sorted = chip_ids;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= chips_on_host) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TPU chip ", sorted[i], " is not on this host (chips 0..",
          chips_on_host - 1, ")"));
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("TPU chip ", sorted[i], " given twice"));
    }
  }
  const int held = static_cast<int>(sorted.size());
  absl::Status valid = ValidateTpuChipRequest(held, chips_on_host);
  if (!valid.ok()) return valid;

  std::vector<std::string> names;
  for (int id : sorted) {
    names.push_back(static_cast<size_t>(id) < chip_names.size()
                        ? chip_names[id]
                        : absl::StrCat(id));
  }
  env.set[kTpuVisibleChipsEnv] = absl::StrJoin(names, ",");
  if (held == chips_on_host) {
    // The whole host: the slice's own bounds apply, so let the framework use
    // its defaults.
    env.unset = {kTpuChipsPerHostBoundsEnv, kTpuHostBoundsEnv};
    return env;
  }
  env.set[kTpuChipsPerHostBoundsEnv] = held == 1   ? "1,1,1"
                                       : held == 2 ? "1,2,1"
                                                   : "2,2,1";
  env.set[kTpuHostBoundsEnv] = "1,1,1";
  return env;
}

absl::StatusOr<std::unique_ptr<TpuAcceleratorManager>>
TpuAcceleratorManager::Create(const std::string& device_root,
                              const std::map<std::string, std::string>& env,
                              std::optional<double> num_tpus) {
  TpuChipScan scan = ScanTpuChips(device_root);
  absl::StatusOr<internal::DeviceCount> count = internal::ResolveDeviceCount(
      "--num-tpus", num_tpus, scan.num_chips,
      internal::VisibleDeviceList(env, kTpuVisibleChipsEnv),
      kTpuVisibleChipsEnv);
  if (!count.ok()) return count.status();
  std::optional<TpuSliceFacts> slice;
  if (count->count > 0) {
    absl::StatusOr<std::optional<TpuSliceFacts>> facts =
        ParseTpuSliceFacts(env);
    if (!facts.ok()) return facts.status();
    slice = *std::move(facts);
  }
  std::string source = num_tpus.has_value() ? "--num-tpus" : scan.source;
  return std::make_unique<TpuAcceleratorManager>(
      count->count, scan.num_chips, std::move(slice), std::move(count->names),
      std::move(source));
}

TpuAcceleratorManager::TpuAcceleratorManager(
    int num_chips, int physical_chips, std::optional<TpuSliceFacts> slice,
    std::vector<std::string> chip_names, std::string source)
    : num_chips_(num_chips),
      physical_chips_(std::max(physical_chips, num_chips)),
      slice_(std::move(slice)),
      chip_names_(std::move(chip_names)),
      source_(std::move(source)) {}

std::string TpuAcceleratorManager::AcceleratorType() const {
  return slice_.has_value() ? slice_->type.GenerationLabel() : "";
}

std::map<std::string, double> TpuAcceleratorManager::ExtraResources() const {
  std::map<std::string, double> resources;
  if (num_chips_ == 0 || !slice_.has_value()) return resources;
  resources[absl::StrCat(kAcceleratorTypeResourcePrefix, AcceleratorType())] =
      1;
  if (!slice_->slice_name.empty()) resources[slice_->slice_name] = 1;
  if (slice_->worker_id == 0) resources[slice_->type.HeadResourceName()] = 1;
  return resources;
}

std::map<std::string, std::string> TpuAcceleratorManager::Labels() const {
  std::map<std::string, std::string> labels;
  if (num_chips_ == 0 || !slice_.has_value()) return labels;
  labels[kLabelAcceleratorType] = slice_->type.GenerationLabel();
  labels[kLabelTpuPodType] = slice_->type.name;
  labels[kLabelTpuTopology] = slice_->type.TopologyString();
  labels[kLabelTpuNumWorkers] = absl::StrCat(slice_->type.hosts);
  if (!slice_->slice_name.empty()) {
    labels[kLabelTpuSliceName] = slice_->slice_name;
  }
  if (slice_->worker_id.has_value()) {
    labels[kLabelTpuWorkerId] = absl::StrCat(*slice_->worker_id);
  }
  return labels;
}

absl::Status TpuAcceleratorManager::ValidateRequest(double quantity) const {
  return ValidateTpuChipRequest(quantity, num_chips_);
}

absl::StatusOr<DeviceEnvironment>
TpuAcceleratorManager::VisibleDevicesEnvironment(
    const std::vector<int>& device_ids) const {
  for (int id : device_ids) {
    if (id < 0 || id >= num_chips_) {
      return absl::InvalidArgumentError(
          absl::StrCat("TPU chip ", id, " is not on this node, which has ",
                       num_chips_, " chip(s)"));
    }
  }
  return TpuVisibleChipsEnvironment(device_ids, physical_chips_, chip_names_);
}

std::string TpuAcceleratorManager::Summary() const {
  if (num_chips_ == 0) return "TPU none";
  std::string summary = absl::StrCat("TPU ", num_chips_, " chip(s) (",
                                     source_.empty() ? "?" : source_, ")");
  if (!slice_.has_value()) {
    absl::StrAppend(&summary, ", no slice facts (", kTpuAcceleratorTypeEnv,
                    " unset)");
    return summary;
  }
  const TpuAcceleratorType& type = slice_->type;
  absl::StrAppend(&summary, ", ", type.name);
  if (!slice_->slice_name.empty()) {
    absl::StrAppend(&summary, " slice ", slice_->slice_name);
  }
  absl::StrAppend(&summary, ", worker ",
                  slice_->worker_id.has_value()
                      ? absl::StrCat(*slice_->worker_id)
                      : std::string("?"),
                  " of ", type.hosts, ", topology ", type.TopologyString());
  if (num_chips_ != type.chips_per_host) {
    absl::StrAppend(&summary, " (", type.name, " has ", type.chips_per_host,
                    " chips per host)");
  }
  return summary;
}

}  // namespace shoal::accel
