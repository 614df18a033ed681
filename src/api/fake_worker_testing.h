// For the driver side's unit tests: a worker as a submitter sees it, a real
// rpc::Server on loopback answering PUSH_TASK.
#ifndef SHOAL_API_FAKE_WORKER_TESTING_H_
#define SHOAL_API_FAKE_WORKER_TESTING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rpc/event_loop.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {

// Answers each task with its id as the value, after recording it; tasks
// whose id starts with "hold" are kept unanswered (in `held`), and those
// starting with "err" get an error reply. Loop thread only.
class FakeWorker {
 public:
  FakeWorker(rpc::EventLoop* loop, const std::string& token) {
    auto server = rpc::Server::Create(loop, "127.0.0.1", 0, token);
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    rpc::RegisterProto<proto::TaskSpec>(
        server_.get(), proto::PUSH_TASK,
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
  std::string address() const {
    return absl::StrCat("127.0.0.1:", server_->port());
  }
  // Ends the process, as kill -9 would: its connections close.
  void Die() { server_.reset(); }

  int64_t exec_us = 100;
  std::vector<std::string> seen;
  std::vector<rpc::Responder> held;

 private:
  std::unique_ptr<rpc::Server> server_;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_FAKE_WORKER_TESTING_H_
