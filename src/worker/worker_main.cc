#include "worker/worker_main.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <typeinfo>

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

void RunTask(const proto::TaskSpec& spec, const rpc::Responder& responder) {
  proto::TaskResult result;
  const Invoker* invoker = FindInvoker(spec.function_name());
  if (invoker == nullptr) {
    result.set_error("this worker's binary has no remote function named \"" +
                     spec.function_name() +
                     "\": register it with SHOAL_REMOTE in the program");
    result.set_error_type("shoal::UnknownFunction");
  } else {
    std::vector<std::string_view> args(spec.args().begin(), spec.args().end());
    int64_t start = MonotonicUs();
    try {
      result.set_value((*invoker)(args));
      result.set_ok(true);
    } catch (const std::exception& e) {
      result.set_error(e.what());
      result.set_error_type(typeid(e).name());
    } catch (...) {
      result.set_error("unknown exception (not derived from std::exception)");
    }
    result.set_exec_us(MonotonicUs() - start);
  }
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
