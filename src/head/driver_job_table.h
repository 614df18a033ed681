// The jobs of drivers (REGISTER_JOB: a program that called shoal::Init):
// each gets the next "job<N>" and is tied to the driver's connection; the
// job ends when that connection closes. Kept in storage (tables "jobs" and
// "meta"), so that after a restart a driver that reconnects resumes its job
// and one that does not come back has its job ended.
//
// Threading: thread-compatible; the head uses it from its event loop only.
#ifndef SHOAL_HEAD_DRIVER_JOB_TABLE_H_
#define SHOAL_HEAD_DRIVER_JOB_TABLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shoal/shoal.pb.h"

namespace shoal {

class TableStorage;

class DriverJobTable {
 public:
  // REQUIRES: `storage` outlives this table.
  explicit DriverJobTable(TableStorage* storage) : storage_(storage) {}

  // Takes up the job counter and the live jobs a head that ran before
  // kept: their drivers are awaited. Returns how many are.
  size_t Restore();
  // A new job for the driver on connection `conn`, kept before it is
  // acknowledged; or, with resume_job_id, its job again (no longer
  // awaited).
  absl::StatusOr<proto::RegisterJobReply> Register(
      const proto::RegisterJobRequest& request, uint64_t conn);
  // Whether the job's driver is connected, or awaited after a restart.
  bool Live(const std::string& job_id) const;
  // The job of the driver on `conn`; empty when it is none's.
  std::string JobOf(uint64_t conn) const;
  // Connection `conn` closed: its job, if it had one (no longer tied).
  std::optional<std::string> Disconnected(uint64_t conn);
  // The jobs still awaited (their drivers did not come back), no longer.
  std::vector<std::string> TakeAwaiting();
  // The job ended: forgotten in storage.
  void Ended(const std::string& job_id);
  // Jobs made so far (the counter survives restarts).
  int64_t num_jobs() const { return next_job_ - 1; }

 private:
  TableStorage* const storage_;
  std::map<uint64_t, std::string> job_by_conn_;
  // After a restart: drivers' jobs that have not reconnected yet.
  std::set<std::string> awaiting_;
  int64_t next_job_ = 1;
};

}  // namespace shoal

#endif  // SHOAL_HEAD_DRIVER_JOB_TABLE_H_
