#include "agent/head_link.h"

#include <algorithm>
#include <utility>

#include "common/files.h"
#include "common/logging.h"
#include "common/random.h"
#include "head_client/head_client.h"

namespace shoal::agent {
namespace {

class NetworkHeadCalls : public HeadCalls {
 public:
  NetworkHeadCalls(rpc::EventLoop* loop, const std::string& address,
                   const std::string& token, const std::string& peer_name)
      : client_(loop, address, token, peer_name) {}
  void RegisterNode(const proto::RegisterNodeRequest& request,
                    Done<proto::RegisterNodeReply> done,
                    int64_t timeout_ms) override {
    client_.RegisterNode(request, std::move(done), timeout_ms);
  }
  void Heartbeat(const proto::HeartbeatRequest& request,
                 Done<proto::HeartbeatReply> done,
                 int64_t timeout_ms) override {
    client_.Heartbeat(request, std::move(done), timeout_ms);
  }
  void UnregisterNode(const proto::UnregisterNodeRequest& request,
                      Done<proto::Empty> done, int64_t timeout_ms) override {
    client_.UnregisterNode(request, std::move(done), timeout_ms);
  }
  void JobEvent(const proto::JobEvent& event,
                Done<proto::Empty> done) override {
    client_.JobEvent(event, std::move(done));
  }
  void GetBlobChunk(const proto::GetBlobChunkRequest& request,
                    Done<proto::BlobChunk> done, int64_t timeout_ms) override {
    client_.GetBlobChunk(request, std::move(done), timeout_ms);
  }
  void GetPlacementGroup(const proto::GetPlacementGroupRequest& request,
                         Done<proto::PlacementGroupInfo> done,
                         int64_t timeout_ms) override {
    client_.GetPlacementGroup(request, std::move(done), timeout_ms);
  }
  void Close() override { client_.Close(); }

