#include "head/job_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/utf8.h"
#include "scheduling/resource_set.h"

namespace shoal {
namespace {

const std::string& StateName(proto::JobInfo::State state) {
  return proto::JobInfo::State_Name(state);
}

// Submission ids name log files: letters, digits, '-', '_' and '.'.
bool ValidId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
           c == '.';
  });
}

absl::Status CheckSpec(const proto::JobSpec& spec) {
  if (spec.entrypoint().empty()) {
    return absl::InvalidArgumentError(
        "a job needs an entrypoint: shoal job submit -- CMD ARGS");
  }
  // A shell reads a command only up to its first NUL: the job would run
  // less than it says it runs.
  if (spec.entrypoint().find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        "the entrypoint holds a NUL byte, which no command line can: remove "
        "it");
  }
  for (const auto& [name, value] : spec.env()) {
    if (value.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the value of env var ", name,
          " holds a NUL byte, which no environment can: remove it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

JobNodeChoice ChooseJobNode(const proto::ResourceMap& need_map,
                            std::vector<JobNode>& nodes) {
  const ResourceSet need = ResourceSet::FromProto(need_map);
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const JobNode& a, const JobNode& b) {
                     return a.is_head_node && !b.is_head_node;
                   });
  JobNodeChoice choice;
  for (const JobNode& n : nodes) {
    if (!ResourceSet::FromProto(n.total).Contains(need)) continue;
    choice.fits = true;
    if (ResourceSet::FromProto(n.available).Contains(need)) {
      choice.node = &n;
      break;
    }
  }
  return choice;
}

bool JobTable::Finished(const proto::JobInfo& info) {
  return info.state() == proto::JobInfo::SUCCEEDED ||
         info.state() == proto::JobInfo::FAILED ||
         info.state() == proto::JobInfo::STOPPED;
}

absl::StatusOr<JobTable::Job*> JobTable::Submit(proto::JobSpec spec,
                                                const std::string& head_address,
                                                int64_t now_ms) {
  if (absl::Status st = CheckSpec(spec); !st.ok()) return st;
  if (spec.submission_id().empty()) {
    do {
      spec.set_submission_id("job_" + RandomHex(8));
    } while (jobs_.count(spec.submission_id()));
  }
  const std::string id = spec.submission_id();
  if (!ValidId(id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "submission id \"", id,
        "\" is not allowed: use letters, digits, '-', '_' and '.'"));
  }
  if (const Job* j = Find(id)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "job ", id, " exists already (", StateName(j->info.state()),
        "): give another --submission-id"));
  }
  spec.set_head_address(head_address);
  Job& job = jobs_[id];
  *job.info.mutable_spec() = std::move(spec);
  job.info.set_state(proto::JobInfo::PENDING);
  job.info.set_start_time_ms(now_ms);
  return &job;
}

bool JobTable::Restore(const std::string& id, const std::string& bytes) {
  Job job;
  if (!job.info.ParseFromString(bytes)) return false;
  jobs_[id] = std::move(job);
  return true;
}

JobTable::Job* JobTable::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

absl::Status JobTable::CheckDeletable(const std::string& id) {
  const Job* job = Find(id);
  if (job == nullptr) {
    return absl::NotFoundError(absl::StrCat("no job ", id, " on this cluster"));
  }
  if (!Finished(job->info)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", StateName(job->info.state()),
                     ": stop it first (shoal job stop)"));
  }
  return absl::OkStatus();
}

void JobTable::Finish(Job& job, proto::JobInfo::State state, int exit_code,
                      const std::string& message, int64_t now_ms) {
  job.info.set_state(state);
  job.info.set_exit_code(exit_code);
  job.info.set_message(ToValidUtf8(message));
  job.info.set_end_time_ms(now_ms);
}

std::string_view JobTable::NewOutput(const Job& job,
                                     const proto::JobEvent& event) {
  std::string_view output = event.output();
  const int64_t have = job.info.log_bytes() - event.output_offset();
  output.remove_prefix(static_cast<size_t>(
      std::clamp<int64_t>(have, 0, static_cast<int64_t>(output.size()))));
  return output;
}

void JobTable::Apply(Job& job, const proto::JobEvent& event, int64_t now_ms) {
  if (event.started() && job.info.state() == proto::JobInfo::PENDING) {
    job.info.set_state(proto::JobInfo::RUNNING);
    job.info.set_pid(event.pid());
  }
  if (!event.error().empty()) {
    Finish(job, proto::JobInfo::FAILED, -1, event.error(), now_ms);
  } else if (event.exited() && !Finished(job.info)) {
    if (job.stop_requested) {
      Finish(job, proto::JobInfo::STOPPED, event.exit_code(),
             absl::StrCat("stopped by shoal job stop (the entrypoint ",
                          event.description(), ")"),
             now_ms);
    } else if (event.exit_code() == 0) {
      Finish(job, proto::JobInfo::SUCCEEDED, 0, "the entrypoint exited with 0",
             now_ms);
    } else {
      Finish(job, proto::JobInfo::FAILED, event.exit_code(),
             absl::StrCat("the entrypoint ", event.description()), now_ms);
    }
  }
}

std::vector<std::string> JobTable::NodeDied(const std::string& node_id,
                                            const std::string& why,
                                            int64_t now_ms) {
  std::vector<std::string> ids;
  for (auto& [id, job] : jobs_) {
    if (job.info.node_id() != node_id || Finished(job.info)) continue;
    Finish(job, proto::JobInfo::FAILED, -1,
           absl::StrCat("its node ", node_id, " died: ", why), now_ms);
    ids.push_back(id);
  }
  return ids;
}

proto::JobList JobTable::List() const {
  proto::JobList list;
  for (const auto& [id, job] : jobs_) *list.add_jobs() = job.info;
  std::sort(list.mutable_jobs()->begin(), list.mutable_jobs()->end(),
            [](const proto::JobInfo& a, const proto::JobInfo& b) {
              return a.start_time_ms() < b.start_time_ms();
            });
  return list;
}

}  // namespace shoal
