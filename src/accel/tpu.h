// Cloud TPU: accelerator types, chips on a host, slice facts, what a host
// advertises and the environment that gives a process some of its chips.
// Values follow docs/launch_contracts.md (and Ray, which real
// frameworks and users already expect).
//
// Everything here is pure or reads a device root given by the caller; the
// process environment is passed in as a map, so tests are hermetic.
#ifndef SHOAL_ACCEL_TPU_H_
#define SHOAL_ACCEL_TPU_H_

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "accel/accelerator_manager.h"

namespace shoal::accel {

// Environment variables read from (slice facts) and written to (isolation).
inline constexpr char kTpuAcceleratorTypeEnv[] = "TPU_ACCELERATOR_TYPE";
inline constexpr char kTpuWorkerIdEnv[] = "TPU_WORKER_ID";
inline constexpr char kTpuWorkerHostnamesEnv[] = "TPU_WORKER_HOSTNAMES";
inline constexpr char kTpuNameEnv[] = "TPU_NAME";
inline constexpr char kTpuTopologyEnv[] = "TPU_TOPOLOGY";
inline constexpr char kTpuVisibleChipsEnv[] = "TPU_VISIBLE_CHIPS";
inline constexpr char kTpuChipsPerHostBoundsEnv[] = "TPU_CHIPS_PER_HOST_BOUNDS";
inline constexpr char kTpuHostBoundsEnv[] = "TPU_HOST_BOUNDS";

// A parsed accelerator type such as "v5p-16": the whole slice's shape.
struct TpuAcceleratorType {
  std::string name;        // "v5p-16" (lower case)
  std::string generation;  // "v2", "v3", "v4", "v5p", "v5litepod", "v6e"
  int chips = 0;           // in the whole slice
  int hosts = 0;           // TPU VMs (workers) in the slice
  int chips_per_host = 0;
  std::vector<int> topology;  // chip grid, 2-D or 3-D: {2, 2, 2}
  std::array<int, 3> chips_per_host_bounds = {1, 1, 1};  // {2, 2, 1}
  std::array<int, 3> host_bounds = {1, 1, 1};            // {1, 1, 2}

  std::string TopologyString() const;            // "2x2x2"
  std::string GenerationLabel() const;           // "TPU-V5P"
  std::string HeadResourceName() const;          // "TPU-v5p-16-head"
  std::string ChipsPerHostBoundsString() const;  // "2,2,1"
  std::string HostBoundsString() const;          // "1,1,2"

  bool operator==(const TpuAcceleratorType& other) const = default;
};

// Parses "<generation>-<number>" for v2, v3, v4, v5p (the number counts
// TensorCores, two per chip) and v5litepod, v6e (the number counts chips).
// `topology` ("2x2x4"; TPU_TOPOLOGY) overrides the default grid when not
// empty and must hold exactly the slice's chips. Errors (InvalidArgument) say
// which types are accepted.
absl::StatusOr<TpuAcceleratorType> ParseTpuAcceleratorType(
    absl::string_view type, absl::string_view topology = "");

// The slice type of a generation ("v5p", "TPU-V5P", "v6e"; "v5e" names
// v5litepod) with a chip grid ("2x2x2"): v5p and 2x2x2 is v5p-16, as Ray's
// slice placement groups name slices by topology. InvalidArgument, saying
// why, for an unknown generation or a grid the generation cannot have.
absl::StatusOr<TpuAcceleratorType> TpuTypeFromTopology(
    absl::string_view version, absl::string_view topology);

// What the TPU_* variables say about this host's slice.
struct TpuSliceFacts {
  TpuAcceleratorType type;
  std::string slice_name;        // TPU_NAME; may be empty
  std::optional<int> worker_id;  // TPU_WORKER_ID; 0 on a one-host slice
  std::vector<std::string> worker_hostnames;  // TPU_WORKER_HOSTNAMES

