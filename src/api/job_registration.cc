#include "api/job_registration.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/match.h"
#include "common/clock.h"
#include "common/logging.h"
#include "head_client/head_client.h"
#include "rpc/event_loop.h"

namespace shoal::internal {

JobRegistration::Hooks JobRegistration::HeadHooks(rpc::HeadClient* head,
                                                  rpc::EventLoop* loop) {
  return {
      .register_job =
          [head](const proto::RegisterJobRequest& request) {
            return head->RegisterJob(request);
          },
      .register_job_async =
          [head](const proto::RegisterJobRequest& request,
                 std::function<void(Reply)> done) {
            head->RegisterJob(request, std::move(done), 2000);
          },
      .run_after =
          [loop](int64_t delay_ms, std::function<void()> fn) {
            loop->RunAfter(delay_ms, std::move(fn));
          },
      .now_us = [] { return MonotonicUs(); },
      .sleep_us = [](int64_t us) { usleep(static_cast<useconds_t>(us)); },
  };
}

JobRegistration::JobRegistration(Hooks hooks) : hooks_(std::move(hooks)) {}

absl::StatusOr<std::string> JobRegistration::Register(
    const proto::RegisterJobRequest& request, int64_t wait_ms,
    const std::string& head_address) {
  const int64_t give_up_us = hooks_.now_us() + wait_ms * 1000;
  bool told = false;
  while (true) {
    Reply reply = hooks_.register_job(request);
    if (reply.ok()) {
      request_ = request;
      job_id_ = reply->job_id();
      return job_id_;
    }
    if (!absl::IsUnavailable(reply.status()) ||
        !absl::StrContains(reply.status().message(), "Connection refused") ||
        hooks_.now_us() >= give_up_us) {
      return reply.status();
    }
    if (!told) {
      told = true;
      SHOAL_LOG(WARNING) << "the head at " << head_address
                         << " refuses connections (" << reply.status()
                         << "); waiting up to " << wait_ms / 1000
                         << " s for it to come back "
                            "(SHOAL_HEAD_OUTAGE_WAIT_MS)";
    }
    hooks_.sleep_us(kRetryMs * 1000);
  }
}

void JobRegistration::Reattach(std::function<void()> on_back) {
  if (stopping_) return;
  proto::RegisterJobRequest request = request_;
  request.set_resume_job_id(job_id_);
  hooks_.register_job_async(
      request, [this, on_back = std::move(on_back)](Reply reply) mutable {
        if (stopping_) return;
        if (!reply.ok()) {
          hooks_.run_after(kRetryMs, [this, on_back = std::move(on_back)] {
            Reattach(on_back);
          });
          return;
        }
        SHOAL_LOG(INFO) << "the head is back; " << job_id_ << " carries on";
        on_back();
      });
}

}  // namespace shoal::internal
