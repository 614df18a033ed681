// Runs a few thousand small tasks across the cluster and prints where they
// ran. With SHOAL_ADDRESS set it uses that cluster; otherwise it starts a
// local one.
//
//   ./build/bin/hello_tasks [num_tasks]
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shoal/api.h"

// Squares a number and says which node did it.
std::pair<std::string, int64_t> Square(int64_t x) {
  return {shoal::CurrentNodeId(), x * x};
}

int64_t Add(int64_t a, int64_t b) { return a + b; }

SHOAL_REMOTE(Square, Add);

// Memory resources are byte counts: shown as `shoal status` shows them.
std::string FormatAmount(const std::string& name, double amount) {
  char text[64];
  if (name == "memory" || name == "object_store_memory") {
    static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int unit = 0;
    while (unit < 4 && amount >= 1024.0 - 0.005) {
      amount /= 1024.0;
      ++unit;
    }
    std::snprintf(text, sizeof(text), "%.2f%s", amount, kUnits[unit]);
  } else {
    std::snprintf(text, sizeof(text), "%g", amount);
  }
  return text;
}

int Run(int n) {
  shoal::Init();
  std::cout << "Cluster resources:";
  for (const auto& [name, amount] : shoal::ClusterResources()) {
    std::cout << " " << name << "=" << FormatAmount(name, amount);
  }
  std::cout << "\n";

  std::vector<shoal::ObjectRef<std::pair<std::string, int64_t>>> refs;
  refs.reserve(n);
  for (int i = 0; i < n; ++i) refs.push_back(shoal::Task(Square).Remote(i));
  std::map<std::string, int> per_node;
  int64_t sum = 0;
  for (const auto& [node, square] : shoal::Get(refs)) {
    ++per_node[node];
    sum += square;
  }
  int64_t expected = 0;
  for (int64_t i = 0; i < n; ++i) expected += i * i;
  std::cout << n << " tasks, sum of squares " << sum
            << (sum == expected ? " (correct)" : " (WRONG)") << "\n";
  for (const auto& [node, count] : per_node) {
    std::cout << "  node " << node << " ran " << count << " tasks\n";
  }

  // Refs as arguments: resolved before the task runs, wherever it runs.
  auto a = shoal::Task(Add).Remote(int64_t{1}, int64_t{2});
  auto b = shoal::Task(Add).SetResource("CPU", 0.5).Remote(a, int64_t{10});
  std::cout << "Add(Add(1, 2), 10) = " << shoal::Get(b) << "\n";
  shoal::Shutdown();
  return sum == expected ? 0 : 1;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 4000;
  try {
    return Run(n);
  } catch (const shoal::Error& e) {
    // No cluster at SHOAL_ADDRESS, a wrong token, a task that failed.
    std::cerr << "hello_tasks: " << e.what() << "\n";
    return 1;
  }
}