 private:
  rpc::HeadClient client_;
};

}  // namespace

std::unique_ptr<HeadCalls> HeadClientCalls(rpc::EventLoop* loop,
                                           const std::string& address,
                                           const std::string& token,
                                           const std::string& peer_name) {
  return std::make_unique<NetworkHeadCalls>(loop, address, token, peer_name);
}

HeadLink::HeadLink(Clock* clock, std::unique_ptr<HeadCalls> head,
                   HeadLinkOptions options)
    : clock_(clock),
      options_(std::move(options)),
      head_(std::move(head)),
      watch_(options_.head_address, options_.head_timeout_ms, clock_->NowUs()) {
}

HeadLink::~HeadLink() = default;

void HeadLink::Register(std::function<void(absl::Status)> done) {
  if (head_ == nullptr) {
    if (done) done(absl::CancelledError("the agent is stopping"));
    return;
  }
  proto::RegisterNodeRequest req;
  *req.mutable_node() = options_.self_info();
  head_->RegisterNode(
      req,
      [this, done](absl::StatusOr<proto::RegisterNodeReply> reply) {
        if (!reply.ok()) {
          watch_.Failed(reply.status());
        } else {
          registered_ = true;
          watch_.Answered(clock_->NowUs());
          view_.Reset();
          if (reply->heartbeat_interval_ms() > 0) {
            heartbeat_ms_ = reply->heartbeat_interval_ms();
          }
          SHOAL_LOG(INFO) << "registered node " << options_.node_id << " at "
                          << options_.self_info().address() << " with head "
                          << options_.head_address;
        }
        if (done) done(reply.status());
      },
      5000);
}

void HeadLink::StartBeating() {
  ScheduleHeartbeat();
  ScheduleHeadWatch();
}

void HeadLink::ScheduleHeartbeat() {
  clock_->RunAfter(JitteredMs(heartbeat_ms_),
                   [this] { SendHeartbeat(/*periodic=*/true); });
}

// So that `shoal status` and other agents' spillback see a lease granted or
// returned, or a request queued, before the next periodic beat.
void HeadLink::ReportSoon() {
  if (report_scheduled_ || head_ == nullptr) return;
  report_scheduled_ = true;
  clock_->RunAfter(20, [this] {
    report_scheduled_ = false;
    SendHeartbeat(/*periodic=*/false);
  });
}

void HeadLink::SendHeartbeat(bool periodic) {
  if (head_ == nullptr || leaving_) return;
  proto::HeartbeatRequest req;
  req.set_node_id(options_.node_id);
  options_.fill_heartbeat(&req);
  view_.FillRequest(&req);
  head_->Heartbeat(
      req,
      [this, periodic](absl::StatusOr<proto::HeartbeatReply> reply) {
        if (head_ == nullptr) return;  // closed (the agent stops)
        OnHeartbeatReply(periodic, reply);
        if (periodic) ScheduleHeartbeat();
      },
      std::max<int64_t>(heartbeat_ms_ * 4, 2000));
}

void HeadLink::OnHeartbeatReply(
    bool periodic, const absl::StatusOr<proto::HeartbeatReply>& reply) {
  if (!reply.ok()) {
    watch_.Failed(reply.status());
    if (!head_warned_) {
      SHOAL_LOG(WARNING) << "heartbeat to head failed: " << reply.status()
                         << " (retrying)";
      head_warned_ = true;
    }
  } else if (reply->unknown_node()) {
    if (periodic && !leaving_) {
      SHOAL_LOG(WARNING) << "the head does not know this node (it "
                            "restarted or declared it dead); registering "
                            "again";
      Register(nullptr);
    }
  } else {
    head_warned_ = false;
    watch_.Answered(clock_->NowUs());
    view_.Apply(*reply);
    if (options_.view_changed) options_.view_changed();
  }
}

void HeadLink::ReportJob(const proto::JobEvent& event) {
  job_events_.push_back(event);
  if (job_events_.size() == 1) SendJobEvent();
}

// Sends the oldest job report not yet taken by the head; the next once it
// is. A head that is away (restarting) gets it again every 500 ms, in
// order: a job's output is not lost while its head restarts.
void HeadLink::SendJobEvent() {
  if (job_events_.empty() || head_ == nullptr) return;
  head_->JobEvent(job_events_.front(), [this](absl::StatusOr<proto::Empty> r) {
    if (head_ == nullptr) return;  // closed
    if (!r.ok()) {
      if (!job_events_warned_) {
        job_events_warned_ = true;
        SHOAL_LOG(WARNING) << "job " << job_events_.front().submission_id()
                           << ": the head did not take a report (" << r.status()
                           << "); sending it again";
      }
      clock_->RunAfter(500, [this] { SendJobEvent(); });
      return;
    }
    job_events_warned_ = false;
    job_events_.pop_front();
    SendJobEvent();
  });
}

void HeadLink::FetchBlobChunk(
    const std::string& hash, int64_t offset, int64_t max_bytes,
    std::function<void(absl::StatusOr<BinaryChunk>)> done) {
  if (head_ == nullptr) {
    return done(absl::CancelledError("the agent is stopping"));
  }
  proto::GetBlobChunkRequest req;
  req.set_hash(hash);
  req.set_offset(offset);
  req.set_max_bytes(max_bytes);
  head_->GetBlobChunk(
      req,
      [this, done = std::move(done)](absl::StatusOr<proto::BlobChunk> chunk) {
        // Closed: the cache's fetch ends unanswered, as its requester's
        // connection does.
        if (head_ == nullptr) return;
        if (!chunk.ok()) return done(chunk.status());
        BinaryChunk out;
        out.data = std::move(*chunk->mutable_data());
        out.last = chunk->last();
        done(std::move(out));
      },
      60000);
}

void HeadLink::GetPlacementGroup(
    const std::string& pg,
    std::function<void(absl::StatusOr<proto::PlacementGroupInfo>)> done) {
  if (head_ == nullptr) return;
  proto::GetPlacementGroupRequest req;
  req.set_pg_id(pg);
  head_->GetPlacementGroup(
      req,
      [this,
       done = std::move(done)](absl::StatusOr<proto::PlacementGroupInfo> info) {
        if (head_ != nullptr) done(std::move(info));
      },
      5000);
}

void HeadLink::ScheduleHeadWatch() {
  clock_->RunAfter(watch_.period_ms(), [this] { CheckHead(); });
}

// Stops the node once the head has not accepted it for head_timeout_ms.
void HeadLink::CheckHead() {
  if (head_ == nullptr || leaving_) return;
  if (!session_gone_warned_ && !PathExists(options_.session_dir)) {
    session_gone_warned_ = true;
    SHOAL_LOG(WARNING) << "this node's session folder " << options_.session_dir
                       << " was deleted; the node stops if the head at "
                       << options_.head_address << " does not answer for "
                       << options_.head_timeout_ms / 1000.0
                       << " s (--head-timeout-s)";
  }
  std::optional<std::string> why = watch_.Check(clock_->NowUs());
  if (!why.has_value()) return ScheduleHeadWatch();
  SHOAL_LOG(ERROR) << *why;
  head_lost_ = true;
  options_.lost(absl::UnavailableError(*why));
}

void HeadLink::Leave(std::function<void()> done) {
  // From here no beat goes out: one answered after the head took the node
  // off would find it unknown and register it again.
  leaving_ = true;
  // A lost head is not told: it is gone, or another cluster's.
  if (!registered_ || head_ == nullptr || head_lost_) return done();
  proto::UnregisterNodeRequest req;
  req.set_node_id(options_.node_id);
  req.set_reason("stopped by its operator (shoal stop)");
  head_->UnregisterNode(
      req, [done](absl::StatusOr<proto::Empty>) { done(); }, 1000);
}

void HeadLink::Close() {
  // Closing the client fails the calls still in flight, and their callbacks
  // run now; head_ is null by then, which tells them that the link is
  // closed and must not act on (or warn about) the failure.
  std::unique_ptr<HeadCalls> head = std::move(head_);
  if (head != nullptr) head->Close();
}

}  // namespace shoal::agent
