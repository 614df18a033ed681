// From `srun` to the program's first line, on a real Slurm cluster of three
// simulated hosts (tests/slurm/slurm_cluster.h; needs root and slurm-wlm):
//
//   srun        srun -N3 of `date`: Slurm's own cost of a step
//   symmetric   srun -N3 shoal symmetric-run -- (the program): a head and two
//               agents started, joined, the program run on node 0
//   by hand     the same cluster made as a person would: `shoal start
//               --head` on node1, `shoal start --address` on node2 and
//               node3 (one after another, as from one terminal), then the
//               program with SHOAL_ADDRESS
//
// Each figure is the median of --rounds (default 5) of the time from the
// first command to the program's first line (the program prints the wall
// clock), and, for symmetric-run, to srun's end (everything stopped).
//
//   sudo build/bin/slurm_startup_bench [--rounds N]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/slurm/slurm_cluster.h"

namespace {

using shoal::testing::SlurmCluster;

double NowS() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The wall clock the program printed ("FIRST <seconds>").
double FirstLine(const std::string& out) {
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    double at = 0;
    if (absl::ConsumePrefix(&line, "FIRST ") && absl::SimpleAtod(line, &at)) {
      return at;
    }
  }
  return -1;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? -1 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
  }
  const std::string why = SlurmCluster::UnavailableReason();
  if (!why.empty()) {
    std::fprintf(stderr, "slurm_startup_bench: %s\n", why.c_str());
    return 2;
  }
  auto cluster = SlurmCluster::Start(3, "/tmp");
  if (!cluster.ok()) {
    std::fprintf(stderr, "slurm_startup_bench: %s\n",
                 std::string(cluster.status().message()).c_str());
    return 1;
  }
  SlurmCluster& c = **cluster;
  const std::string shoal = absl::StrCat(SHOAL_BIN_DIR, "/shoal");
  const std::string program = "/bin/sh -c 'echo FIRST $(date +%s.%N)'";
  const std::string dir = c.root();
  const std::vector<std::string> env = {"SHOAL_TEMP_DIR=" + dir + "/tmp"};
  std::vector<double> srun_s, sym_first_s, sym_end_s, hand_first_s;
  for (int r = 0; r < rounds; ++r) {
    std::string out;
    double t0 = NowS();
    c.Run("srun -N3 --ntasks-per-node=1 " + program, &out, env, dir);
    srun_s.push_back(FirstLine(out) - t0);

    out.clear();
    t0 = NowS();
    int rc = c.Run(absl::StrCat("srun -N3 --ntasks-per-node=1 ", shoal,
                                " symmetric-run -- ", program),
                   &out, env, dir);
    const double end = NowS();
    if (rc != 0 || FirstLine(out) < 0) {
      std::fprintf(stderr, "symmetric-run failed (%d):\n%s\n", rc, out.c_str());
      return 1;
    }
    sym_first_s.push_back(FirstLine(out) - t0);
    sym_end_s.push_back(end - t0);

    // By hand: the head on node1, agents on node2 and node3.
    const std::string hand = absl::StrCat(dir, "/hand-", r);
    auto& net = c.network();
    out.clear();
    t0 = NowS();
    std::vector<std::string> head = {shoal,       "start",   "--head",
                                     "--port",    "6380",    "--temp-dir",
                                     hand + "-0", "--token", "benchtoken"};
    shoal::testing::RunInNetns(net.netns(0), head, &out);
    const std::string address = net.address(0) + ":6380";
    for (int h = 1; h < 3; ++h) {
      shoal::testing::RunInNetns(
          net.netns(h),
          {shoal, "start", "--address", address, "--temp-dir",
           absl::StrCat(hand, "-", h), "--token", "benchtoken"},
          &out);
    }
    std::string ran;
    shoal::testing::RunInNetns(
        net.netns(0), {"/bin/sh", "-c", "echo FIRST $(date +%s.%N)"}, &ran,
        {"SHOAL_ADDRESS=" + address, "SHOAL_TOKEN=benchtoken"});
    hand_first_s.push_back(FirstLine(ran) - t0);
    for (int h = 2; h >= 0; --h) {
      std::string ignored;
      shoal::testing::RunInNetns(
          net.netns(h),
          {shoal, "stop", "--temp-dir", absl::StrCat(hand, "-", h)}, &ignored);
    }
  }
  std::printf("slurm startup, 3 simulated hosts, median of %d rounds:\n",
              rounds);
  std::printf("  srun alone            to first line %6.3f s\n",
              Median(srun_s));
  std::printf(
      "  srun symmetric-run    to first line %6.3f s   to srun's end "
      "(all stopped) %6.3f s\n",
      Median(sym_first_s), Median(sym_end_s));
  std::printf(
      "  by hand (shoal start x3, then the program) to first line "
      "%6.3f s\n",
      Median(hand_first_s));
  return 0;
}
