// A host runner's connections: to its launcher (where it reports the ranks'
// output and exits, and learns whether to stop) and to the head (where the
// gang's hosts meet on a rendezvous port).
//
// Threading: the calls block the caller's thread while the link's own event
// loop does the I/O; one caller at a time.
#ifndef SHOAL_LAUNCH_RUNNER_LINK_H_
#define SHOAL_LAUNCH_RUNNER_LINK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
class Channel;
class EventLoop;
class HeadClient;
}  // namespace shoal::rpc

namespace shoal::launch {

class RunnerLink {
 public:
  // Connects (on first use) to the launcher named in `spec` and to the head
  // at `head_address`, both with `token`.
  static absl::StatusOr<std::unique_ptr<RunnerLink>> Create(
      const proto::LaunchHostSpec& spec, const std::string& head_address,
      const std::string& token);
  ~RunnerLink();  // closes both connections and stops the loop
  RunnerLink(const RunnerLink&) = delete;
  RunnerLink& operator=(const RunnerLink&) = delete;

  // Sends what accumulated in `report` to the launcher. Returns whether it
  // says to stop, or why it could not be reached; what was not delivered is
  // kept in `report` for the next one.
  absl::StatusOr<bool> Report(proto::LaunchReport* report);

  // The gang's rendezvous port (MASTER_PORT, the JAX coordinator's port):
  // host 0 picks a free one and publishes it in the head's key-value store
  // under launch/<id>/port; the others read it there. A head that is away
  // is waited for up to SHOAL_HEAD_OUTAGE_WAIT_MS (30 s), as drivers wait.
  absl::StatusOr<int> RendezvousPort(const proto::LaunchHostSpec& spec);

 private:
  RunnerLink(std::unique_ptr<rpc::EventLoop> loop,
             const proto::LaunchHostSpec& spec, const std::string& head_address,
             const std::string& token);

  std::unique_ptr<rpc::EventLoop> loop_;
  std::unique_ptr<rpc::HeadClient> head_;
  std::unique_ptr<rpc::Channel> launcher_;
};

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_RUNNER_LINK_H_
