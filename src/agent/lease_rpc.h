// The RPC side of a LeaseService: its handlers on a node's server and the
// requester behind an RPC.
//
// Threading: everything here runs on the loop of the server and service.
#ifndef SHOAL_AGENT_LEASE_RPC_H_
#define SHOAL_AGENT_LEASE_RPC_H_

#include <memory>

#include "agent/lease_queue.h"
#include "agent/lease_service.h"

namespace shoal::rpc {
class Responder;
class Server;
}  // namespace shoal::rpc

namespace shoal::agent {

// Serves REQUEST_LEASE, CANCEL_LEASE_REQUEST, RETURN_LEASE, GET_WORKER_EXIT
// and PREPARE/COMMIT/CANCEL_BUNDLES on `server` with `leases`. The server's
// disconnects are its owner's to pass on (LeaseService::OnDisconnect).
// REQUIRES: `leases` outlives the server's handlers.
void RegisterLeaseHandlers(LeaseService* leases, rpc::Server* server);

// Serves CANCEL_TASK (WorkerLauncher::CancelTask) on `server`.
// REQUIRES: `workers` outlives the server's handlers.
void RegisterCancelHandler(WorkerLauncher* workers, rpc::Server* server);

// The requester of a lease over RPC: the answer goes to `responder`.
std::unique_ptr<LeaseRequester> RpcRequester(rpc::Responder responder);

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_LEASE_RPC_H_
