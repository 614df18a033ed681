// Launch gangs as `shoal launch` reports them (GANG_UPDATE): each report
// is the gang's whole state (its ranks, hosts, logs, restarts), and
// replaces the last. The head keeps the latest `max_gangs`, running ones
// before ended ones, and counts gangs and restarts for /metrics. Each gang
// is kept in storage (table "gangs") too, so that a head that restarts
// still lists it; a running gang ends STOPPED when the job of the driver
// that reports it (`shoal launch`'s) ends.
//
// Threading: the head's loop; not thread-safe.
#ifndef SHOAL_HEAD_GANG_TABLE_H_
#define SHOAL_HEAD_GANG_TABLE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "head/table_storage.h"
#include "shoal/shoal.pb.h"

namespace shoal {

class GangTable {
 public:
  // `storage` (may be null: nothing kept) must outlive this.
  explicit GangTable(size_t max_gangs = 100, TableStorage* storage = nullptr);

  void Update(const proto::GangInfo& gang);
  // The driver job `job_id` ended: its running gangs end as STOPPED, saying
  // that their `shoal launch` went away.
  void JobEnded(const std::string& job_id);
  // Takes up the gangs kept in storage (a head restarting). Call once.
  void Restore();
  // Newest first.
  proto::GangList List() const;

  int64_t started() const { return started_; }
  int64_t restarts() const { return restarts_; }

 private:
  void Persist(const proto::GangInfo& gang);
  void Forget(std::string gang_id);  // a copy: it may be order_'s

  const size_t max_gangs_;
  TableStorage* const storage_;
  std::map<std::string, proto::GangInfo> gangs_;
  std::deque<std::string> order_;  // first reported first
  int64_t started_ = 0;
  int64_t restarts_ = 0;
};

}  // namespace shoal

#endif  // SHOAL_HEAD_GANG_TABLE_H_
