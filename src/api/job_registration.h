// This process's job at the head: registering it when the runtime starts
// (waiting a while for a head that is being restarted), and registering it
// again as the same job whenever the connection to the head is lost, so
// that what the job owns is kept across a head restart.
//
// Threading: Register() blocks, on any thread but the runtime's loop;
// Reattach() and the answers it gets run on the loop; Stop() from any
// thread.
#ifndef SHOAL_API_JOB_REGISTRATION_H_
#define SHOAL_API_JOB_REGISTRATION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
class EventLoop;
class HeadClient;
}  // namespace shoal::rpc

namespace shoal::internal {

class JobRegistration {
 public:
  using Reply = absl::StatusOr<proto::RegisterJobReply>;
  struct Hooks {
    // The head's RegisterJob, blocking and on the loop.
    std::function<Reply(const proto::RegisterJobRequest&)> register_job;
    std::function<void(const proto::RegisterJobRequest&,
                       std::function<void(Reply)>)>
        register_job_async;
    // Runs `fn` on the loop after `delay_ms`.
    std::function<void(int64_t delay_ms, std::function<void()> fn)> run_after;
    // The monotonic clock and a sleep, for Register's waits.
    std::function<int64_t()> now_us;
    std::function<void(int64_t us)> sleep_us;
  };
  // How often a head that refuses connections is tried again.
  static constexpr int64_t kRetryMs = 200;

  // Through `head`, timers on `loop`, the system's clock and sleep.
  // REQUIRES: both outlive the hooks.
  static Hooks HeadHooks(rpc::HeadClient* head, rpc::EventLoop* loop);

  explicit JobRegistration(Hooks hooks);

  // Registers the job `request` describes. A head being started again
  // (after a crash, on the same port) refuses connections for a moment:
  // this waits up to `wait_ms` for it, and says so once (naming
  // `head_address`). Other errors (a bad token, TLS) fail at once.
  absl::StatusOr<std::string> Register(const proto::RegisterJobRequest& request,
                                       int64_t wait_ms,
                                       const std::string& head_address);
  // Set by Register.
  const std::string& job_id() const { return job_id_; }

  // The connection to the head is gone: registers again as job_id() until
  // a head answers (every kRetryMs), then `on_back`. Nothing more once
  // Stop() was called.
  void Reattach(std::function<void()> on_back);
  void Stop() { stopping_ = true; }

 private:
  const Hooks hooks_;
  std::atomic<bool> stopping_{false};
  // Set by Register, read-only after.
  proto::RegisterJobRequest request_;
  std::string job_id_;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_JOB_REGISTRATION_H_
