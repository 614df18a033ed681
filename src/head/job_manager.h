// Submitted jobs (`shoal job submit`; docs/design/jobs.md): the head picks a
// node whose resources fit the entrypoint (the head's own node first), has
// that node's agent run it (START_JOB), keeps its output in the head's
// session folder (logs/job-<id>.log) as the agent sends it (JOB_EVENT), and
// answers status, list, logs (a long poll, for `logs -f`) and stop.
//
// States: PENDING (asked to start) -> RUNNING -> SUCCEEDED, FAILED (the exit
// code, or why it could not start or its node died) or STOPPED (by
// STOP_JOB).
//
// Threading: lives on the head's event loop; not thread-safe.
#ifndef SHOAL_HEAD_JOB_MANAGER_H_
#define SHOAL_HEAD_JOB_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "head/table_storage.h"
#include "rpc/event_loop.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal {

struct JobNode {
  std::string node_id;
  std::string address;  // its agent
  proto::ResourceMap total;
  bool is_head_node = false;
  proto::ResourceMap available;  // as its agent last reported
};

struct JobManagerOptions {
  std::string log_dir;       // the head session's logs/
  std::string head_address;  // what entrypoints connect to (SHOAL_ADDRESS)
  std::function<rpc::Channel*(const std::string& address)> agent_channel;
  std::function<std::vector<JobNode>()> alive_nodes;
  int64_t stop_grace_ms = 3000;  // SIGTERM, then SIGKILL after this long
  // Where job records are kept (the head's); null: in memory only.
  TableStorage* storage = nullptr;
};

class JobManager {
 public:
  JobManager(rpc::EventLoop* loop, JobManagerOptions options);
  ~JobManager();
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  void RegisterHandlers(rpc::Server* server);
  // Takes up the jobs kept in storage by a head that ran before: ended ones
  // as they were, running ones as they run (their agents go on reporting),
  // and those waiting for a node placed again.
  void Restore();
  // Jobs running on the node fail, saying why.
  void NodeDied(const std::string& node_id, const std::string& why);
  size_t size() const { return jobs_.size(); }

 private:
  struct Entry {
    proto::JobInfo info;
    std::string log_path;
    bool stop_requested = false;
    // GET_JOB_LOGS callers waiting for more output.
    struct Reader {
      uint64_t ticket;
      proto::JobLogsRequest request;
      rpc::Responder responder;
    };
    std::vector<Reader> waiting;
  };

  void Submit(const proto::JobSpec& spec, const rpc::Responder& responder);
  // Starts job `id` on a node whose free resources hold its entrypoint's
  // (the head's own node first); while none has them free, it stays
  // PENDING and is tried again. Fails it when no node has them at all.
  void Place(const std::string& id);
  void Started(const std::string& id, absl::StatusOr<proto::Empty> reply);
  // An agent's report; an error (its output could not be kept) makes the
  // agent send it again.
  absl::Status Event(const proto::JobEvent& event);
  void Stop(const std::string& id, const rpc::Responder& responder);
  void Logs(const proto::JobLogsRequest& request,
            const rpc::Responder& responder);
  // Answers `request` with what the log holds past its offset; false when
  // there is nothing new yet and the job still runs.
  bool AnswerLogs(Entry& entry, const proto::JobLogsRequest& request,
                  const rpc::Responder& responder, bool must_answer);
  void WakeLogReaders(Entry& entry);
  // Keeps the job's record in storage (not its output: that is its log,
  // and in storage that outlives the session folder, KeepOutput's rows).
  absl::Status Persist(const Entry& entry);
  // Storage that outlives the session folder (Redis) keeps each new piece
  // of a job's output too, so that a head on another temp dir or host has
  // its log; RestoreLog writes the log again from them.
  bool OutputInStorage() const;
  absl::Status KeepOutput(const Entry& entry, std::string_view output);
  void RestoreLog(Entry& entry,
                  const std::map<std::string, std::string>& output);
  void ForgetOutput(const std::string& id);
  void Finish(Entry& entry, proto::JobInfo::State state, int exit_code,
              const std::string& message);
  Entry* Find(const std::string& id);
  void AgentCall(const std::string& node_id, proto::Method method,
                 const google::protobuf::MessageLite& request,
                 std::function<void(absl::StatusOr<proto::Empty>)> done);

  rpc::EventLoop* const loop_;
  const JobManagerOptions options_;
  std::map<std::string, Entry> jobs_;
  std::map<std::string, std::string> node_addresses_;  // of jobs' nodes
  uint64_t next_ticket_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal

#endif  // SHOAL_HEAD_JOB_MANAGER_H_
