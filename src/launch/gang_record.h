// The head's record of a launch gang (proto::GangInfo, GANG_UPDATE), for
// `shoal list gangs`, the dashboard and the metrics: what the launcher
// tells the head as the gang starts, its ranks end and it finishes.
//
// Pure: builds the record; the launcher sends it.
#ifndef SHOAL_LAUNCH_GANG_RECORD_H_
#define SHOAL_LAUNCH_GANG_RECORD_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shoal/shoal.pb.h"

namespace shoal::launch {

struct LaunchOptions;
struct LaunchOutcome;

// A new gang's record: its command (valid UTF-8), mode, placement group,
// restart limit, start time, the job it runs in (`job_id`, may be empty)
// and who launched it.
proto::GangInfo NewGangRecord(const LaunchOptions& options,
                              const std::string& gang_id,
                              const std::string& placement_group_id,
                              const std::string& job_id,
                              const std::string& launcher, int64_t now_ms);

// The ranks of attempt `launch_id`: where each runs and its log.
void SetGangRanks(const std::vector<std::pair<int, int>>& rank_hosts,
                  const std::vector<proto::LaunchHost>& hosts,
                  const std::string& launch_id, proto::GangInfo* gang);

// Marks the ranks in `exits` ended, with their exit codes and why.
void SetGangExits(const std::map<int, proto::LaunchExit>& exits,
                  proto::GangInfo* gang);

// The record of a gang that ended with `outcome`.
void FinishGangRecord(const LaunchOutcome& outcome, int64_t now_ms,
                      proto::GangInfo* gang);

}  // namespace shoal::launch

#endif  // SHOAL_LAUNCH_GANG_RECORD_H_
