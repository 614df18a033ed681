// Submitted jobs (`shoal job submit`; docs/design/jobs.md), the IO around
// JobTable: the head picks a node whose resources fit the entrypoint (the
// head's own node first), has that node's agent run it (START_JOB), keeps
// its output in the head's session folder (logs/job-<id>.log) as the agent
// sends it (JOB_EVENT), and answers status, list, logs (a long poll, for
// `logs -f`) and stop. Calls are transport-free: the head's handlers pass
// requests in and replies out.
//
// Threading: lives on the head's event loop; not thread-safe. Its timers
// and agent replies that outlive it do nothing.
#ifndef SHOAL_HEAD_JOB_MANAGER_H_
#define SHOAL_HEAD_JOB_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "head/agent_call.h"
#include "head/job_table.h"
#include "shoal/shoal.pb.h"

namespace shoal {

class TableStorage;

struct JobManagerOptions {
  std::string log_dir;       // the head session's logs/
  std::string head_address;  // what entrypoints connect to (SHOAL_ADDRESS)
  AgentCall call_agent;
  RunAfter run_after;
  std::function<std::vector<JobNode>()> alive_nodes;
  // Where job records are kept (the head's); null: in memory only.
  TableStorage* storage = nullptr;
  // How often a job that waits for its entrypoint's resources looks again.
  int64_t place_retry_ms = 500;
};

class JobManager {
 public:
  using LogsDone = std::function<void(absl::StatusOr<proto::JobLogs>)>;

  explicit JobManager(JobManagerOptions options);
  ~JobManager();
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Takes up the jobs kept in storage by a head that ran before: ended ones
  // as they were, running ones as they run (their agents go on reporting),
  // and those waiting for a node placed again.
  void Restore();

  // SUBMIT_JOB: kept before it is acknowledged, then started on a node
  // whose free resources hold its entrypoint's; while none has them free,
  // it stays PENDING and is tried again. Fails when no node has them at
  // all, or its log cannot be made (the reply says so).
  absl::StatusOr<proto::JobInfo> Submit(const proto::JobSpec& spec);
  absl::StatusOr<proto::JobInfo> Get(const std::string& id);
  proto::JobList List() const { return table_.List(); }
  // STOP_JOB: asks its agent to end it (it is STOPPED when the agent says
  // it ended); one still waiting for a node never starts.
  absl::StatusOr<proto::JobInfo> Stop(const std::string& id);
  // DELETE_JOB: forgets a finished job and its log.
  absl::Status Delete(const std::string& id);
  // GET_JOB_LOGS: what the log holds past the request's offset; with
  // wait_ms, answered once there is some, the job ends, or the wait is over.
  void Logs(const proto::JobLogsRequest& request, LogsDone done);
  // JOB_EVENT: an agent's report; an error (its output could not be kept)
  // makes the agent send it again.
  absl::Status Event(const proto::JobEvent& event);
  // Jobs running on the node fail, saying why.
  void NodeDied(const std::string& node_id, const std::string& why);

  size_t size() const { return table_.size(); }
  const JobTable& table() const { return table_; }

 private:
  struct Reader {
    uint64_t ticket;
    proto::JobLogsRequest request;
    LogsDone done;
  };

  void Place(const std::string& id);
  // Sends START_JOB again for a restored job placed but not yet started.
  void StartAgain(const std::string& id);
  void PlaceLater(const std::string& id);
  void Started(const std::string& id, absl::StatusOr<proto::Empty> reply);
  std::string LogPath(const std::string& id) const;
  // Answers `request` with what the log holds past its offset; false when
  // there is nothing new yet and the job still runs.
  bool AnswerLogs(const JobTable::Job& job,
                  const proto::JobLogsRequest& request, const LogsDone& done,
                  bool must_answer);
  void WakeLogReaders(const std::string& id);
  void AppendLog(JobTable::Job& job, std::string_view output);
  // Keeps the job's record in storage (not its output: that is its log,
  // and in storage that outlives the session folder, KeepOutput's rows).
  absl::Status Persist(const JobTable::Job& job);
  // Storage that outlives the session folder (Redis) keeps each new piece
  // of a job's output too, so that a head on another temp dir or host has
  // its log; RestoreLog writes the log again from them.
  bool OutputInStorage() const;
  absl::Status KeepOutput(const JobTable::Job& job, std::string_view output);
  void RestoreLog(JobTable::Job& job,
                  const std::map<std::string, std::string>& output);
  void ForgetOutput(const std::string& id);
  void Finish(JobTable::Job& job, proto::JobInfo::State state, int exit_code,
              const std::string& message);
  // Logs how the job ended.
  void SayEnded(const JobTable::Job& job);
  void AgentCall(const std::string& node_id, int method,
                 const google::protobuf::MessageLite& request,
                 std::function<void(absl::StatusOr<proto::Empty>)> done);
  // Runs `fn` after `ms` unless this manager is gone by then.
  void After(int64_t ms, std::function<void()> fn);

  const JobManagerOptions options_;
  JobTable table_;
  std::map<std::string, std::vector<Reader>> readers_;  // by job
  std::map<std::string, std::string> node_addresses_;   // of jobs' nodes
  uint64_t next_ticket_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shoal

#endif  // SHOAL_HEAD_JOB_MANAGER_H_