  bool operator==(const TpuSliceFacts& other) const = default;
};

// Reads TPU_ACCELERATOR_TYPE, TPU_TOPOLOGY, TPU_WORKER_ID,
// TPU_WORKER_HOSTNAMES and TPU_NAME from `env`. nullopt when
// TPU_ACCELERATOR_TYPE is absent or empty; InvalidArgument, naming the
// variable, when a value is malformed or contradicts the type.
absl::StatusOr<std::optional<TpuSliceFacts>> ParseTpuSliceFacts(
    const std::map<std::string, std::string>& env);

// TPU chips found under a device root.
struct TpuChipScan {
  int num_chips = 0;
  std::string source;  // "/dev/accel*", "/dev/vfio" or "" when none
};

// Counts `<root>/dev/accel<N>` entries that are not directories (an NVIDIA
// driver creates a `/dev/accel/` directory, which holds no TPU); when there
// are none, counts `<root>/dev/vfio/<N>` groups with a device whose PCI
// vendor (`<root>/sys/kernel/iommu_groups/<N>/devices/*/vendor`) is Google's
// 0x1ae0. Never opens a device node.
TpuChipScan ScanTpuChips(const std::string& device_root);

// OK when one task may hold `quantity` chips of a host with `chips_on_host`
// chips: 0 (none), 1, 2, 4 or 8, and no more than the host has.
absl::Status ValidateTpuChipRequest(double quantity, int chips_on_host);

// The environment for a process that holds `chip_ids` (0-based, distinct) of
// a host with `chips_on_host` chips. A partial host gets TPU_VISIBLE_CHIPS,
// TPU_CHIPS_PER_HOST_BOUNDS (1,1,1 for one chip, 1,2,1 for two, 2,2,1 for
// four) and TPU_HOST_BOUNDS=1,1,1; the whole host gets TPU_VISIBLE_CHIPS and
// neither bounds variable (both are unset). `chip_names`, when not empty,
// maps an id to the name written into TPU_VISIBLE_CHIPS (used when the node
// agent itself was started with TPU_VISIBLE_CHIPS). No ids: no change.
absl::StatusOr<DeviceEnvironment> TpuVisibleChipsEnvironment(
    const std::vector<int>& chip_ids, int chips_on_host,
    const std::vector<std::string>& chip_names = {});

// The TPU manager of one host.
class TpuAcceleratorManager final : public AcceleratorManager {
 public:
  // Scans `device_root` and reads slice facts from `env`. `num_tpus`
  // (--num-tpus) replaces the chip count; TPU_VISIBLE_CHIPS in `env` limits
  // it to the chips listed. Slice facts are read only when the host has
  // chips, so a bad TPU_* variable fails only a TPU host.
  static absl::StatusOr<std::unique_ptr<TpuAcceleratorManager>> Create(
      const std::string& device_root,
      const std::map<std::string, std::string>& env,
      std::optional<double> num_tpus);

  // From known facts (tests, simulation). `physical_chips` is how many chips
  // the host really has (>= num_chips); `chip_names` as in
  // TpuVisibleChipsEnvironment.
  TpuAcceleratorManager(int num_chips, int physical_chips,
                        std::optional<TpuSliceFacts> slice,
                        std::vector<std::string> chip_names,
                        std::string source);

  const std::optional<TpuSliceFacts>& slice() const { return slice_; }

  std::string ResourceName() const override { return "TPU"; }
  int NumDevices() const override { return num_chips_; }
  std::string AcceleratorType() const override;
  std::map<std::string, double> ExtraResources() const override;
  std::map<std::string, std::string> Labels() const override;
  absl::Status ValidateRequest(double quantity) const override;
  absl::StatusOr<DeviceEnvironment> VisibleDevicesEnvironment(
      const std::vector<int>& device_ids) const override;
  std::string Summary() const override;

 private:
  int num_chips_;
  int physical_chips_;
  std::optional<TpuSliceFacts> slice_;
  std::vector<std::string> chip_names_;
  std::string source_;
};

}  // namespace shoal::accel

#endif  // SHOAL_ACCEL_TPU_H_
