// For the driver side's unit tests: a worker as a submitter sees it, a peer
// of an in-memory network (rpc/fake_channel.h) answering PUSH_TASK.
#ifndef SHOAL_API_FAKE_WORKER_TESTING_H_
#define SHOAL_API_FAKE_WORKER_TESTING_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rpc/fake_channel.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {

// Answers each task with its id as the value, after recording it; tasks
// whose id starts with "hold" are kept unanswered (in `held`), and those
// starting with "err" get an error reply.
class FakeWorker {
 public:
  FakeWorker(rpc::FakeNetwork* network, std::string address)
      : network_(network), address_(std::move(address)) {
    rpc::RegisterProto<proto::TaskSpec>(
        network_->Listen(address_), proto::PUSH_TASK,
        [this](const proto::TaskSpec& spec, rpc::Responder r) {
          seen.push_back(spec.task_id());
          if (spec.task_id().rfind("hold", 0) == 0) {
            held.push_back(r);
            return;
          }
          if (spec.task_id().rfind("err", 0) == 0) {
            r.Error(absl::InvalidArgumentError("no function named nope"));
            return;
          }
          proto::TaskResult result;
          result.set_ok(true);
          result.set_value(spec.task_id());
          result.set_exec_us(exec_us);
          r.Reply(result);
        });
  }
  ~FakeWorker() { Die(); }
  FakeWorker(const FakeWorker&) = delete;
  FakeWorker& operator=(const FakeWorker&) = delete;

  const std::string& address() const { return address_; }
  // Ends the process, as kill -9 would: its connections close.
  void Die() {
    if (network_->Find(address_) != nullptr) network_->Kill(address_);
  }

  int64_t exec_us = 100;
  std::vector<std::string> seen;
  std::vector<rpc::Responder> held;

 private:
  rpc::FakeNetwork* const network_;
  const std::string address_;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_FAKE_WORKER_TESTING_H_
