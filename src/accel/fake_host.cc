#include "accel/fake_host.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "accel/fs_util.h"
#include "accel/tpu.h"

namespace shoal::accel {
namespace {

namespace fs = std::filesystem;

absl::Status CheckRoot(const std::string& root) {
  std::error_code ec;
  fs::path absolute = fs::weakly_canonical(fs::absolute(root, ec), ec);
  if (root.empty() || ec || absolute == absolute.root_path()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a fake host needs its own directory, not \"", root,
        "\"; pass a scratch directory such as /tmp/shoal-fake-host"));
  }
  return internal::MakeDirectories(root);
}

bool HasDigitSuffix(absl::string_view name, absl::string_view prefix) {
  if (!absl::ConsumePrefix(&name, prefix) || name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

// Removes entries of `dir` named <prefix><digits>.
void RemoveNumbered(const std::string& dir, absl::string_view prefix) {
  for (const std::string& name : internal::ListDirectory(dir)) {
    if (HasDigitSuffix(name, prefix)) {
      std::error_code ec;
      fs::remove_all(internal::JoinPath(dir, name), ec);
    }
  }
}

std::string PciAddress(int index) {
  return absl::StrFormat("0000:00:%02x.0", 4 + index);
}

// /dev/vfio/<n> and, as real sysfs has it, a PCI device directory holding
// `vendor` with /sys/kernel/iommu_groups/<n>/devices/<addr> linking to it.
absl::Status MakeVfioChip(const std::string& root, int index) {
  std::string address = PciAddress(index);
  std::string device_dir =
      internal::JoinPath(root, "sys/devices/pci0000:00/" + address);
  absl::Status status = internal::MakeDirectories(device_dir);
  if (!status.ok()) return status;
  status = internal::WriteFile(device_dir + "/vendor", "0x1ae0\n");
  if (!status.ok()) return status;
  status = internal::WriteFile(device_dir + "/device", "0x0062\n");
  if (!status.ok()) return status;
  std::string group_devices = internal::JoinPath(
      root, absl::StrCat("sys/kernel/iommu_groups/", index, "/devices"));
  status = internal::MakeDirectories(group_devices);
  if (!status.ok()) return status;
  std::error_code ec;
  fs::path link = fs::path(group_devices) / address;
  fs::remove(link, ec);
  fs::create_directory_symlink(
      fs::path("../../../../devices/pci0000:00") / address, link, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot link ", link.string(), ": ", ec.message()));
  }
  return internal::WriteFile(
      internal::JoinPath(root, absl::StrCat("dev/vfio/", index)), "");
}

}  // namespace

absl::Status MakeFakeTpuHost(const std::string& root,
                             const FakeTpuHostOptions& options,
                             std::map<std::string, std::string>* env_out) {
  absl::StatusOr<TpuAcceleratorType> type =
      ParseTpuAcceleratorType(options.accelerator_type);
  if (!type.ok()) return type.status();
  if (options.worker_id < 0 || options.worker_id >= type->hosts) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", options.worker_id, " is not a worker of ",
                     type->name, ", which has workers 0..", type->hosts - 1));
  }
  std::vector<std::string> hostnames = options.worker_hostnames;
  if (hostnames.empty()) hostnames.assign(type->hosts, "127.0.0.1");
  if (static_cast<int>(hostnames.size()) != type->hosts) {
    return absl::InvalidArgumentError(
        absl::StrCat(hostnames.size(), " worker hostnames given but ",
                     type->name, " has ", type->hosts, " hosts"));
  }
  absl::Status status = CheckRoot(root);
  if (!status.ok()) return status;

  std::string dev = internal::JoinPath(root, "dev");
  std::string vfio = internal::JoinPath(root, "dev/vfio");
  status = internal::MakeDirectories(vfio);
  if (!status.ok()) return status;
  RemoveNumbered(dev, "accel");
  RemoveNumbered(vfio, "");
  for (int chip = 0; chip < type->chips_per_host; ++chip) {
    status =
        options.use_vfio
            ? MakeVfioChip(root, chip)
            : internal::WriteFile(
                  internal::JoinPath(dev, absl::StrCat("accel", chip)), "");
    if (!status.ok()) return status;
  }
  if (options.use_vfio) {
    status = internal::WriteFile(vfio + "/vfio", "");
    if (!status.ok()) return status;
  }

  (*env_out)[kTpuAcceleratorTypeEnv] = type->name;
  (*env_out)[kTpuWorkerIdEnv] = absl::StrCat(options.worker_id);
  (*env_out)[kTpuNameEnv] = options.slice_name;
  (*env_out)[kTpuWorkerHostnamesEnv] = absl::StrJoin(hostnames, ",");
  (*env_out)[kTpuTopologyEnv] = type->TopologyString();
  return absl::OkStatus();
}

absl::Status MakeFakeTpuHost(const std::string& root,
                             const std::string& accelerator_type, int worker_id,
                             std::map<std::string, std::string>* env_out) {
  FakeTpuHostOptions options;
  options.accelerator_type = accelerator_type;
  options.worker_id = worker_id;
  return MakeFakeTpuHost(root, options, env_out);
}

absl::Status MakeFakeNvidiaHost(const std::string& root, int num_gpus,
                                const std::string& model) {
  if (num_gpus < 0 || num_gpus > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a fake NVIDIA host holds 0 to 64 GPUs (asked for ", num_gpus, ")"));
  }
  absl::Status status = CheckRoot(root);
  if (!status.ok()) return status;
  std::string gpus = internal::JoinPath(root, "proc/driver/nvidia/gpus");
  std::string dev = internal::JoinPath(root, "dev");
  std::error_code ec;
  fs::remove_all(gpus, ec);
  RemoveNumbered(dev, "nvidia");
  status = internal::MakeDirectories(dev);
  if (!status.ok()) return status;
  for (int i = 0; i < num_gpus; ++i) {
    std::string bus = absl::StrFormat("0000:%02x:00.0", 0x10 + i);
    std::string dir = absl::StrCat(gpus, "/", bus);
    status = internal::MakeDirectories(dir);
    if (!status.ok()) return status;
    status = internal::WriteFile(
        dir + "/information",
        absl::StrCat(
            "Model: \t\t ", model,
            "\nIRQ:   \t\t 0\nGPU UUID: \t GPU-00000000-0000-0000-0000-",
            absl::StrFormat("%012d", i),
            "\nVideo BIOS: \t ??.??.??.??.??\nBus Type: \t PCIe\n"
            "Bus Location: \t ",
            bus, "\nDevice Minor: \t ", i, "\nGPU Excluded:\t No\n"));
    if (!status.ok()) return status;
    status = internal::WriteFile(
        internal::JoinPath(dev, absl::StrCat("nvidia", i)), "");
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace shoal::accel
