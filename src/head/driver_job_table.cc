#include "head/driver_job_table.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "head/table_storage.h"

namespace shoal {
namespace {

constexpr char kJobsTable[] = "jobs";
// The head's table of single values (head_storage.cc keeps the token's
// hash in it too).
constexpr char kMetaTable[] = "meta";
constexpr char kNextJobKey[] = "next_job";

}  // namespace

size_t DriverJobTable::Restore() {
  if (auto next = storage_->Get(kMetaTable, kNextJobKey)) {
    int64_t n = 0;
    if (absl::SimpleAtoi(*next, &n) && n > next_job_) next_job_ = n;
  }
  for (const auto& [id, bytes] : storage_->Scan(kJobsTable)) {
    awaiting_.insert(id);
  }
  return awaiting_.size();
}

absl::StatusOr<proto::RegisterJobReply> DriverJobTable::Register(
    const proto::RegisterJobRequest& r, uint64_t conn) {
  proto::RegisterJobReply reply;
  if (!r.resume_job_id().empty()) {
    // A driver back after the head restarted: its connection is its job's
    // again, and what the job owns stays.
    reply.set_job_id(r.resume_job_id());
    job_by_conn_[conn] = r.resume_job_id();
    awaiting_.erase(r.resume_job_id());
    SHOAL_LOG(INFO) << r.resume_job_id() << " is back (driver pid "
                    << r.driver_pid() << " on " << r.driver_host() << ")";
    return reply;
  }
  reply.set_job_id(absl::StrCat("job", next_job_++));
  absl::Status st =
      storage_->Put(kMetaTable, kNextJobKey, absl::StrCat(next_job_));
  if (st.ok()) {
    st = storage_->Put(kJobsTable, reply.job_id(), r.SerializeAsString());
  }
  if (!st.ok()) return st;
  job_by_conn_[conn] = reply.job_id();
  SHOAL_LOG(INFO) << reply.job_id() << " started by pid " << r.driver_pid()
                  << " on " << r.driver_host() << " (" << r.binary_path()
                  << ")";
  return reply;
}

std::string DriverJobTable::JobOf(uint64_t conn) const {
  auto it = job_by_conn_.find(conn);
  return it == job_by_conn_.end() ? "" : it->second;
}

std::optional<std::string> DriverJobTable::Disconnected(uint64_t conn) {
  auto it = job_by_conn_.find(conn);
  if (it == job_by_conn_.end()) return std::nullopt;
  std::string job = std::move(it->second);
  job_by_conn_.erase(it);
  return job;
}

std::vector<std::string> DriverJobTable::TakeAwaiting() {
  std::vector<std::string> jobs(awaiting_.begin(), awaiting_.end());
  awaiting_.clear();
  return jobs;
}

bool DriverJobTable::Live(const std::string& job_id) const {
  if (awaiting_.count(job_id) > 0) return true;
  for (const auto& [conn, job] : job_by_conn_) {
    if (job == job_id) return true;
  }
  return false;
}

void DriverJobTable::Ended(const std::string& job_id) {
  absl::Status st = storage_->Delete(kJobsTable, job_id);
  if (!st.ok()) SHOAL_LOG(ERROR) << "cannot store the end of a job: " << st;
}

}  // namespace shoal
