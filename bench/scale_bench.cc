// The driver's half of bench/scale_bench.py: one measurement against a
// running cluster of simulated nodes (`shoal dev sim-nodes`), printed as
// `name value unit` lines. The token comes from SHOAL_TOKEN.
//
//   scale_bench place --address A --bundles N [--trials T]
//       a STRICT_SPREAD group of N bundles of {CPU: 1}, one per host:
//       pg_<N>_hosts_place_ms (the median of T, each created, waited for
//       and removed)
//   scale_bench slice --address A [--slice NAME] [--trials T]
//       ReserveTpuSlice of every host of a slice: slice_<hosts>_reserve_ms
//   scale_bench tasks --address A --tasks N [--resource R]
//       N no-op tasks, each asking for {R: 1}, submitted at once (the
//       submit window holds the driver back past its limit) and gathered:
//       queued_<N>_tasks_s
//   scale_bench gang --address A --bundles N [--resource R]
//       a STRICT_SPREAD gang of N {R: 1} bundles, placed ("# gang placed"),
//       then waited on until it fails as its hosts die; prints the error
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "shoal/api.h"

namespace {

void Noop() {}
SHOAL_REMOTE(Noop);

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Place(int bundles, int trials) {
  std::vector<double> ms;
  for (int t = 0; t < trials; ++t) {
    auto t0 = std::chrono::steady_clock::now();
    shoal::PlacementGroup pg = shoal::CreatePlacementGroup(
        {"", std::vector<std::map<std::string, double>>(bundles, {{"CPU", 1}}),
         shoal::PlacementStrategy::kStrictSpread});
    if (!pg.Wait(120000)) {
      fprintf(stderr, "a group of %d bundles was not placed in 120 s\n",
              bundles);
      return 1;
    }
    ms.push_back(MsSince(t0));
    const size_t hosts = pg.BundleNodes().size();
    shoal::RemovePlacementGroup(pg);
    if (hosts != static_cast<size_t>(bundles)) {
      fprintf(stderr, "the group holds %zu nodes, not %d\n", hosts, bundles);
      return 1;
    }
    printf("# trial %d: %.1f ms\n", t, ms.back());
  }
  printf("pg_%d_hosts_place_ms %.1f ms\n", bundles, Median(ms));
  return 0;
}

int Slice(const std::string& slice, int trials) {
  std::vector<double> ms;
  size_t hosts = 0;
  for (int t = 0; t < trials; ++t) {
    auto t0 = std::chrono::steady_clock::now();
    shoal::SliceReservation r = shoal::ReserveTpuSlice(slice, 120000);
    if (!r.group.Wait(120000)) {
      fprintf(stderr, "slice %s was not reserved in 120 s\n",
              r.slice_name.c_str());
      return 1;
    }
    ms.push_back(MsSince(t0));
    hosts = r.hosts.size();
    shoal::RemovePlacementGroup(r.group);
    printf("# trial %d: %s (%s), %zu hosts, %.1f ms\n", t, r.slice_name.c_str(),
           r.accelerator_type.c_str(), hosts, ms.back());
  }
  printf("slice_%zu_hosts_reserve_ms %.1f ms\n", hosts, Median(ms));
  return 0;
}

// A gang of `bundles` hosts with {resource: 1} each, placed, then waited
// on until it fails (the caller kills its hosts): the error names them.
int Gang(int bundles, const std::string& resource) {
  shoal::PlacementGroup pg = shoal::CreatePlacementGroup(
      {"doomed-gang",
       std::vector<std::map<std::string, double>>(bundles, {{resource, 1}}),
       shoal::PlacementStrategy::kStrictSpread});
  if (!pg.Wait(120000)) {
    fprintf(stderr, "the gang of %d was not placed in 120 s\n", bundles);
    return 1;
  }
  printf("# gang placed on %zu hosts\n", pg.BundleNodes().size());
  fflush(stdout);
  try {
    while (true) {
      pg.Wait(1000);
      usleep(20000);
    }
  } catch (const shoal::InfeasibleError& e) {
    std::string what = e.what();
    printf("# gang failed: %s\n", what.size() > 600
                                      ? (what.substr(0, 600) + "...").c_str()
                                      : what.c_str());
  }
  return 0;
}

int Tasks(int64_t count, const std::string& resource) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<shoal::ObjectRef<void>> refs;
  refs.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    refs.push_back(shoal::Task(Noop).SetResources({{resource, 1}}).Remote());
  }
  const double submitted_ms = MsSince(t0);
  for (const auto& ref : refs) shoal::Get(ref, 600000);
  const double s = MsSince(t0) / 1000;
  printf("# submitted in %.1f s, %.0f tasks/s end to end\n",
         submitted_ms / 1000, count / s);
  printf("queued_%lld_tasks_s %.2f s\n", static_cast<long long>(count), s);
  return 0;
}

const char* Flag(int argc, char** argv, const char* name, const char* def) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr,
            "usage: scale_bench place|slice|gang|tasks --address A ...\n");
    return 2;
  }
  const std::string mode = argv[1];
  shoal::InitOptions options;
  options.address = Flag(argc, argv, "--address", "");
  const char* token = getenv("SHOAL_TOKEN");
  options.token = token != nullptr ? token : "";
  if (options.address.empty() || options.token.empty()) {
    fprintf(stderr, "scale_bench needs --address and SHOAL_TOKEN\n");
    return 2;
  }
  shoal::Init(options);
  const int trials = atoi(Flag(argc, argv, "--trials", "3"));
  int code = 2;
  try {
    if (mode == "place") {
      code = Place(atoi(Flag(argc, argv, "--bundles", "1000")), trials);
    } else if (mode == "slice") {
      code = Slice(Flag(argc, argv, "--slice", ""), trials);
    } else if (mode == "gang") {
      code = Gang(atoi(Flag(argc, argv, "--bundles", "100")),
                  Flag(argc, argv, "--resource", "doomed"));
    } else if (mode == "tasks") {
      code = Tasks(atoll(Flag(argc, argv, "--tasks", "1000000")),
                   Flag(argc, argv, "--resource", "sim"));
    } else {
      fprintf(stderr, "unknown mode %s: place, slice, gang or tasks\n",
              mode.c_str());
    }
  } catch (const std::exception& e) {
    fprintf(stderr, "scale_bench %s: %s\n", mode.c_str(), e.what());
    code = 1;
  }
  shoal::Shutdown();
  return code;
}
