// Fakes for the seams of the head's parts (head/agent_call.h): agents whose
// calls a test answers by hand, and a clock with timers a test moves by
// hand. No socket, no thread, no sleep.
#ifndef SHOAL_HEAD_HEAD_FAKES_TESTING_H_
#define SHOAL_HEAD_HEAD_FAKES_TESTING_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "head/agent_call.h"
#include "scheduling/resource_set.h"
#include "shoal/shoal.pb.h"

namespace shoal::testing {

// Records every agent call; the test answers each (in any order).
class FakeAgents {
 public:
  struct Call {
    std::string address;
    int method = 0;
    std::string payload;
    AgentReply done;
    int64_t timeout_ms = 0;
    bool answered = false;
  };

  AgentCall caller() {
    return [this](const std::string& address, int method, std::string payload,
                  AgentReply done, int64_t timeout_ms) {
      calls_.push_back({address, method, std::move(payload), std::move(done),
                        timeout_ms, false});
    };
  }

  // Indices of the calls of `method` not answered yet, oldest first.
  std::vector<size_t> Waiting(int method) const {
    std::vector<size_t> out;
    for (size_t i = 0; i < calls_.size(); ++i) {
      if (!calls_[i].answered && calls_[i].method == method) out.push_back(i);
    }
    return out;
  }
  // Calls of `method` ever made (answered or not).
  size_t Count(int method) const {
    size_t n = 0;
    for (const Call& c : calls_) n += c.method == method;
    return n;
  }
  const Call& call(size_t i) const { return calls_.at(i); }
  template <typename Request>
  Request RequestOf(size_t i) const {
    Request r;
    EXPECT_TRUE(r.ParseFromString(calls_.at(i).payload));
    return r;
  }
  void Answer(size_t i, const google::protobuf::MessageLite& reply) {
    Finish(i, reply.SerializeAsString());
  }
  void Fail(size_t i, const absl::Status& status) { Finish(i, status); }
  // Answers every waiting call of `method` with an empty reply.
  void AnswerAll(int method) {
    for (size_t i : Waiting(method)) Answer(i, proto::Empty());
  }

 private:
  void Finish(size_t i, absl::StatusOr<std::string> reply) {
    ASSERT_LT(i, calls_.size());
    ASSERT_FALSE(calls_[i].answered) << "call " << i << " answered twice";
    calls_[i].answered = true;
    // Copied: answering may add calls, moving the vector.
    AgentReply done = calls_[i].done;
    done(std::move(reply));
  }

  std::vector<Call> calls_;
};

// A monotonic clock (microseconds) with timers, both moved by Advance().
class FakeTimers {
 public:
  RunAfter runner() {
    return [this](int64_t delay_ms, std::function<void()> fn) {
      timers_.emplace(now_us_ + delay_ms * 1000, std::move(fn));
    };
  }
  std::function<int64_t()> clock() {
    return [this] { return now_us_; };
  }
  int64_t now_us() const { return now_us_; }
  size_t pending() const { return timers_.size(); }
  // Moves the clock `ms` on, firing the timers due by then in order (those
  // they start too, when due).
  void Advance(int64_t ms) {
    const int64_t until = now_us_ + ms * 1000;
    while (!timers_.empty() && timers_.begin()->first <= until) {
      auto it = timers_.begin();
      now_us_ = it->first;
      std::function<void()> fn = std::move(it->second);
      timers_.erase(it);
      fn();
    }
    now_us_ = until;
  }

 private:
  int64_t now_us_ = 1'000'000;
  std::multimap<int64_t, std::function<void()>> timers_;
};

inline proto::ResourceMap Resources(
    const std::map<std::string, double>& amounts) {
  absl::StatusOr<ResourceSet> set = ResourceSet::FromDoubles(amounts);
  EXPECT_TRUE(set.ok()) << set.status();
  proto::ResourceMap map;
  if (set.ok()) set->ToProto(&map);
  return map;
}

}  // namespace shoal::testing

#endif  // SHOAL_HEAD_HEAD_FAKES_TESTING_H_
