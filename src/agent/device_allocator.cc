#include "agent/device_allocator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace shoal::agent {

std::string DeviceKey(const DeviceIds& devices) {
  std::string key;
  for (const auto& [name, ids] : devices) {
    absl::StrAppend(&key, name, ":");
    for (int id : ids) absl::StrAppend(&key, id, ",");
    key += ";";
  }
  return key;
}

DeviceAllocator::DeviceAllocator(const std::map<std::string, int>& devices) {
  for (const auto& [name, count] : devices) {
    std::set<int>& ids = free_[name];
    for (int i = 0; i < count; ++i) ids.insert(i);
  }
}

DeviceIds DeviceAllocator::Take(const ResourceSet& base_shape) {
  DeviceIds out;
  for (auto& [name, free] : free_) {
    int64_t fixed = base_shape.Get(name);
    if (fixed <= 0) continue;
    if (fixed < kResourceUnit) {
      out[name] = {free.empty() ? 0 : *free.begin()};
      continue;
    }
    int64_t count = fixed / kResourceUnit;
    for (auto it = free.begin(); it != free.end() && count > 0; --count) {
      out[name].push_back(*it);
      it = free.erase(it);
    }
  }
  return out;
}

absl::Status DeviceAllocator::Return(const ResourceSet& base_shape,
                                     const DeviceIds& devices) {
  for (const auto& [name, ids] : devices) {
    if (base_shape.Get(name) < kResourceUnit) continue;  // shared
    auto it = free_.find(name);
    if (it == free_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("devices of kind ", name,
                       " given back to a node that "
                       "has none (a bug in Shoal's agent)"));
    }
    for (int id : ids) {
      if (it->second.count(id)) {
        return absl::FailedPreconditionError(
            absl::StrCat(name, " ", id,
                         " was given back twice (a bug in "
                         "Shoal's agent)"));
      }
    }
  }
  for (const auto& [name, ids] : devices) {
    if (base_shape.Get(name) < kResourceUnit) continue;
    free_[name].insert(ids.begin(), ids.end());
  }
  return absl::OkStatus();
}

std::set<int> DeviceAllocator::free(const std::string& name) const {
  auto it = free_.find(name);
  return it == free_.end() ? std::set<int>() : it->second;
}

absl::Status AddDeviceEnvironment(
    const std::vector<std::shared_ptr<const accel::AcceleratorManager>>&
        accelerators,
    const DeviceIds& devices, SpawnOptions* spawn) {
  for (const auto& m : accelerators) {
    auto it = devices.find(m->ResourceName());
    if (it == devices.end()) {
      // Hide this kind's devices from a worker that holds none of them.
      ASSIGN_OR_RETURN(accel::DeviceEnvironment none,
                       m->VisibleDevicesEnvironment({}));
      for (const auto& [k, v] : none.set) spawn->env[k] = v;
      for (const auto& k : none.unset) spawn->unset_env.push_back(k);
      continue;
    }
    ASSIGN_OR_RETURN(accel::DeviceEnvironment env,
                     m->VisibleDevicesEnvironment(it->second));
    for (const auto& [k, v] : env.set) spawn->env[k] = v;
    for (const auto& k : env.unset) spawn->unset_env.push_back(k);
    std::string ids;
    for (int id : it->second) {
      absl::StrAppend(&ids, ids.empty() ? "" : ",", id);
    }
    spawn->env["SHOAL_DEVICE_KIND"] = m->ResourceName();
    spawn->env["SHOAL_DEVICE_IDS"] = ids;
    spawn->env["SHOAL_ACCELERATOR_TYPE"] = m->AcceleratorType();
    auto labels = m->Labels();
    for (const auto& [label, var] :
         std::vector<std::pair<std::string, std::string>>{
             {accel::kLabelTpuSliceName, "SHOAL_TPU_SLICE_NAME"},
             {accel::kLabelTpuWorkerId, "SHOAL_TPU_WORKER_ID"},
             {accel::kLabelAcceleratorType, "SHOAL_ACCELERATOR_NAME"}}) {
      if (auto l = labels.find(label); l != labels.end()) {
        spawn->env[var] = l->second;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace shoal::agent
