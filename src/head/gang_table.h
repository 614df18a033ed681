// Launch gangs as `shoal launch` reports them (GANG_UPDATE): each report
// is the gang's whole state (its ranks, hosts, logs, restarts), and
// replaces the last. The head keeps the latest `max_gangs`, running ones
// before ended ones, and counts gangs and restarts for /metrics.
//
// Threading: the head's loop; not thread-safe.
#ifndef SHOAL_HEAD_GANG_TABLE_H_
#define SHOAL_HEAD_GANG_TABLE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "shoal/shoal.pb.h"

namespace shoal {

class GangTable {
 public:
  explicit GangTable(size_t max_gangs = 100);

  void Update(const proto::GangInfo& gang);
  // The launcher of a running gang is gone (its connection closed): the
  // gang ends as STOPPED, saying so.
  void LauncherLost(uint64_t connection_id);
  void SetConnection(const std::string& gang_id, uint64_t connection_id);
  // Newest first.
  proto::GangList List() const;

  int64_t started() const { return started_; }
  int64_t restarts() const { return restarts_; }

 private:
  const size_t max_gangs_;
  std::map<std::string, proto::GangInfo> gangs_;
  std::deque<std::string> order_;  // first reported first
  std::map<std::string, uint64_t> connections_;
  int64_t started_ = 0;
  int64_t restarts_ = 0;
};

}  // namespace shoal

#endif  // SHOAL_HEAD_GANG_TABLE_H_
