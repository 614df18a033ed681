// Prints Shoal's task-path figures, one per line as `name value unit`.
//
// It starts its own cluster: a head and two node agents on this host (each
// with its own temp dir, on loopback), then measures as one driver:
//   tasks_async_per_s      20,000 no-op tasks submitted, then all gathered
//   tasks_sync_per_s       submit one task, get it, repeat
//   task_roundtrip_p50_us  median of those round trips (p99 also printed)
//   actor_calls_sync_per_s  one actor: call a no-op method, get it, repeat
//   actor_calls_async_per_s one actor: 20,000 calls submitted, then gathered
//   actor_calls_concurrent_per_s  the same to an actor running calls on 4
//                          threads (SetMaxConcurrency(4))
//   actor_calls_n_n_async_per_s  4 actors, 4 driver threads each calling
//                          all of them, submitted then gathered
//   actor_create_per_s     50 actors made, each until its first call returns
//   launch_4proc_s         `shoal launch --per-device` of /bin/true on 4
//                          simulated chips, start to exit (median of 5)
//   launch_with_one_restart_s  the same when rank 0 fails once and the gang
//                          restarts as a whole
//   start_to_ready_ms      `shoal start --head` until head and agent are
//                          ready (median of 3), detection included
//   allreduce_busbw_*      float32 all-reduce bus bandwidth for 1, 16 and
//                          64 MiB on 4 ranks of one host and on 2 hosts x 2
//                          ranks, and the largest error (collective_bench)
//   put_GBps, get_GBps, put_calls_per_s, get_calls_per_s and the memcpy
//                          ceiling: shoal::Put/Get on one node
//                          (object_api_bench)
//   transfer_GBps          OBJECT_PULL of 1 GiB between two node agents,
//                          beside the TCP loopback and memcpy ceilings
//                          (object_transfer_bench)
//
//   ./build/bin/shoal_bench [--tasks N] [--sync N] [--cpus-per-node C]
//                           [--task-path-only] [--tls]
//
// --task-path-only stops after the task figures (to compare, e.g., runs
// with task events off: SHOAL_TASK_EVENTS_REPORT_INTERVAL_MS=0). --tls runs
// everything with mutual TLS on every connection (certificates made for the
// run), the benchmarks it runs beside itself included.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "rpc/tls_testing.h"
#include "shoal/api.h"
#include "tests/testing/test_cluster.h"

namespace {

int64_t Noop(int64_t x) { return x; }

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

class Echoer {
 public:
  int64_t Echo(int64_t x) { return x; }
};
Echoer* CreateEchoer() { return new Echoer(); }
SHOAL_REMOTE(Noop, CreateEchoer, &Echoer::Echo);

// Submits `n` calls to each of `actors` (round robin), then gathers them.
double ActorCallsPerSecond(
    const std::vector<shoal::ActorHandle<Echoer>>& actors, int n) {
  std::vector<shoal::ObjectRef<int64_t>> refs;
  refs.reserve(n * actors.size());
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    for (const auto& a : actors) {
      refs.push_back(a.Task(&Echoer::Echo).Remote(int64_t{i}));
    }
  }
  std::vector<int64_t> values = shoal::Get(refs);
  double rate = static_cast<double>(refs.size()) / Seconds(start);
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != static_cast<int64_t>(i / actors.size())) {
      fprintf(stderr, "wrong actor result %ld at %zu\n", values[i], i);
      exit(1);
    }
  }
  return rate;
}

