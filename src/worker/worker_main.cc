#include "worker/worker_main.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "api/object_client.h"
#include "common/logging.h"
#include "common/util.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"
#include "worker/function_registry.h"

namespace shoal::internal {
namespace {

std::string Env(const char* name) {
  const char* v = getenv(name);
  return v ? v : "";
}

// The node's object store, connected on first use. Null (and the error
// kept) when the node has none.
absl::StatusOr<std::shared_ptr<ObjectClient>>& Store() {
  static absl::StatusOr<std::shared_ptr<ObjectClient>> client =
      absl::UnavailableError("not connected");
  static bool tried = false;
  if (!tried) {
    tried = true;
    client =
        ObjectClient::Connect(Env("SHOAL_AGENT_ADDRESS"), Env("SHOAL_TOKEN"),
                              "worker " + Env("SHOAL_WORKER_ID"));
    if (!client.ok()) {
      SHOAL_LOG(WARNING) << "no object store on this node: " << client.status();
    }
  }
  return client;
}

// Maps the stored arguments from this node's store (pulling them here
// first). Fills `result` with the error when one cannot be had.
bool ResolveArgs(const proto::TaskSpec& spec, std::vector<ObjectValue>* args,
                 proto::TaskResult* result) {
  args->reserve(spec.args_size());
  for (int i = 0; i < spec.args_size(); ++i) {
    auto stored = spec.stored_args().find(i);
    if (stored == spec.stored_args().end()) {
      args->push_back({spec.args(i), false, nullptr});
      continue;
    }
    const proto::StoredObject& object = stored->second;
    absl::StatusOr<std::shared_ptr<StoredView>> view =
        Store().ok()
            ? (*Store())->Pull(object, 0)
            : absl::StatusOr<std::shared_ptr<StoredView>>(Store().status());
    if (!view.ok()) {
      result->set_error(absl::StrCat("argument ", i, " (object ",
                                     object.object_id(), ") is unavailable on ",
                                     "this node: ", view.status().message()));
      if (view.status().code() == absl::StatusCode::kDataLoss) {
        result->set_error_type("shoal::ObjectLost");
        result->set_lost_object(object.object_id());
      } else {
        result->set_error_type("shoal::ObjectUnavailable");
      }
      return false;
    }
    std::string_view metadata = (*view)->metadata();
    args->push_back({(*view)->data(),
                     !metadata.empty() && metadata[0] == kFormatRaw, *view});
  }
  return true;
}

// Large results go into this node's store under the id the owner chose;
// small ones travel in the reply.
absl::Status StoreResult(const proto::TaskSpec& spec, const ObjectValue& value,
                         proto::TaskResult* result) {
  uint64_t threshold = spec.inline_threshold() > 0 ? spec.inline_threshold()
                                                   : InlineThresholdBytes();
  if (value.data.size() < threshold || spec.result_id().empty() ||
      !Store().ok()) {
    result->set_value(ToMsgpack(value));
    return absl::OkStatus();
  }
  ObjectClient& store = **Store();
  const char format = value.raw ? kFormatRaw : kFormatMsgpack;
  absl::Status put =
      store.Put(spec.result_id(), spec.owner(), value.data.size(),
                std::string_view(&format, 1), [&](uint8_t* dest) {
                  memcpy(dest, value.data.data(), value.data.size());
                });
  // A retried task whose earlier run stored the result before its reply
  // was lost finds it there.
  if (!put.ok() && put.code() != absl::StatusCode::kAlreadyExists) return put;
  proto::StoredObject* stored = result->mutable_stored();
  stored->set_object_id(spec.result_id());
  stored->set_data_size(value.data.size());
  stored->set_metadata_size(1);
  stored->set_owner(spec.owner());
  proto::ObjectSource* source = stored->add_sources();
  source->set_node_id(store.node_id());
  source->set_address(store.transfer_address());
  return absl::OkStatus();
}

void RunTask(const proto::TaskSpec& spec, const rpc::Responder& responder) {
  proto::TaskResult result;
  const Invoker* invoker = FindInvoker(spec.function_name());
  std::vector<ObjectValue> args;
  if (invoker == nullptr) {
    result.set_error("this worker's binary has no remote function named \"" +
                     spec.function_name() +
                     "\": register it with SHOAL_REMOTE in the program");
    result.set_error_type("shoal::UnknownFunction");
  } else if (ResolveArgs(spec, &args, &result)) {
    int64_t start = MonotonicUs();
    try {
      ObjectValue value = (*invoker)(args);
      result.set_exec_us(MonotonicUs() - start);
      absl::Status stored = StoreResult(spec, value, &result);
      if (stored.ok()) {
        result.set_ok(true);
      } else {
        result.set_error(
            absl::StrCat("the result could not be stored: ", stored.message()));
        result.set_error_type("shoal::ObjectStoreFull");
      }
    } catch (const std::exception& e) {
      result.set_error(e.what());
      result.set_error_type(typeid(e).name());
    } catch (...) {
      result.set_error("unknown exception (not derived from std::exception)");
    }
    if (result.exec_us() == 0) result.set_exec_us(MonotonicUs() - start);
  }
  args.clear();  // unpins the arguments before the owner hears back
  responder.ReplyNow(result);
}

}  // namespace

int RunWorker() {
  std::string worker_id = Env("SHOAL_WORKER_ID");
  internal::SetLogComponent("worker " + worker_id);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  auto loop = rpc::EventLoop::Create("shoal-worker");
  if (!loop.ok()) {
    SHOAL_LOG(ERROR) << loop.status();
    return 1;
  }
  std::unique_ptr<rpc::Server> server;
  std::unique_ptr<rpc::Channel> agent;
  std::string token = Env("SHOAL_TOKEN");
  (*loop)->Post([&] {
    auto s = rpc::Server::Create(loop->get(), Env("SHOAL_NODE_IP"), 0, token);
    if (!s.ok()) {
      SHOAL_LOG(ERROR) << "worker cannot listen: " << s.status();
      _exit(1);
    }
    server = std::move(*s);
    rpc::RegisterProto<proto::TaskSpec>(server.get(), proto::PUSH_TASK,
                                        RunTask);
    agent = std::make_unique<rpc::Channel>(
        loop->get(), Env("SHOAL_AGENT_ADDRESS"), token, "worker " + worker_id);
    proto::RegisterWorkerRequest req;
    req.set_worker_id(worker_id);
    req.set_pid(getpid());
    req.set_port(server->port());
    rpc::CallProto<proto::Empty>(
        agent.get(), proto::REGISTER_WORKER, req,
        [&](absl::StatusOr<proto::Empty> r) {
          if (!r.ok()) {
            SHOAL_LOG(ERROR)
                << "cannot register with the node agent: " << r.status();
            _exit(1);
          }
        },
        10000);
    agent->OnDisconnect([](const absl::Status& why) {
      SHOAL_LOG(WARNING) << "node agent gone (" << why << "); exiting";
      _exit(0);
    });
  });
  int sig = 0;
  sigwait(&stop, &sig);
  _exit(0);
}

}  // namespace shoal::internal
