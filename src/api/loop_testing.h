// For the driver side's unit tests: a fixture that owns an rpc::EventLoop and
// runs the test's code on it, once (Run) or until a check holds (Eventually).
#ifndef SHOAL_API_LOOP_TESTING_H_
#define SHOAL_API_LOOP_TESTING_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "gtest/gtest.h"
#include "rpc/event_loop.h"

namespace shoal::internal {

class LoopTest : public ::testing::Test {
 protected:
  // Starts loop_, its thread named `name`. Call first in SetUp().
  void StartLoop(const std::string& name) {
    auto loop = rpc::EventLoop::Create(name);
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
  }

  // Runs `fn` on the loop and returns once it has.
  void Run(const std::function<void()>& fn) { loop_->RunSync(fn); }

  // Runs `check` on the loop until it holds (10 s at most).
  bool Eventually(const std::function<bool()>& check) {
    for (int i = 0; i < 1000; ++i) {
      bool ok = false;
      Run([&] { ok = check(); });
      if (ok) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  std::unique_ptr<rpc::EventLoop> loop_;
};

}  // namespace shoal::internal

#endif  // SHOAL_API_LOOP_TESTING_H_