void ActorFigures(int num_calls, int num_sync) {
  auto actor = shoal::Actor(CreateEchoer).Remote();
  shoal::Get(actor.Task(&Echoer::Echo).Remote(int64_t{0}));
  ActorCallsPerSecond({actor}, 2000);  // warm up
  auto sync_start = std::chrono::steady_clock::now();
  for (int i = 0; i < num_sync; ++i) {
    if (shoal::Get(actor.Task(&Echoer::Echo).Remote(int64_t{i})) != i) exit(1);
  }
  double sync_rate = num_sync / Seconds(sync_start);
  double async_rate = 0;
  for (int round = 0; round < 3; ++round) {
    async_rate = std::max(async_rate, ActorCallsPerSecond({actor}, num_calls));
  }
  auto threaded = shoal::Actor(CreateEchoer).SetMaxConcurrency(4).Remote();
  shoal::Get(threaded.Task(&Echoer::Echo).Remote(int64_t{0}));
  double concurrent_rate = 0;
  for (int round = 0; round < 3; ++round) {
    concurrent_rate =
        std::max(concurrent_rate, ActorCallsPerSecond({threaded}, num_calls));
  }
  std::vector<shoal::ActorHandle<Echoer>> many;
  for (int i = 0; i < 4; ++i)
    many.push_back(shoal::Actor(CreateEchoer).Remote());
  for (const auto& a : many)
    shoal::Get(a.Task(&Echoer::Echo).Remote(int64_t{0}));
  double n_n_rate = 0;
  for (int round = 0; round < 3; ++round) {
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> callers;
    for (int t = 0; t < 4; ++t) {
      callers.emplace_back(
          [&many, num_calls] { ActorCallsPerSecond(many, num_calls / 4); });
    }
    for (auto& t : callers) t.join();
    n_n_rate = std::max(n_n_rate,
                        4.0 * (num_calls / 4) * many.size() / Seconds(start));
  }
  constexpr int kCreate = 50;
  auto create_start = std::chrono::steady_clock::now();
  std::vector<shoal::ActorHandle<Echoer>> made;
  std::vector<shoal::ObjectRef<int64_t>> first;
  for (int i = 0; i < kCreate; ++i) {
    made.push_back(shoal::Actor(CreateEchoer).Remote());
    first.push_back(made.back().Task(&Echoer::Echo).Remote(int64_t{i}));
  }
  shoal::Get(first);
  double create_rate = kCreate / Seconds(create_start);
  for (auto& a : made) a.Kill();
  for (auto& a : many) a.Kill();
  actor.Kill();
  threaded.Kill();
  printf("actor_calls_sync_per_s %.0f calls/s\n", sync_rate);
  printf("actor_calls_async_per_s %.0f calls/s\n", async_rate);
  printf("actor_calls_concurrent_per_s %.0f calls/s\n", concurrent_rate);
  printf("actor_calls_n_n_async_per_s %.0f calls/s\n", n_n_rate);
  printf("actor_create_per_s %.1f actors/s\n", create_rate);
  fflush(stdout);
}

// `shoal launch --per-device` of a trivial program on one simulated TPU
// v5p-8 host (4 chips): start to exit, and the same when the first attempt
// fails and the gang restarts once.
int LaunchFigures() {
  char tmpl[] = "/tmp/shoal-bench-tpu-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  auto cluster = shoal::testing::TestCluster::StartFakeTpuSlice(
      tmpl, "v5p-8", /*hosts=*/1, /*cpus_per_host=*/4);
  if (!cluster.ok()) return 1;
  auto time_launch = [&](const std::vector<std::string>& extra) {
    std::vector<double> seconds;
    for (int i = 0; i < 5; ++i) {
      std::vector<std::string> args = {
          "launch",  "--address",         (*cluster)->address(),
          "--token", (*cluster)->token(), "--per-device"};
      args.insert(args.end(), extra.begin(), extra.end());
      std::string out;
      auto t0 = std::chrono::steady_clock::now();
      int rc = shoal::testing::RunCli(args, &out);
      seconds.push_back(Seconds(t0));
      if (rc != 0) fprintf(stderr, "launch failed: %s\n", out.c_str());
    }
    std::sort(seconds.begin(), seconds.end());
    return seconds[seconds.size() / 2];
  };
  double plain = time_launch({"--", "/bin/true"});
  double restarted =
      time_launch({"--max-restarts", "1", "--", "/bin/sh", "-c",
                   "[ $SHOAL_RESTART_COUNT = 1 ] || [ $RANK != 0 ]"});
  (*cluster)->Stop();
  std::filesystem::remove_all(tmpl);
  printf("launch_with_one_restart_s %.3f s\n", restarted);
  printf("launch_4proc_s %.3f s\n", plain);
  return 0;
}

}  // namespace

