#include "agent/node_resources.h"

#include <algorithm>

namespace shoal::agent {

bool NodeResources::OverCommitted() const {
  for (const auto& [name, amount] : available.amounts()) {
    if (amount < 0) return true;
  }
  return false;
}

ResourceSet NodeResources::Unlent() const {
  if (lent.empty()) return available;
  ResourceSet free = available;
  for (const auto& [name, amount] : lent.amounts()) {
    int64_t have = available.Get(name);
    free.Set(name, std::min(have, std::max<int64_t>(0, have - amount)));
  }
  return free;
}

bool NodeResources::CanGrant(const ResourceSet& shape,
                             const ResourceSet& withheld) const {
  if (OverCommitted()) return false;
  if (withheld.empty()) return available.Contains(shape);
  ResourceSet usable = available;
  usable.Subtract(withheld);
  return usable.Contains(shape);
}

}  // namespace shoal::agent
