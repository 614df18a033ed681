#include "head_client/head_client.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/version.h"
#include "rpc/event_loop.h"
#include "rpc/rpc.h"

namespace shoal::rpc {

HeadClient::HeadClient(EventLoop* loop, std::string address, std::string token,
                       std::string peer_name)
    : loop_(loop),
      address_(address),
      channel_(std::make_unique<TcpChannel>(
          loop, std::move(address), std::move(token), std::move(peer_name))) {}

HeadClient::HeadClient(EventLoop* loop, std::unique_ptr<Channel> channel)
    : loop_(loop), address_(channel->address()), channel_(std::move(channel)) {}

HeadClient::~HeadClient() {
  if (channel_ != nullptr) loop_->RunSync([this] { Close(); });
}

void HeadClient::Close() {
  if (channel_ == nullptr) return;
  // Close() fails the calls in flight (their callbacks run); destroying the
  // channel alone would drop them and leave blocked callers waiting.
  channel_->Close();
  channel_.reset();
}

template <typename Reply>
void HeadClient::Call(proto::Method method,
                      const google::protobuf::MessageLite& request,
                      Callback<Reply> done, int64_t timeout_ms) {
  if (channel_ == nullptr) {
    return done(absl::CancelledError(
        absl::StrCat("the client of the head at ", address_, " is closed")));
  }
  CallProto<Reply>(channel_.get(), method, request, std::move(done),
                   timeout_ms);
}

template <typename Reply>
absl::StatusOr<Reply> HeadClient::CallAndWait(
    proto::Method method, const google::protobuf::MessageLite& request,
    int64_t timeout_ms) {
  SHOAL_CHECK(!loop_->InLoop())
      << "a blocking call to the head on its client's loop would never return";
  const int64_t give_up_us = MonotonicUs() + outage_wait_ms_ * 1000;
  while (true) {
    absl::StatusOr<Reply> reply = RunOnLoopAndWait<absl::StatusOr<Reply>>(
        loop_, [&](Callback<Reply> done) {
          Call<Reply>(method, request, std::move(done), timeout_ms);
        });
    // Not sent: the head is away (restarting); nothing was done, so the
    // call may be made again.
    if (reply.ok() || !NeverSent(reply.status()) ||
        MonotonicUs() >= give_up_us) {
      return reply;
    }
    usleep(200000);
  }
}

void HeadClient::OnDisconnect(
    std::function<void(const absl::Status&)> callback) {
  if (channel_ != nullptr) channel_->OnDisconnect(std::move(callback));
}

void HeadClient::RegisterNode(const proto::RegisterNodeRequest& request,
                              Callback<proto::RegisterNodeReply> done,
                              int64_t timeout_ms) {
  Call<proto::RegisterNodeReply>(proto::REGISTER_NODE, request, std::move(done),
                                 timeout_ms);
}

void HeadClient::Heartbeat(const proto::HeartbeatRequest& request,
                           Callback<proto::HeartbeatReply> done,
                           int64_t timeout_ms) {
  Call<proto::HeartbeatReply>(proto::HEARTBEAT, request, std::move(done),
                              timeout_ms);
}

void HeadClient::UnregisterNode(const proto::UnregisterNodeRequest& request,
                                Callback<proto::Empty> done,
                                int64_t timeout_ms) {
  Call<proto::Empty>(proto::UNREGISTER_NODE, request, std::move(done),
                     timeout_ms);
}

void HeadClient::ClusterStatus(Callback<proto::ClusterStatus> done,
                               int64_t timeout_ms) {
  Call<proto::ClusterStatus>(proto::GET_CLUSTER_STATUS, proto::Empty(),
                             std::move(done), timeout_ms);
}

absl::StatusOr<proto::ClusterStatus> HeadClient::ClusterStatus(
    int64_t timeout_ms) {
  return ClusterStatus(proto::ClusterStatusRequest(), timeout_ms);
}

absl::StatusOr<proto::ClusterStatus> HeadClient::ClusterStatus(
    const proto::ClusterStatusRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::ClusterStatus>(proto::GET_CLUSTER_STATUS, request,
                                           timeout_ms);
}

void HeadClient::RegisterJob(const proto::RegisterJobRequest& request,
                             Callback<proto::RegisterJobReply> done,
                             int64_t timeout_ms) {
  Call<proto::RegisterJobReply>(proto::REGISTER_JOB, request, std::move(done),
                                timeout_ms);
}

absl::StatusOr<proto::RegisterJobReply> HeadClient::RegisterJob(
    const proto::RegisterJobRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::RegisterJobReply>(proto::REGISTER_JOB, request,
                                              timeout_ms);
}

absl::Status HeadClient::ShutdownHead(int64_t timeout_ms) {
  return CallAndWait<proto::Empty>(proto::SHUTDOWN_HEAD, proto::Empty(),
                                   timeout_ms)
      .status();
}

absl::StatusOr<proto::HasBlobReply> HeadClient::HasBlob(
    const proto::BlobRef& blob, int64_t timeout_ms) {
  return CallAndWait<proto::HasBlobReply>(proto::HAS_BLOB, blob, timeout_ms);
}

absl::Status HeadClient::PutBlobChunk(const proto::BlobChunk& chunk,
                                      int64_t timeout_ms) {
  return CallAndWait<proto::Empty>(proto::PUT_BLOB_CHUNK, chunk, timeout_ms)
      .status();
}

void HeadClient::GetBlobChunk(const proto::GetBlobChunkRequest& request,
                              Callback<proto::BlobChunk> done,
                              int64_t timeout_ms) {
  Call<proto::BlobChunk>(proto::GET_BLOB_CHUNK, request, std::move(done),
                         timeout_ms);
}

absl::StatusOr<proto::KvPutReply> HeadClient::KvPut(
    const proto::KvPutRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::KvPutReply>(proto::KV_PUT, request, timeout_ms);
}

absl::StatusOr<proto::KvGetReply> HeadClient::KvGet(
    const proto::KvGetRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::KvGetReply>(proto::KV_GET, request, timeout_ms);
}

absl::StatusOr<proto::KvDelReply> HeadClient::KvDel(
    const proto::KvDelRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::KvDelReply>(proto::KV_DEL, request, timeout_ms);
}

absl::StatusOr<proto::KvKeysReply> HeadClient::KvKeys(
    const proto::KvKeysRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::KvKeysReply>(proto::KV_KEYS, request, timeout_ms);
}

absl::StatusOr<proto::PlacementGroupInfo> HeadClient::CreatePlacementGroup(
    const proto::PlacementGroupSpec& spec, int64_t timeout_ms) {
  return CallAndWait<proto::PlacementGroupInfo>(proto::CREATE_PLACEMENT_GROUP,
                                                spec, timeout_ms);
}

void HeadClient::GetPlacementGroup(
    const proto::GetPlacementGroupRequest& request,
    Callback<proto::PlacementGroupInfo> done, int64_t timeout_ms) {
  Call<proto::PlacementGroupInfo>(proto::GET_PLACEMENT_GROUP, request,
                                  std::move(done), timeout_ms);
}

absl::StatusOr<proto::PlacementGroupInfo> HeadClient::GetPlacementGroup(
    const proto::GetPlacementGroupRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::PlacementGroupInfo>(proto::GET_PLACEMENT_GROUP,
                                                request, timeout_ms);
}

absl::Status HeadClient::RemovePlacementGroup(
    const proto::GetPlacementGroupRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::Empty>(proto::REMOVE_PLACEMENT_GROUP, request,
                                   timeout_ms)
      .status();
}

absl::StatusOr<proto::ActorInfo> HeadClient::CreateActor(
    const proto::ActorSpec& spec, int64_t timeout_ms) {
  return CallAndWait<proto::ActorInfo>(proto::CREATE_ACTOR, spec, timeout_ms);
}

void HeadClient::GetActor(const proto::GetActorRequest& request,
                          Callback<proto::ActorInfo> done, int64_t timeout_ms) {
  Call<proto::ActorInfo>(proto::GET_ACTOR, request, std::move(done),
                         request.wait_ms() + timeout_ms);
}

absl::StatusOr<proto::ActorInfo> HeadClient::GetActor(
    const proto::GetActorRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::ActorInfo>(proto::GET_ACTOR, request,
                                       request.wait_ms() + timeout_ms);
}

absl::Status HeadClient::KillActor(const proto::KillActorRequest& request,
                                   int64_t timeout_ms) {
  return CallAndWait<proto::Empty>(proto::KILL_ACTOR, request, timeout_ms)
      .status();
}

absl::Status HeadClient::ActorExiting(const proto::ActorExitingRequest& request,
                                      int64_t timeout_ms) {
  return CallAndWait<proto::Empty>(proto::ACTOR_EXITING, request, timeout_ms)
      .status();
}

absl::Status HeadClient::ActorArgs(const proto::ActorArgs& args,
                                   int64_t timeout_ms) {
  return CallAndWait<proto::Empty>(proto::ACTOR_ARGS, args, timeout_ms)
      .status();
}

absl::Status CheckClusterVersion(HeadClient& head, const std::string& mine,
                                 const std::string& who, int64_t timeout_ms) {
  proto::KvGetRequest get;
  get.set_key(kClusterVersionKey);
  ASSIGN_OR_RETURN(proto::KvGetReply got, head.KvGet(get, timeout_ms));
  return CheckSameVersion(got.value(), mine, who);
}

absl::Status HeadClient::UploadBlob(const std::string& path,
                                    const std::string& hash) {
  constexpr int64_t kChunk = 4 << 20;
  proto::BlobRef ref;
  ref.set_hash(hash);
  ASSIGN_OR_RETURN(auto has, HasBlob(ref));
  if (has.present()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string data, ReadFile(path));
  int64_t offset = 0;
  do {
    proto::BlobChunk chunk;
    chunk.set_hash(hash);
    chunk.set_offset(offset);
    int64_t n = std::min<int64_t>(kChunk, data.size() - offset);
    chunk.set_data(data.substr(offset, n));
    offset += n;
    chunk.set_last(offset >= static_cast<int64_t>(data.size()));
    chunk.set_total_size(data.size());
    RETURN_IF_ERROR(PutBlobChunk(chunk));
  } while (offset < static_cast<int64_t>(data.size()));
  return absl::OkStatus();
}

absl::StatusOr<proto::JobInfo> HeadClient::SubmitJob(const proto::JobSpec& spec,
                                                     int64_t timeout_ms) {
  return CallAndWait<proto::JobInfo>(proto::SUBMIT_JOB, spec, timeout_ms);
}

absl::StatusOr<proto::JobInfo> HeadClient::GetJob(const proto::JobRef& job,
                                                  int64_t timeout_ms) {
  return CallAndWait<proto::JobInfo>(proto::GET_JOB, job, timeout_ms);
}

absl::StatusOr<proto::JobList> HeadClient::ListJobs(int64_t timeout_ms) {
  return CallAndWait<proto::JobList>(proto::LIST_JOBS, proto::Empty(),
                                     timeout_ms);
}

absl::StatusOr<proto::JobInfo> HeadClient::StopJob(const proto::JobRef& job,
                                                   int64_t timeout_ms) {
  return CallAndWait<proto::JobInfo>(proto::STOP_JOB, job, timeout_ms);
}

absl::Status HeadClient::DeleteJob(const proto::JobRef& job,
                                   int64_t timeout_ms) {
  return CallAndWait<proto::Empty>(proto::DELETE_JOB, job, timeout_ms).status();
}

absl::StatusOr<proto::JobLogs> HeadClient::GetJobLogs(
    const proto::JobLogsRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::JobLogs>(proto::GET_JOB_LOGS, request,
                                     timeout_ms + request.wait_ms());
}

void HeadClient::JobEvent(const proto::JobEvent& event,
                          Callback<proto::Empty> done, int64_t timeout_ms) {
  Call<proto::Empty>(proto::JOB_EVENT, event, std::move(done), timeout_ms);
}

void HeadClient::ReportTaskEvents(const proto::TaskEventBatch& batch,
                                  Callback<proto::Empty> done,
                                  int64_t timeout_ms) {
  ReportTaskEvents(batch.SerializeAsString(), std::move(done), timeout_ms);
}

void HeadClient::ReportTaskEvents(std::string batch,
                                  Callback<proto::Empty> done,
                                  int64_t timeout_ms) {
  if (channel_ == nullptr) {
    return done(absl::CancelledError(
        absl::StrCat("the client of the head at ", address_, " is closed")));
  }
  channel_->Call(
      proto::REPORT_TASK_EVENTS, std::move(batch),
      [done = std::move(done)](absl::StatusOr<std::string> reply) {
        if (!reply.ok()) return done(reply.status());
        done(proto::Empty());
      },
      timeout_ms);
}

absl::StatusOr<proto::TaskList> HeadClient::ListTasks(
    const proto::ListTasksRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::TaskList>(proto::LIST_TASKS, request, timeout_ms);
}

absl::StatusOr<proto::LogList> HeadClient::ListLogs(
    const proto::ListLogsRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::LogList>(proto::LIST_LOGS, request, timeout_ms);
}

absl::StatusOr<proto::LogChunk> HeadClient::ReadLog(
    const proto::ReadLogRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::LogChunk>(proto::READ_LOG, request,
                                      timeout_ms + request.wait_ms());
}

absl::StatusOr<proto::ObjectList> HeadClient::ListObjects(
    const proto::ListObjectsRequest& request, int64_t timeout_ms) {
  return CallAndWait<proto::ObjectList>(proto::LIST_OBJECTS, request,
                                        timeout_ms);
}

absl::Status HeadClient::GangUpdate(const proto::GangInfo& gang,
                                    int64_t timeout_ms) {
  return CallAndWait<proto::Empty>(proto::GANG_UPDATE, gang, timeout_ms)
      .status();
}

absl::StatusOr<proto::GangList> HeadClient::ListGangs(int64_t timeout_ms) {
  return CallAndWait<proto::GangList>(proto::LIST_GANGS, proto::Empty(),
                                      timeout_ms);
}

absl::StatusOr<proto::ServerStats> HeadClient::ServerStats(int64_t timeout_ms) {
  return CallAndWait<proto::ServerStats>(proto::GET_SERVER_STATS,
                                         proto::Empty(), timeout_ms);
}

}  // namespace shoal::rpc
