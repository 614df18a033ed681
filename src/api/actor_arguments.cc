#include "api/actor_arguments.h"

#include <utility>

#include "api/object_io.h"
#include "common/logging.h"
#include "common/utf8.h"
#include "shoal/shoal.pb.h"

namespace shoal::internal {

ActorArguments::ActorArguments(ObjectIo* io, SendFn send)
    : io_(io), send_(std::move(send)) {}

ActorArguments::~ActorArguments() { Stop(); }

void ActorArguments::Keep(std::vector<std::shared_ptr<RefHandle>> refs) {
  shoal::MutexLock lock(&mu_);
  for (auto& r : refs) kept_.push_back(std::move(r));
}

void ActorArguments::SendWhenReady(std::string actor_id,
                                   std::vector<TaskArg> args) {
  shoal::MutexLock lock(&mu_);
  Reap();
  if (stop_.load()) return;
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread thread([this, done, actor_id = std::move(actor_id),
                      args = std::move(args)]() mutable {
    Run(actor_id, std::move(args));
    done->store(true);
  });
  senders_.push_back(Sender{std::move(thread), std::move(done)});
}

void ActorArguments::Run(const std::string& actor_id,
                         std::vector<TaskArg> args) {
  proto::ActorArgs message;
  message.set_actor_id(actor_id);
  std::vector<std::shared_ptr<RefHandle>> keep;
  absl::Status written = io_->WriteActorArgs(args, &message, &keep, stop_);
  if (stop_.load()) return;
  if (!written.ok()) {
    message.clear_args();
    message.clear_stored_args();
    message.set_failed(ToValidUtf8(std::string(written.message())));
  }
  if (absl::Status sent = send_(message); !sent.ok()) {
    SHOAL_LOG(WARNING) << "cannot give actor " << actor_id
                       << " its constructor's arguments (it stays pending "
                          "until its job ends): "
                       << sent;
  }
  Keep(std::move(keep));
}

void ActorArguments::Reap() {
  for (auto it = senders_.begin(); it != senders_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = senders_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<std::shared_ptr<RefHandle>> ActorArguments::Stop() {
  stop_.store(true);
  std::list<Sender> senders;
  {
    shoal::MutexLock lock(&mu_);
    senders.swap(senders_);
  }
  for (Sender& s : senders) s.thread.join();
  shoal::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<RefHandle>> kept;
  kept.swap(kept_);
  return kept;
}

}  // namespace shoal::internal
