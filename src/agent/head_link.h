// A node agent's side of its head: registration (again when the head no
// longer knows the node), heartbeats with the node's resources, demands and
// leases (and a report soon after each change), the cluster view the
// replies bring, job reports delivered in order, the head's copies of
// worker programs and its answers on placement groups; and the head-timeout
// (agent/head_watch.h): a node whose head stays away stops by itself.
//
// Threading: lives on the agent's event loop; not thread-safe. Its calls'
// callbacks that come after Close() do nothing.
#ifndef SHOAL_AGENT_HEAD_LINK_H_
#define SHOAL_AGENT_HEAD_LINK_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/binary_cache.h"
#include "agent/clock.h"
#include "agent/cluster_view.h"
#include "agent/head_watch.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
class EventLoop;
}  // namespace shoal::rpc

namespace shoal::agent {

// The calls to the head that the link makes: over the network
// (HeadClientCalls), or in memory in tests. Callbacks run on the link's
// loop; Close fails the calls in flight (their callbacks run within it).
class HeadCalls {
 public:
  template <typename Reply>
  using Done = std::function<void(absl::StatusOr<Reply>)>;

  virtual ~HeadCalls() = default;
  virtual void RegisterNode(const proto::RegisterNodeRequest& request,
                            Done<proto::RegisterNodeReply> done,
                            int64_t timeout_ms) = 0;
  virtual void Heartbeat(const proto::HeartbeatRequest& request,
                         Done<proto::HeartbeatReply> done,
                         int64_t timeout_ms) = 0;
  virtual void UnregisterNode(const proto::UnregisterNodeRequest& request,
                              Done<proto::Empty> done, int64_t timeout_ms) = 0;
  virtual void JobEvent(const proto::JobEvent& event,
                        Done<proto::Empty> done) = 0;
  virtual void GetBlobChunk(const proto::GetBlobChunkRequest& request,
                            Done<proto::BlobChunk> done,
                            int64_t timeout_ms) = 0;
  virtual void GetPlacementGroup(const proto::GetPlacementGroupRequest& request,
                                 Done<proto::PlacementGroupInfo> done,
                                 int64_t timeout_ms) = 0;
  virtual void Close() = 0;
};

// rpc::HeadClient to the head at `address`; `peer_name` names this process
// in the head's logs. REQUIRES: `loop` outlives it.
std::unique_ptr<HeadCalls> HeadClientCalls(rpc::EventLoop* loop,
                                           const std::string& address,
                                           const std::string& token,
                                           const std::string& peer_name);

struct HeadLinkOptions {
  std::string head_address;  // host:port, for messages
  std::string node_id;
  // A deleted session folder is warned about (the node is likely orphaned).
  std::string session_dir;
  int64_t head_timeout_ms = 60000;
  // What the node registers as.
  std::function<proto::NodeInfo()> self_info;
  // Adds the node's resources, demands and leases to a heartbeat.
  std::function<void(proto::HeartbeatRequest*)> fill_heartbeat;
  // A heartbeat reply brought the cluster view (requests may spill now).
  std::function<void()> view_changed;
  // The head was away for head_timeout_ms: why the node stops.
  std::function<void(const absl::Status& why)> lost;
};

class HeadLink {
 public:
  // REQUIRES: `clock` outlives this.
  HeadLink(Clock* clock, std::unique_ptr<HeadCalls> head,
           HeadLinkOptions options);
  ~HeadLink();

  // Registers the node; `done` (may be null) hears how it went.
  void Register(std::function<void(absl::Status)> done);
  // Starts the periodic heartbeats and the head-timeout watch.
  void StartBeating();
  // Tells the head about a change soon rather than at the next beat.
  // Coalesced.
  void ReportSoon();
  // Queues a job report; reports reach the head in order, each sent again
  // every 500 ms while the head is away.
  void ReportJob(const proto::JobEvent& event);
  // Fetches a piece of a worker program from the head (BinaryCache's seam).
  void FetchBlobChunk(const std::string& hash, int64_t offset,
                      int64_t max_bytes,
                      std::function<void(absl::StatusOr<BinaryChunk>)> done);
  // Asks the head about a placement group; false when the link is closed.
  bool can_ask() const { return head_ != nullptr; }
  void GetPlacementGroup(
      const std::string& pg,
      std::function<void(absl::StatusOr<proto::PlacementGroupInfo>)> done);

  // Sends no more beats and unregisters the node (unless it never
  // registered or the head is lost), then `done`.
  void Leave(std::function<void()> done);
  // Fails the calls in flight (their callbacks see a closed link).
  void Close();

  ClusterView* view() { return &view_; }

 private:
  void ScheduleHeartbeat();
  void SendHeartbeat(bool periodic);
  void OnHeartbeatReply(bool periodic,
                        const absl::StatusOr<proto::HeartbeatReply>& reply);
  void SendJobEvent();
  void ScheduleHeadWatch();
  void CheckHead();

  Clock* const clock_;
  const HeadLinkOptions options_;
  std::unique_ptr<HeadCalls> head_;  // null once closed
  ClusterView view_;
  HeadWatch watch_;
  bool registered_ = false;
  bool leaving_ = false;  // unregistering (Leave)
  bool head_warned_ = false;
  bool head_lost_ = false;
  bool session_gone_warned_ = false;
  bool report_scheduled_ = false;
  int64_t heartbeat_ms_ = 500;
  // Job reports, oldest first, until the head takes them.
  std::deque<proto::JobEvent> job_events_;
  bool job_events_warned_ = false;
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_HEAD_LINK_H_
