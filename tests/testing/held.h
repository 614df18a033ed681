// What a cluster still holds when nothing should run on it: resources in
// use, placement groups, demands, live actors, leases, objects in stores,
// new /dev/shm entries and processes (for the idle and chaos tiers).
#ifndef SHOAL_TESTS_TESTING_HELD_H_
#define SHOAL_TESTS_TESTING_HELD_H_

#include <set>
#include <string>

#include "tests/testing/shm_entries.h"
#include "tests/testing/test_cluster.h"

namespace shoal::testing {

struct HeldCheck {
  // /dev/shm as the idle cluster left it; empty: /dev/shm is not checked.
  std::set<std::string> shm_when_idle;
  // Processes whose command line holds this are held; empty: none are.
  std::string marker;
  // A node that is not alive is a finding (the chaos tier kills nodes).
  bool dead_nodes_are_held = true;
};

// What the cluster still holds, as a list of findings ("" when idle). Asks
// through this process's driver (shoal::Init against `cluster`), `shoal
// status` and each alive node's agent.
std::string WhatIsHeld(const TestCluster& cluster, const HeldCheck& check);

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_HELD_H_
