#include "worker/worker_main.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <thread>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "api/core_runtime.h"
#include "api/object_client.h"
#include "api/task_context.h"
#include "common/cancel_token.h"
#include "common/clock.h"
#include "common/environment.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/process.h"
#include "common/task_event_record.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"
#include "worker/actor_host.h"
#include "worker/foreign_runtime.h"
#include "worker/function_registry.h"
#include "worker/running_tasks.h"

namespace shoal::internal {

namespace {

// The node's object store, connected on first use. Null (and the error
// kept) when the node has none.
absl::StatusOr<std::shared_ptr<ObjectClient>>& Store() {
  static absl::StatusOr<std::shared_ptr<ObjectClient>> client =
      absl::UnavailableError("not connected");
  static bool tried = false;
  if (!tried) {
    tried = true;
    client = ObjectClient::Connect(env::Get(env::Var::kAgentAddress),
                                   env::Get(env::Var::kToken),
                                   "worker " + env::Get(env::Var::kWorkerId));
    if (!client.ok()) {
      SHOAL_LOG(WARNING) << "no object store on this node: " << client.status();
    }
  }
  return client;
}

// Maps the stored arguments from this node's store (pulling them here
// first). Fills `result` with the error when one cannot be had.
bool ResolveArgs(
    const google::protobuf::RepeatedPtrField<std::string>& inline_args,
    const google::protobuf::Map<int32_t, proto::StoredObject>& stored_args,
    std::vector<ObjectValue>* args, proto::TaskResult* result) {
  args->reserve(inline_args.size());
  for (int i = 0; i < inline_args.size(); ++i) {
    auto stored = stored_args.find(i);
    if (stored == stored_args.end()) {
      args->push_back({inline_args.Get(i), false, nullptr});
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

// The loop of this worker (for replies from an actor's threads).
rpc::EventLoop* g_loop = nullptr;

// Set when this worker's functions are another language's (RunForeignWorker).
ForeignRuntime* g_foreign = nullptr;

// Reports tasks that run long (null: task events are off).
RunningTasks* g_running = nullptr;

// Ends what this worker started (a task's subprocesses, a launch's ranks:
// they carry its SHOAL_WORKER_ID), then the worker: when it ends on its
// own (its agent gone, or SIGTERM), nothing it started outlives it.
[[noreturn]] void EndWorker(const std::string& worker_id, int code) {
  for (int64_t pid : ProcessesWithEnvironment("SHOAL_WORKER_ID", worker_id)) {
    if (pid != getpid()) kill(static_cast<pid_t>(pid), SIGKILL);
  }
  _exit(code);
}

// Cancels (shoal::Cancel), which the agent sends as SIGUSR1 with the task's
// token (common/cancel_token.h): the token of the task that runs on the
// loop (main) thread now (0: none), and those of tasks cancelled before they
// began (pushed behind the running one), the last kMaxCancelledEarly.
constexpr char kCancelledType[] = "shoal::TaskCancelled";
constexpr size_t kMaxCancelledEarly = 1024;
std::atomic<int32_t> g_running_token{0};
shoal::Mutex g_cancel_mu;
std::deque<int32_t> g_cancelled_early ABSL_GUARDED_BY(g_cancel_mu);

bool TakeCancelledEarly(int32_t token) {
  shoal::MutexLock lock(&g_cancel_mu);
  auto it =
      std::find(g_cancelled_early.begin(), g_cancelled_early.end(), token);
  if (it == g_cancelled_early.end()) return false;
  g_cancelled_early.erase(it);
  return true;
}

// The task of `token` (0: one that cannot be cancelled, an actor call)
// begins: false, with *result saying so, when it was cancelled already.
bool BeginCancellable(int32_t token, proto::TaskResult* result) {
  if (token == 0) return true;
  if (TakeCancelledEarly(token)) {
    result->set_error("the task was cancelled before it began");
    result->set_error_type(kCancelledType);
    return false;
  }
  SetCurrentTaskCancelled(false);
  g_running_token.store(token);
  return true;
}

// It ended: however (KeyboardInterrupt, or an error raised while it
// unwound), a task asked to stop that did not finish was cancelled.
void EndCancellable(int32_t token, proto::TaskResult* result) {
  if (token == 0) return;
  g_running_token.store(0);
  if (CurrentTaskCancelled() && !result->ok()) {
    result->set_error_type(kCancelledType);
  }
}

// On the signal thread, for a SIGUSR1 carrying a CancelSignal: the running
// task is interrupted (a Python task raises KeyboardInterrupt; a blocking
// get in it returns), or a task not begun yet answers cancelled when its
// turn comes. A recursive cancel of the running task first cancels what
// it submitted (which this process owns), with force when the worker is
// to end; the worker then ends if asked to.
void RequestCancel(int32_t value, const std::string& worker_id) {
  const CancelSignal how = CancelSignal::Decode(value);
  if (how.token != 0 && g_running_token.load() == how.token) {
    // Set first, so that a child's cancellation the task sees counts as
    // its own.
    SetCurrentTaskCancelled(true);
    if (how.recursive) CancelChildrenHere(how.token, /*force=*/how.then_exit);
    if (how.then_exit) EndWorker(worker_id, 0);
    if (g_foreign != nullptr) g_foreign->InterruptTask();
    return;
  }
  if (how.then_exit) EndWorker(worker_id, 0);
  shoal::MutexLock lock(&g_cancel_mu);
  g_cancelled_early.push_back(how.token);
  if (g_cancelled_early.size() > kMaxCancelledEarly) {
    g_cancelled_early.pop_front();
  }
}

// Runs `call`, recording in `result` how it ended.
void RunCaught(const std::function<void()>& call, proto::TaskResult* result) {
  try {
    call();
  } catch (const ForeignError& e) {
    result->set_error(e.what());
    result->set_error_type(e.type());
    result->set_error_data(e.data());
  } catch (const std::exception& e) {
    result->set_error(e.what());
    result->set_error_type(typeid(e).name());
  } catch (...) {
    result->set_error("unknown exception (not derived from std::exception)");
  }
}

// Runs one task or actor call and says how it went.
proto::TaskResult Execute(const proto::TaskSpec& spec, bool* exit_after) {
  proto::TaskResult result;
  SetCurrentTaskDepth(spec.depth());
  // The task's id while it runs on this thread (get_task_id()).
  struct RunningId {
    explicit RunningId(const std::string& id) { SetCurrentTaskId(id); }
    ~RunningId() { SetCurrentTaskId(""); }
  } running_id(spec.task_id());
  ActorHost* host = nullptr;
  std::function<ObjectValue(const std::vector<ObjectValue>&)> run;
  if (!spec.actor_id().empty()) {
    host = ActorHost::Current();
    if (host == nullptr || host->actor_id() != spec.actor_id()) {
      result.set_error(
          absl::StrCat("this worker does not hold actor ", spec.actor_id()));
      result.set_error_type("shoal::ActorDied");
      return result;
    }
    const MethodInvoker* method =
        g_foreign != nullptr ? nullptr : FindActorMethod(spec.function_name());
    if (g_foreign != nullptr) {
      run = [host, &spec](const std::vector<ObjectValue>& args) {
        return g_foreign->CallMethod(host->instance(), spec.function_name(),
                                     args);
      };
    } else if (method != nullptr) {
      run = [method, host](const std::vector<ObjectValue>& args) {
        return (*method)(host->instance(), args);
      };
    } else {
      result.set_error("this actor's binary has no method named \"" +
                       spec.function_name() +
                       "\": register it with SHOAL_REMOTE(&Class::Method)");
      result.set_error_type("shoal::UnknownFunction");
      return result;
    }
  } else if (g_foreign != nullptr) {
    run = [&spec](const std::vector<ObjectValue>& args) {
      return g_foreign->Call(spec.function_name(), args);
    };
  } else {
    const Invoker* invoker = FindInvoker(spec.function_name());
    if (invoker == nullptr) {
      result.set_error("this worker's binary has no remote function named \"" +
                       spec.function_name() +
                       "\": register it with SHOAL_REMOTE in the program");
      result.set_error_type("shoal::UnknownFunction");
      return result;
    }
    run = *invoker;
  }
  std::vector<ObjectValue> args;
  if (!ResolveArgs(spec.args(), spec.stored_args(), &args, &result)) {
    return result;
  }
  // A plain task (on the loop thread) may be cancelled while it runs.
  const int32_t token = host == nullptr ? CancelToken(spec.task_id()) : 0;
  if (!BeginCancellable(token, &result)) return result;
  int64_t start = MonotonicUs();
  result.set_start_time_ms(NowMs());
  if (g_running != nullptr) g_running->Begin(&spec, result.start_time_ms());
  TakeLentRefs();  // none from before
  RunCaught(
      [&] {
        try {
          ObjectValue value = run(args);
          result.set_exec_us(MonotonicUs() - start);
          for (auto& [id, owner] : TakeLentRefs()) {
            proto::BorrowedRef* lent = result.add_borrowed();
            lent->set_object_id(std::move(id));
            lent->set_owner_address(std::move(owner));
          }
          absl::Status stored = StoreResult(spec, value, &result);
          if (stored.ok()) {
            result.set_ok(true);
            if (g_foreign != nullptr && host == nullptr &&
                g_foreign->TakeExitAfterCall()) {
              result.set_worker_exiting(true);
              *exit_after = true;
            }
          } else {
            result.set_error(absl::StrCat("the result could not be stored: ",
                                          stored.message()));
            result.set_error_type("shoal::ObjectStoreFull");
          }
        } catch (const ActorExitRequested& e) {
          result.set_error(e.message);
          result.set_error_type("shoal::ActorExited");
          *exit_after = true;
        }
      },
      &result);
  EndCancellable(token, &result);
  if (result.exec_us() == 0) result.set_exec_us(MonotonicUs() - start);
  if (g_running != nullptr) g_running->End(&spec);
  args.clear();  // unpins the arguments before the owner hears back
  return result;
}

// Answers on the loop thread; an actor that called ExitActor, or a worker
// whose function reached its max_calls, ends here, once its answer is
// written.
void Answer(const rpc::Responder& responder, const proto::TaskResult& result,
            bool exit_after) {
  responder.ReplyNow(result);
  if (exit_after) {
    SHOAL_LOG(INFO) << (result.worker_exiting()
                            ? "the function reached its max_calls; exiting"
                            : "the actor called shoal::ExitActor(); exiting");
    _exit(0);
  }
}

void RunTask(const proto::TaskSpec& spec, const rpc::Responder& responder) {
  ActorHost* host = ActorHost::Current();
  if (host != nullptr && host->threaded() && !spec.actor_id().empty()) {
    host->Run([spec, responder] {
      bool exit_after = false;
      proto::TaskResult result = Execute(spec, &exit_after);
      g_loop->Post([responder, result = std::move(result), exit_after] {
        Answer(responder, result, exit_after);
      });
    });
    return;
  }
  bool exit_after = false;
  proto::TaskResult result = Execute(spec, &exit_after);
  Answer(responder, result, exit_after);
}

// The head makes this worker's actor: its factory with its arguments.
void CreateActorInstance(const proto::ActorCreation& creation,
                         const rpc::Responder& responder) {
  const proto::ActorSpec& spec = creation.spec();
  proto::TaskResult result;
  SetCurrentTaskDepth(spec.depth());
  const FactoryInvoker* factory =
      g_foreign != nullptr ? nullptr : FindActorFactory(spec.factory());
  std::vector<ObjectValue> args;
  if (ActorHost::Current() != nullptr) {
    result.set_error(absl::StrCat("this worker already holds actor ",
                                  ActorHost::Current()->actor_id()));
  } else if (factory == nullptr && g_foreign == nullptr) {
    result.set_error("this worker's binary has no actor factory named \"" +
                     spec.factory() +
                     "\": register it with SHOAL_REMOTE in the program");
    result.set_error_type("shoal::UnknownFunction");
  } else if (ResolveArgs(spec.args(), spec.stored_args(), &args, &result)) {
    int64_t start = MonotonicUs();
    // What the constructor creates is this actor's own.
    SetProcessActorId(spec.actor_id());
    RunCaught(
        [&] {
          ActorInstance instance =
              g_foreign != nullptr ? g_foreign->Construct(spec.factory(), args)
                                   : (*factory)(args);
          ActorHost::Install(
              std::make_unique<ActorHost>(spec.actor_id(), std::move(instance),
                                          std::max(1, spec.max_concurrency()),
                                          creation.num_restarts() > 0));
          result.set_ok(true);
          SetLogComponent(absl::StrCat("worker ", env::Get(env::Var::kWorkerId),
                                       " actor ", spec.actor_id()));
        },
        &result);
    result.set_exec_us(MonotonicUs() - start);
  }
  args.clear();
  responder.ReplyNow(result);
}

// A head that restarted takes up the actor it had here.
void AdoptActor(const proto::ActorExitingRequest& r,
                const rpc::Responder& responder) {
  const ActorHost* host = ActorHost::Current();
  if (host == nullptr || host->actor_id() != r.actor_id()) {
    return responder.Error(absl::FailedPreconditionError(
        absl::StrCat("worker ", env::Get(env::Var::kWorkerId), " holds ",
                     host == nullptr ? std::string("no actor")
                                     : absl::StrCat("actor ", host->actor_id()),
                     ", not actor ", r.actor_id())));
  }
  SHOAL_LOG(INFO) << "the head took up actor " << r.actor_id() << " again";
  responder.Reply(proto::Empty());
}

// The main thread runs the tasks (Python keeps signal handlers, and more,
// to the main thread, and Ray runs tasks there), so signals are served by
// a thread of their own:
// - SIGTERM and SIGINT (blocked in every thread this process starts) end
//   the worker;
// - SIGUSR1, a cancel, is sent to the main thread (rt_tgsigqueueinfo: a
//   thread a library started would die of it). A handler there passes its
//   value through a pipe, since a cancel must be served while the task
//   runs.
int g_cancel_pipe[2] = {-1, -1};

void OnCancelSignal(int, siginfo_t* info, void*) {
  const int saved = errno;
  int32_t value = info->si_value.sival_int;
  ssize_t n = write(g_cancel_pipe[1], &value, sizeof(value));
  (void)n;  // a full pipe (64 KiB of cancels) drops this one
  errno = saved;
}

void ServeSignals(const std::string& worker_id, int stop_fd) {
  pollfd fds[2] = {{g_cancel_pipe[0], POLLIN, 0}, {stop_fd, POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) continue;  // EINTR
    int32_t value;
    while (read(g_cancel_pipe[0], &value, sizeof(value)) ==
           static_cast<ssize_t>(sizeof(value))) {
      RequestCancel(value, worker_id);
    }
    signalfd_siginfo info;
    if (read(stop_fd, &info, sizeof(info)) ==
        static_cast<ssize_t>(sizeof(info))) {
      EndWorker(worker_id, 0);
    }
  }
}

}  // namespace

int RunWorker() {
  std::string worker_id = env::Get(env::Var::kWorkerId);
  internal::SetLogComponent("worker " + worker_id);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGUSR1);  // unblocked below, on this thread only
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  // The agent starts workers to be killed with it (PR_SET_PDEATHSIG,
  // SIGKILL); SIGTERM instead lets the worker end what it started first.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  sigset_t ends = stop;  // what ends the worker, read from a signalfd
  sigdelset(&ends, SIGUSR1);
  const int stop_fd = signalfd(-1, &ends, SFD_NONBLOCK | SFD_CLOEXEC);
  if (stop_fd < 0 || pipe2(g_cancel_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
    SHOAL_LOG(ERROR) << "worker cannot watch signals: " << strerror(errno);
    return 1;
  }
  std::thread(ServeSignals, worker_id, stop_fd).detach();
  struct sigaction cancel = {};
  cancel.sa_sigaction = OnCancelSignal;
  cancel.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&cancel.sa_mask);
  sigaction(SIGUSR1, &cancel, nullptr);
  sigset_t cancels;
  sigemptyset(&cancels);
  sigaddset(&cancels, SIGUSR1);
  pthread_sigmask(SIG_UNBLOCK, &cancels, nullptr);

  auto loop = rpc::EventLoop::CreateUnstarted();
  if (!loop.ok()) {
    SHOAL_LOG(ERROR) << loop.status();
    return 1;
  }
  g_loop = loop->get();
  if (TaskEventsIntervalMs() > 0) {
    g_running = new RunningTasks({.head_address = env::Get(env::Var::kAddress),
                                  .token = env::Get(env::Var::kToken),
                                  .job_id = env::Get(env::Var::kJobId),
                                  .node_id = env::Get(env::Var::kNodeId),
                                  .worker_id = worker_id,
                                  .interval_ms = TaskEventsIntervalMs()});
  }
  std::unique_ptr<rpc::Server> server;
  std::unique_ptr<rpc::Channel> agent;
  std::string token = env::Get(env::Var::kToken);
  (*loop)->Post([&] {
    auto s =
        rpc::Server::Create(loop->get(), env::Get(env::Var::kNodeIp), 0, token);
    if (!s.ok()) {
      SHOAL_LOG(ERROR) << "worker cannot listen: " << s.status();
      _exit(1);
    }
    server = std::move(*s);
    rpc::RegisterProto<proto::TaskSpec>(server.get(), proto::PUSH_TASK,
                                        RunTask);
    rpc::RegisterProto<proto::ActorCreation>(
        server.get(), proto::CREATE_ACTOR_INSTANCE, CreateActorInstance);
    rpc::RegisterProto<proto::ActorExitingRequest>(
        server.get(), proto::ADOPT_ACTOR, AdoptActor);
    agent = std::make_unique<rpc::TcpChannel>(loop->get(),
                                              env::Get(env::Var::kAgentAddress),
                                              token, "worker " + worker_id);
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
    agent->OnDisconnect([worker_id](const absl::Status& why) {
      SHOAL_LOG(WARNING) << "node agent gone (" << why << "); exiting";
      EndWorker(worker_id, 0);
    });
  });
  (*loop)->RunHere();  // until the worker ends (_exit)
  EndWorker(worker_id, 0);
}

int RunForeignWorker(ForeignRuntime* runtime) {
  g_foreign = runtime;
  return RunWorker();
}

}  // namespace shoal::internal
