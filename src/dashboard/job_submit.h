// What `shoal job submit` and POST /api/jobs/ share: a working dir packed
// and sent to the head's blob store for the job.
#ifndef SHOAL_DASHBOARD_JOB_SUBMIT_H_
#define SHOAL_DASHBOARD_JOB_SUBMIT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "head_client/head_client.h"
#include "shoal/shoal.pb.h"

namespace shoal::dashboard {

inline constexpr int64_t kMaxWorkingDirBytes = 100 << 20;  // packed

// Packs the folder `dir` (tar.gz), sends it to the head unless it is there
// already, and names it in `spec`. InvalidArgument for a missing folder or
// one that packs to more than kMaxWorkingDirBytes.
absl::Status AttachWorkingDir(rpc::HeadClient& head, const std::string& dir,
                              proto::JobSpec* spec);

}  // namespace shoal::dashboard

#endif  // SHOAL_DASHBOARD_JOB_SUBMIT_H_
