#include "agent/lease_rpc.h"

#include <functional>
#include <string>
#include <utility>

#include "common/cancel_token.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::agent {
namespace {

class ResponderRequester : public LeaseRequester {
 public:
  explicit ResponderRequester(rpc::Responder responder)
      : responder_(std::move(responder)) {}
  uint64_t connection_id() const override { return responder_.connection_id(); }
  const std::string& peer() const override { return responder_.peer(); }
  bool connected() const override { return responder_.connected(); }
  void Reply(const proto::RequestLeaseReply& reply) const override {
    responder_.Reply(reply);
  }

 private:
  const rpc::Responder responder_;
};

// Answers a bundle call with its status.
void Answer(const rpc::Responder& resp, const absl::Status& st) {
  if (!st.ok()) return resp.Error(st);
  resp.Reply(proto::Empty());
}

}  // namespace

std::unique_ptr<LeaseRequester> RpcRequester(rpc::Responder responder) {
  return std::make_unique<ResponderRequester>(std::move(responder));
}

void RegisterCancelHandler(WorkerLauncher* workers, rpc::Server* s) {
  rpc::RegisterProto<proto::CancelTaskRequest>(
      s, proto::CANCEL_TASK, [workers](const auto& r, rpc::Responder resp) {
        Answer(resp,
               workers->CancelTask(r.worker_id(), CancelToken(r.task_id()),
                                   r.force(), r.recursive()));
      });
}

void RegisterLeaseHandlers(LeaseService* leases, rpc::Server* s) {
  rpc::RegisterProto<proto::RequestLeaseRequest>(
      s, proto::REQUEST_LEASE, [leases](const auto& r, rpc::Responder resp) {
        leases->RequestLease(r, RpcRequester(std::move(resp)));
      });
  rpc::RegisterProto<proto::CancelLease>(
      s, proto::CANCEL_LEASE_REQUEST,
      [leases](const auto& r, rpc::Responder resp) {
        proto::CancelLeaseReply reply;
        reply.set_canceled(
            leases->CancelRequest(resp.connection_id(), r.request_id()));
        resp.Reply(reply);
      });
  rpc::RegisterProto<proto::ReturnLeaseRequest>(
      s, proto::RETURN_LEASE, [leases](const auto& r, rpc::Responder resp) {
        leases->ReturnLease(r.lease_id(), r.kill_worker(),
                            "its driver returned the lease and asked so");
        resp.Reply(proto::Empty());
      });
  rpc::RegisterProto<proto::GetWorkerExitRequest>(
      s, proto::GET_WORKER_EXIT, [leases](const auto& r, rpc::Responder resp) {
        leases->GetWorkerExit(r.worker_id(),
                              [resp](const proto::GetWorkerExitReply& reply) {
                                resp.Reply(reply);
                              });
      });
  rpc::RegisterProto<proto::BundleReservation>(
      s, proto::PREPARE_BUNDLES, [leases](const auto& r, rpc::Responder resp) {
        Answer(resp, leases->PrepareBundles(r));
      });
  rpc::RegisterProto<proto::BundleReservation>(
      s, proto::COMMIT_BUNDLES, [leases](const auto& r, rpc::Responder resp) {
        Answer(resp, leases->CommitBundles(r.pg_id()));
      });
  rpc::RegisterProto<proto::BundleReservation>(
      s, proto::CANCEL_BUNDLES, [leases](const auto& r, rpc::Responder resp) {
        leases->CancelBundles(r.pg_id());
        resp.Reply(proto::Empty());
      });
}

}  // namespace shoal::agent