// Runs a benchmark built beside this binary (collective_bench runs its
// ranks as processes of their own; object_transfer_bench its own cluster).
int RunBesideSelf(const char* self, const char* name) {
  std::filesystem::path bench =
      std::filesystem::path(self).parent_path() / name;
  if (!std::filesystem::exists(bench)) {
    fprintf(stderr, "%s is missing: build the %s target\n", bench.c_str(),
            name);
    return 1;
  }
  fflush(stdout);
  return system(bench.c_str()) == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  int num_tasks = 20000;
  int num_sync = 3000;
  double cpus = 2;
  bool task_path_only = false;
  bool tls = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--task-path-only")) task_path_only = true;
    if (!strcmp(argv[i], "--tls")) tls = true;
  }
  if (tls) {
    auto dir = shoal::rpc::ExportTestTls();
    if (!dir.ok()) {
      fprintf(stderr, "%s\n", std::string(dir.status().message()).c_str());
      return 1;
    }
    printf("# mutual TLS on every connection (certificates in %s)\n",
           dir->c_str());
  }
  for (int i = 1; i + 1 < argc; ++i) {
    if (!strcmp(argv[i], "--tasks")) num_tasks = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--sync")) num_sync = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--cpus-per-node")) cpus = atof(argv[i + 1]);
  }
  // `shoal start --head` until it returns (head and agent both ready),
  // on this machine (no accelerators): the cost of detection included.
  std::vector<double> start_ms;
  for (int i = 0; i < 3; ++i) {
    char tmpl[] = "/tmp/shoal-bench-start-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    std::string out;
    auto t0 = std::chrono::steady_clock::now();
    int rc = shoal::testing::RunCli(
        {"start", "--head", "--port", "0", "--node-ip-address", "127.0.0.1",
         "--temp-dir", tmpl},
        &out);
    start_ms.push_back(Seconds(t0) * 1e3);
    shoal::testing::RunCli({"stop", "--temp-dir", tmpl}, &out);
    std::filesystem::remove_all(tmpl);
    if (rc != 0) {
      fprintf(stderr, "shoal start failed: %s\n", out.c_str());
      return 1;
    }
  }
  std::sort(start_ms.begin(), start_ms.end());

  shoal::testing::ClusterSpec spec;
  spec.nodes = {{"bench-a", cpus, ""}, {"bench-b", cpus, ""}};
  auto cluster = shoal::testing::TestCluster::Start(spec);
  if (!cluster.ok()) {
    fprintf(stderr, "cannot start the cluster: %s\n",
            std::string(cluster.status().message()).c_str());
    return 1;
  }
  (*cluster)->ExportEnvironment();
  shoal::Init();
  printf(
      "# cluster: head + 2 node agents on this host, %.0f CPU each; "
      "%u hardware threads\n",
      cpus, std::thread::hardware_concurrency());

  // Warm up: start the workers.
  {
    std::vector<shoal::ObjectRef<int64_t>> refs;
    for (int i = 0; i < 2000; ++i) refs.push_back(shoal::Task(Noop).Remote(i));
    shoal::Get(refs);
  }

  // Async: submit everything, then gather.
  double best_async = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<shoal::ObjectRef<int64_t>> refs;
    refs.reserve(num_tasks);
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < num_tasks; ++i) {
      refs.push_back(shoal::Task(Noop).Remote(i));
    }
    std::vector<int64_t> values = shoal::Get(refs);
    double rate = num_tasks / Seconds(start);
    for (int i = 0; i < num_tasks; ++i) {
      if (values[i] != i) {
        fprintf(stderr, "wrong result %ld for task %d\n", values[i], i);
        return 1;
      }
    }
    best_async = std::max(best_async, rate);
    printf("# async round %d: %.0f tasks/s\n", round, rate);
  }

  // Sync: one at a time.
  std::vector<double> latencies_us;
  latencies_us.reserve(num_sync);
  auto sync_start = std::chrono::steady_clock::now();
  for (int i = 0; i < num_sync; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    int64_t v = shoal::Get(shoal::Task(Noop).Remote(i));
    latencies_us.push_back(Seconds(t0) * 1e6);
    if (v != i) return 1;
  }
  double sync_rate = num_sync / Seconds(sync_start);
  std::sort(latencies_us.begin(), latencies_us.end());

  printf("start_to_ready_ms %.1f ms\n", start_ms[1]);
  printf("tasks_async_per_s %.0f tasks/s\n", best_async);
  printf("tasks_sync_per_s %.0f tasks/s\n", sync_rate);
  printf("task_roundtrip_p99_us %.1f us\n",
         latencies_us[latencies_us.size() * 99 / 100]);
  printf("task_roundtrip_p50_us %.1f us\n",
         latencies_us[latencies_us.size() / 2]);
  fflush(stdout);
  if (task_path_only) {
    shoal::Shutdown();
    (*cluster)->Stop();
    return 0;
  }
  ActorFigures(num_tasks, num_sync);
  shoal::Shutdown();
  (*cluster)->Stop();
  if (int rc = LaunchFigures(); rc != 0) return rc;
  if (int rc = RunBesideSelf(argv[0], "collective_bench"); rc != 0) return rc;
  if (int rc = RunBesideSelf(argv[0], "object_api_bench"); rc != 0) return rc;
  return RunBesideSelf(argv[0], "object_transfer_bench");
}
