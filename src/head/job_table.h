// Submitted jobs' records (`shoal job submit`; docs/design/jobs.md): the
// checks a submission must pass, the node an entrypoint goes to, and each
// job's state as its agent reports it.
//
// States: PENDING (asked to start) -> RUNNING -> SUCCEEDED, FAILED (the exit
// code, or why it could not start or its node died) or STOPPED (by
// STOP_JOB).
//
// Pure state: no IO, no clock (times are given, wall milliseconds), no
// timers. JobManager does the IO: storage, logs, the agents.
//
// Threading: thread-compatible; the head uses it from its event loop only.
#ifndef SHOAL_HEAD_JOB_TABLE_H_
#define SHOAL_HEAD_JOB_TABLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "shoal/shoal.pb.h"

namespace shoal {

// An alive node as a job's placement sees it.
struct JobNode {
  std::string node_id;
  std::string address;  // its agent
  proto::ResourceMap total;
  bool is_head_node = false;
  proto::ResourceMap available;  // as its agent last reported
};

// Where an entrypoint that needs `need` goes among `nodes`: the head's own
// node first (as Ray runs entrypoints), else the first node that has it
// free. `fits` is false when no node has it at all.
struct JobNodeChoice {
  bool fits = false;
  const JobNode* node = nullptr;  // null: none has it free now
};
JobNodeChoice ChooseJobNode(const proto::ResourceMap& need,
                            std::vector<JobNode>& nodes);

class JobTable {
 public:
  struct Job {
    proto::JobInfo info;
    bool stop_requested = false;
  };

  static bool Finished(const proto::JobInfo& info);

  // Adds a PENDING job (an id is made up when the spec has none).
  // InvalidArgument for a spec without an entrypoint, with a NUL byte in
  // it or in an env value, or with an id that cannot name a log file;
  // AlreadyExists for an id in the table.
  absl::StatusOr<Job*> Submit(proto::JobSpec spec,
                              const std::string& head_address, int64_t now_ms);
  // A job as a head that ran before kept it; false for one that does not
  // parse.
  bool Restore(const std::string& id, const std::string& bytes);
  Job* Find(const std::string& id);
  // NotFound, or FailedPrecondition while the job has not finished.
  absl::Status CheckDeletable(const std::string& id);
  void Erase(const std::string& id) { jobs_.erase(id); }

  void Finish(Job& job, proto::JobInfo::State state, int exit_code,
              const std::string& message, int64_t now_ms);
  // What of `event`'s output the log does not have yet (a report sent
  // again after the head restarted repeats some).
  static std::string_view NewOutput(const Job& job,
                                    const proto::JobEvent& event);
  // Applies the agent's report (its new output is counted already):
  // RUNNING once started, then finished as its exit or error says.
  void Apply(Job& job, const proto::JobEvent& event, int64_t now_ms);
  // Jobs running on the node fail, saying why; returns their ids.
  std::vector<std::string> NodeDied(const std::string& node_id,
                                    const std::string& why, int64_t now_ms);

  // Oldest first.
  proto::JobList List() const;
  size_t size() const { return jobs_.size(); }

 private:
  std::map<std::string, Job> jobs_;
};

}  // namespace shoal

#endif  // SHOAL_HEAD_JOB_TABLE_H_
