// The head: cluster tables (nodes, jobs, key-value pairs, binaries), node
// health, the cluster view that node agents use for spillback, placement
// groups, and the actor directory (ActorManager).
//
// Threading: all state lives on the head's event loop. Create() starts the
// loop; the destructor stops it.
#ifndef SHOAL_HEAD_HEAD_H_
#define SHOAL_HEAD_HEAD_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "head/table_storage.h"

namespace shoal {

struct HeadOptions {
  std::string host = "127.0.0.1";  // address to listen on
  int port = 6379;
  std::string token;
  std::string session_dir;  // blobs/ lives here
  int64_t heartbeat_interval_ms = 500;
  // An agent silent for this long is marked dead.
  int64_t health_timeout_ms = 5000;
  // How long a placement group that fits no node set waits for nodes.
  int64_t infeasible_grace_ms = 5000;
  // Task records kept per job (shoal list tasks); older ones are dropped.
  size_t max_task_events_per_job = 10000;
  // Where the cluster's state is kept: "" for <session_dir>/head.db
  // (SQLite), a path for another SQLite file, "memory" for none (lost when
  // the head stops). A head started again on the same storage carries on
  // with that state.
  std::string storage;
  // How durable a write to `storage` is before the head answers.
  StorageSync storage_sync = StorageSync::kNormal;
  // SQLite only: a write-ahead log that is damaged (head/wal_check.h) is
  // set aside and the head starts from the database file alone, instead of
  // refusing to start. An intact log is used as always.
  bool discard_wal = false;
  // After a restart, how long a driver has to reconnect before its job
  // (and what it owns) ends.
  int64_t reattach_grace_ms = 10000;
};

class Head {
 public:
  static absl::StatusOr<std::unique_ptr<Head>> Create(
      const HeadOptions& options);
  virtual ~Head() = default;
  virtual int port() const = 0;
  // Blocks until a SHUTDOWN_HEAD request or Stop().
  virtual void Wait() = 0;
  virtual void Stop() = 0;
  // Where the head's dashboard serves (host:port), once it listens: told
  // to drivers in ClusterStatus (Ray's get_dashboard_url()).
  virtual void SetDashboardAddress(const std::string& address) = 0;
};

}  // namespace shoal

#endif  // SHOAL_HEAD_HEAD_H_
