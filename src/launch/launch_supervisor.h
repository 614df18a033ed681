// The supervision phase of `shoal launch`: torchrun's failure rules over a
// gang that runs as attempts. The first rank that fails on its own stops
// the whole gang; with restarts left (and an exit code not in
// --no-restart-on) the gang starts again as a whole; a gang whose host was
// lost is placed again on live nodes when it may be (not a TPU slice, whose
// hosts are fixed). It ends with the launch's exit code and summary line.
//
// The supervisor reaches the cluster only through GangControl (start ranks,
// stop them, wait for the next event, time), so that its rules are tested
// with a fake gang and a fake clock.
//
// Threading: Run() is called on one thread, which makes every call into
// GangControl.
#ifndef SHOAL_LAUNCH_LAUNCH_SUPERVISOR_H_
#define SHOAL_LAUNCH_LAUNCH_SUPERVISOR_H_

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace shoal::launch {

// How a rank of the gang ended, as its host's runner saw it.
struct RankExit {
  int rank = 0;
  int exit_code = 0;  // 128 + signal when killed; 127: it could not start
  std::string description;
  int64_t time_us = 0;   // when it ended; orders the failures
  bool stopped = false;  // ended after the gang was told to stop
};

// A rank that ended non-zero on its own (not stopped with its gang).
bool IsRankFailure(const RankExit& exit);

// What the runner of one host answered when it ended.
struct HostOutcome {
  int host_index = 0;
  std::string address;          // the host's, as the gang knows it
  std::vector<RankExit> exits;  // of every process it started
  int num_processes = 0;        // it was to start
  // Why the runner failed (names its host); empty when it ran its ranks.
  std::string error;
  // The node of a host that was lost with its runner (its worker died).
  std::string lost_node;
};

// Something that happened to the running attempt.
struct GangEvent {
  enum class Kind {
    kNone,        // nothing within the wait
    kRankExited,  // a runner reported a rank's end (`rank_exit`)
    kHostEnded,   // a host's runner ended (`host`)
  };
  Kind kind = Kind::kNone;
  RankExit rank_exit;
  HostOutcome host;
};

// The supervisor's view of the cluster.
class GangControl {
 public:
  virtual ~GangControl() = default;
  // Starts attempt `attempt` (0 first) of every rank, a runner per host;
  // returns how many hosts will each end with a kHostEnded event. Events
  // of earlier attempts are not reported after this.
  virtual int StartRanks(int attempt) = 0;
  // Asks every rank of the running attempt to stop (again is harmless).
  virtual void StopRanks() = 0;
  // The running attempt's next event, or kNone after `timeout_ms`.
  virtual GangEvent WaitForEvent(int64_t timeout_ms) = 0;
  // Whether the user asked the launch to stop (Ctrl-C, SIGTERM).
  virtual bool StopRequested() = 0;
  // Places the gang again on live nodes but the ones in `lost_nodes` (all
  // seen lost so far); the error says why it cannot be.
  virtual absl::Status PlaceAgain(const std::set<std::string>& lost_nodes) = 0;
  virtual int64_t NowUs() = 0;
  virtual void SleepUs(int64_t us) = 0;
  // Writes a line to the user's terminal.
  virtual void Say(const std::string& line) = 0;
};

struct RestartPolicy {
  int max_restarts = 0;
  std::set<int> no_restart_on;  // exit codes that fail at once
  bool can_place_again = true;  // false for a TPU slice
  // The wait before restart k (1-based): backoff_us * 2^(k-1), at most
  // max_backoff_us. 0: restart at once (torchrun's rule).
  int64_t backoff_us = 0;
  int64_t max_backoff_us = 0;
};

struct LaunchOutcome {
  // 0 when every process exited 0; the first failing rank's code; 1 for a
  // lost or failed host; 130 when the user stopped it.
  int exit_code = 0;
  std::string summary;  // the last line: "shoal launch: ..."
  int restarts = 0;     // attempts after the first
  bool stopped_by_user = false;
};

class LaunchSupervisor {
 public:
  // `expected_processes`: how many processes every attempt runs.
  LaunchSupervisor(GangControl* gang, RestartPolicy policy,
                   int expected_processes)
      : gang_(gang),
        policy_(std::move(policy)),
        expected_processes_(expected_processes) {}

  // Runs attempts until one succeeds, fails for good or is stopped.
  LaunchOutcome Run();

 private:
  // What one attempt came to.
  struct Attempt {
    bool failed = false;  // a rank failed on its own: `failure`
    RankExit failure;
    std::string runner_error;  // the first host's runner failure
    std::set<std::string> lost_nodes;
    int exited_zero = 0;  // processes the runners saw exit 0
  };
  enum class Next { kDone, kRestart };

  Attempt RunAttempt(int attempt);
  void OnHostEnded(const HostOutcome& host, Attempt* a,
                   std::vector<RankExit>* unreported);
  // Decides what follows attempt `attempt`; sets outcome_ when done.
  Next Decide(int attempt, const Attempt& a);
  Next PlaceAgain(int attempt, const Attempt& a);
  Next RestartAfterFailure(int attempt, const Attempt& a);
  void Backoff(int restart);

  GangControl* const gang_;
  const RestartPolicy policy_;
  const int expected_processes_;
  std::set<std::string> lost_nodes_;  // over every attempt
  LaunchOutcome outcome_;
};

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_LAUNCH_SUPERVISOR_H_
