// Registering the job, waiting for a restarting head, and registering again
// as the same job after the head was lost: on a hand-driven clock and loop.
#include "api/job_registration.h"

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::internal {
namespace {

absl::Status Refused() {
  return absl::UnavailableError("connect: Connection refused");
}

proto::RegisterJobReply JobReply(const std::string& id) {
  proto::RegisterJobReply reply;
  reply.set_job_id(id);
  return reply;
}

// A head whose answers the test scripts, a clock that moves only when the
// registration sleeps, and timers fired by hand.
struct Fakes {
  std::deque<JobRegistration::Reply> answers;
  std::vector<proto::RegisterJobRequest> requests;
  std::vector<std::function<void(JobRegistration::Reply)>> pending;
  std::vector<std::pair<int64_t, std::function<void()>>> timers;
  int64_t now_us = 1'000'000;
  int sleeps = 0;

  JobRegistration::Hooks Hooks() {
    return {
        .register_job =
            [this](const proto::RegisterJobRequest& r) {
              requests.push_back(r);
              JobRegistration::Reply reply = answers.front();
              answers.pop_front();
              return reply;
            },
        .register_job_async =
            [this](const proto::RegisterJobRequest& r,
                   std::function<void(JobRegistration::Reply)> done) {
              requests.push_back(r);
              pending.push_back(std::move(done));
            },
        .run_after =
            [this](int64_t ms, std::function<void()> fn) {
              timers.emplace_back(ms, std::move(fn));
            },
        .now_us = [this] { return now_us; },
        .sleep_us =
            [this](int64_t us) {
              ++sleeps;
              now_us += us;
            },
    };
  }
};

proto::RegisterJobRequest Job() {
  proto::RegisterJobRequest job;
  job.set_driver_pid(42);
  job.set_binary_hash("h");
  return job;
}

TEST(JobRegistrationTest, RegistersAtOnceWhenTheHeadAnswers) {
  Fakes fakes;
  fakes.answers.push_back(JobReply("job-1"));
  JobRegistration registration(fakes.Hooks());
  auto id = registration.Register(Job(), 10000, "h:1");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "job-1");
  EXPECT_EQ(registration.job_id(), "job-1");
  EXPECT_EQ(fakes.sleeps, 0);
}

TEST(JobRegistrationTest, WaitsForAHeadThatRefusesConnections) {
  Fakes fakes;
  fakes.answers = {Refused(), Refused(), Refused(), JobReply("job-2")};
  JobRegistration registration(fakes.Hooks());
  auto id = registration.Register(Job(), 10000, "h:1");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "job-2");
  EXPECT_EQ(fakes.sleeps, 3);
  EXPECT_EQ(fakes.requests.size(), 4u);
}

TEST(JobRegistrationTest, GivesUpOnceTheWaitIsOver) {
  Fakes fakes;
  for (int i = 0; i < 100; ++i) fakes.answers.push_back(Refused());
  JobRegistration registration(fakes.Hooks());
  auto id = registration.Register(Job(), 1000, "h:1");
  EXPECT_TRUE(absl::IsUnavailable(id.status()));
  // 1 s in steps of kRetryMs, then one last try.
  EXPECT_EQ(fakes.sleeps, 1000 / JobRegistration::kRetryMs);
}

TEST(JobRegistrationTest, OtherErrorsFailAtOnce) {
  for (absl::Status error : {absl::UnauthenticatedError("wrong cluster token"),
                             absl::UnavailableError("TLS handshake failed")}) {
    Fakes fakes;
    fakes.answers.push_back(error);
    JobRegistration registration(fakes.Hooks());
    auto id = registration.Register(Job(), 10000, "h:1");
    EXPECT_EQ(id.status(), error);
    EXPECT_EQ(fakes.sleeps, 0);
  }
}

TEST(JobRegistrationTest, ReattachesAsTheSameJobUntilAHeadAnswers) {
  Fakes fakes;
  fakes.answers.push_back(JobReply("job-3"));
  JobRegistration registration(fakes.Hooks());
  ASSERT_TRUE(registration.Register(Job(), 0, "h:1").ok());
  int back = 0;
  registration.Reattach([&] { ++back; });
  ASSERT_EQ(fakes.pending.size(), 1u);
  const proto::RegisterJobRequest& again = fakes.requests.back();
  EXPECT_EQ(again.resume_job_id(), "job-3");
  EXPECT_EQ(again.driver_pid(), 42);
  // The head is still away: tried again after kRetryMs.
  fakes.pending[0](Refused());
  ASSERT_EQ(fakes.timers.size(), 1u);
  EXPECT_EQ(fakes.timers[0].first, JobRegistration::kRetryMs);
  EXPECT_EQ(back, 0);
  fakes.timers[0].second();
  ASSERT_EQ(fakes.pending.size(), 2u);
  fakes.pending[1](JobReply("job-3"));
  EXPECT_EQ(back, 1);
  EXPECT_EQ(fakes.timers.size(), 1u);
}

TEST(JobRegistrationTest, NothingMoreOnceStopped) {
  Fakes fakes;
  fakes.answers.push_back(JobReply("job-4"));
  JobRegistration registration(fakes.Hooks());
  ASSERT_TRUE(registration.Register(Job(), 0, "h:1").ok());
  int back = 0;
  registration.Reattach([&] { ++back; });
  registration.Stop();
  fakes.pending[0](Refused());
  EXPECT_TRUE(fakes.timers.empty());
  registration.Reattach([&] { ++back; });
  EXPECT_EQ(fakes.pending.size(), 1u);
  EXPECT_EQ(back, 0);
}

}  // namespace
}  // namespace shoal::internal
