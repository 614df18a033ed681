// A real redis-server for tests and benchmarks of the head's Redis storage:
// on a free loopback port, with its append-only file in a temp dir of its
// own (appendonly yes, appendfsync everysec: what a head's default
// --storage-sync normal needs), no RDB snapshots. Killed (and its dir removed)
// when destroyed.
#ifndef SHOAL_TESTS_TESTING_REDIS_SERVER_H_
#define SHOAL_TESTS_TESTING_REDIS_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal::testing {

class RedisServer {
 public:
  // Waits until it answers PING. `extra_args` go to redis-server (e.g.
  // {"--appendfsync", "always"}).
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(
      std::vector<std::string> extra_args = {});
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  ~RedisServer();

  int port() const { return port_; }
  // redis://127.0.0.1:PORT, plus `/db` when db > 0.
  std::string url(int db = 0) const;
  // SIGKILL, and waits until it is gone.
  void Kill();
  // Kill, then the same server again: same port, same append-only file.
  absl::Status Restart();
  // `redis-cli -p PORT ARGS...`: its output (without the last newline).
  absl::StatusOr<std::string> Cli(const std::vector<std::string>& args) const;

 private:
  RedisServer() = default;
  absl::Status Run();

  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  std::vector<std::string> extra_args_;
};

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_REDIS_SERVER_H_
