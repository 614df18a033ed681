// The logs of this node's session folder (logs/: the head's, the agent's,
// every worker's, launch ranks', jobs'), listed (LIST_LOGS) and read by
// range (READ_LOG), with a long poll for `shoal logs --follow`. Only plain
// files in logs/ and its folders are served, by their path below logs/.
//
// Threading: the agent's loop.
#ifndef SHOAL_AGENT_LOG_SERVICE_H_
#define SHOAL_AGENT_LOG_SERVICE_H_

#include <cstdint>
#include <string>

#include "rpc/event_loop.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::agent {

class LogService {
 public:
  LogService(rpc::EventLoop* loop, std::string log_dir, std::string node_id);
  void Register(rpc::Server* server);

 private:
  void List(const rpc::Responder& resp) const;
  // The files in logs/<prefix>, and one level of folders below logs/.
  void AddFiles(const std::string& prefix, int depth,
                proto::LogList* list) const;
  void Read(const proto::ReadLogRequest& request, const rpc::Responder& resp,
            int64_t deadline_us);

  rpc::EventLoop* const loop_;
  const std::string log_dir_;
  const std::string node_id_;
};

}  // namespace shoal::agent

#endif  // SHOAL_AGENT_LOG_SERVICE_H_
