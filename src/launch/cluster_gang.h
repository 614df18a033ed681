// The launcher's GangControl over a real cluster: a runner task per host in
// the gang's placement group, an RPC endpoint where the runners report
// (ReportInbox), and the head's record of the gang (GANG_UPDATE).
//
// Threading: the GangControl calls come from the supervisor's thread; the
// reports arrive on the gang's own event loop.
#ifndef SHOAL_LAUNCH_CLUSTER_GANG_H_
#define SHOAL_LAUNCH_CLUSTER_GANG_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/gang_plan.h"
#include "launch/gang_reservation.h"
#include "launch/launch_supervisor.h"
#include "launch/launcher.h"
#include "launch/report_inbox.h"
#include "shoal/object.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
class EventLoop;
class Server;
}  // namespace shoal::rpc

namespace shoal::launch {

// What the earlier phases settled.
struct ReservedGang {
  GangChoice choice;
  Reservation reservation;
  std::vector<proto::LaunchHost> hosts;
  GangShape shape;
  std::string token;  // the cluster's
};

class ClusterGang : public GangControl {
 public:
  // Listens for the runners' reports where every host can reach it.
  // `interrupted` is the user's stop (set from a signal handler).
  static absl::StatusOr<std::unique_ptr<ClusterGang>> Create(
      const LaunchOptions& options, ReservedGang gang,
      const std::atomic<bool>* interrupted);
  // Stops listening and releases the gang's hosts.
  ~ClusterGang() override;
  ClusterGang(const ClusterGang&) = delete;
  ClusterGang& operator=(const ClusterGang&) = delete;

  int StartRanks(int attempt) override;
  void StopRanks() override;
  GangEvent WaitForEvent(int64_t timeout_ms) override;
  bool StopRequested() override;
  absl::Status PlaceAgain(const std::set<std::string>& lost_nodes) override;
  int64_t NowUs() override;
  void SleepUs(int64_t us) override;
  void Say(const std::string& line) override;

  // Tells the head how the gang ended.
  void Finish(const LaunchOutcome& outcome);

 private:
  ClusterGang(const LaunchOptions& options, ReservedGang gang,
              const std::atomic<bool>* interrupted);
  absl::Status Listen();
  // The runner of host `i` ended: what it answered, or how it failed.
  HostOutcome OutcomeOf(size_t i);
  void TakeReportedExits();
  void ReportGang();

  const LaunchOptions& options_;
  ReservedGang gang_;
  const std::atomic<bool>* const interrupted_;
  ReportInbox inbox_;
  std::unique_ptr<rpc::EventLoop> loop_;
  std::unique_ptr<rpc::Server> server_;
  std::string launcher_address_;
  proto::GangInfo record_;
  std::map<int, proto::LaunchExit> exits_;  // of the running attempt
  bool warned_head_ = false;
  std::vector<ObjectRef<std::string>> runners_;
  std::vector<bool> ended_;
  std::deque<GangEvent> events_;
};

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_CLUSTER_GANG_H_
