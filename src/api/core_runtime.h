// The driver side of the task path: submits tasks, leases workers, pushes
// tasks straight to them, owns the objects it creates.
//
// Threading: the public methods are thread-safe. Scheduling state lives on
// the runtime's event loop; the object table is guarded by its own mutex so
// that Get() never waits for the loop.
#ifndef SHOAL_API_CORE_RUNTIME_H_
#define SHOAL_API_CORE_RUNTIME_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shoal/api.h"

namespace google::protobuf {
class MessageLite;
}
namespace shoal::proto {
class ClusterStatus;
}

namespace shoal::internal {

struct RuntimeOptions {
  std::string head_address;
  std::string token;
  // How long a lease with no work is kept for further tasks of its shape.
  int64_t lease_idle_ms = 500;
};

class CoreRuntime {
 public:
  static absl::StatusOr<std::unique_ptr<CoreRuntime>> Connect(
      const RuntimeOptions& options);
  virtual ~CoreRuntime() = default;

  virtual std::shared_ptr<RefHandle> Submit(const std::string& function_name,
                                            std::vector<TaskArg> args,
                                            const TaskOptions& options) = 0;
  virtual std::shared_ptr<RefHandle> Put(
      ObjectValue value, std::vector<std::shared_ptr<RefHandle>> contained) = 0;
  // The live handle of an object this process references; throws Error.
  virtual std::shared_ptr<RefHandle> HandleFor(const std::string& id) = 0;
  virtual ObjectValue Get(const RefHandle& ref, int64_t timeout_ms) = 0;
  virtual std::vector<size_t> Wait(const std::vector<const RefHandle*>& refs,
                                   size_t num_ready, int64_t timeout_ms) = 0;
  virtual void Release(const std::string& object_id) = 0;
  virtual absl::StatusOr<proto::ClusterStatus> ClusterStatus() = 0;
  // One request to the head; the reply is parsed into *reply.
  virtual absl::Status CallHead(int method,
                                const google::protobuf::MessageLite& request,
                                google::protobuf::MessageLite* reply) = 0;
  // Returns leases and disconnects.
  virtual void Shutdown() = 0;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_CORE_RUNTIME_H_
