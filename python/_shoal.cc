// _shoal: the native half of the Python frontend (docs/design/python.md).
// A thin binding of the C++ runtime: joining a cluster, raw-byte objects
// (put_pieces copies each piece once into shared memory; get maps objects
// without a copy), wait, tasks and actors whose functions are Python
// (named by their key in the head's key-value store), the key-value store,
// placement groups, the cluster's resources, and the worker loop that
// `python -m shoal.worker` runs. The `shoal` package builds Ray's API on it.
//
// Every call that may block releases the GIL; the worker's threads take it
// to run Python.
#include <google/protobuf/util/json_util.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "api/core_runtime.h"
#include "api/driver_init.h"
#include "api/driver_warnings.h"
#include "api/submit_options.h"
#include "api/task_context.h"
#include "api/task_error.h"
#include "common/clock.h"
#include "common/environment.h"
#include "common/net.h"
#include "common/process.h"
#include "common/version.h"
#include "head_client/head_client.h"
#include "shoal/api.h"
#include "shoal/shoal.pb.h"
#include "worker/actor_host.h"
#include "worker/foreign_runtime.h"

namespace py = pybind11;

namespace {

using BufferRef = shoal::ObjectRef<shoal::Buffer>;
using shoal::internal::ObjectValue;

// The bytes of a stored object, mapped where they lie: the node's shared
// memory for a large object. While this (or a memoryview of it) lives, the
// object stays pinned.
struct StoredBytes {
  shoal::Buffer buffer;
};

// The driver's account of task results nobody read (Ray's "Unhandled
// error" line, shoal/_errors.py): a result's ref is watched from submit;
// get() marks it read; when its last copy goes unread its id is queued for
// the error stream, which prints the line if the task failed. Kept here,
// not in Python, as it runs for every task: the flag lives in the deleter
// of the ref's own control block, so watching costs no lookup. Any thread
// may drop a ref (a task's argument is released on the runtime's loop);
// the queue has a mutex.
class UnreadResults {
 public:
  using Handle = std::shared_ptr<shoal::internal::RefHandle>;

  static UnreadResults& Get() {
    static auto* results = new UnreadResults;  // never destroyed
    return *results;
  }

  void SetOn(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    on_.store(on, std::memory_order_relaxed);
    dropped_.clear();
  }

  // `handle` as the ref to hand out: watched while any copy of it lives.
  Handle Watch(Handle handle) {
    if (!on_.load(std::memory_order_relaxed) || handle == nullptr) {
      return handle;
    }
    shoal::internal::RefHandle* raw = handle.get();
    std::shared_ptr<Handle> owner(new Handle(std::move(handle)), Watcher());
    return Handle(owner, raw);  // shares the owner's control block
  }

  // Called with the GIL held. The flag needs no lock: the drop that reads
  // it comes after every copy's release, which orders it after this.
  static void MarkRead(const std::vector<BufferRef>& refs) {
    for (const BufferRef& ref : refs) {
      if (auto* watcher = std::get_deleter<Watcher>(ref.handle())) {
        watcher->read = true;
      }
    }
  }

  // The ids dropped unread since the last call, oldest first.
  std::vector<std::string> TakeDropped() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out(dropped_.begin(), dropped_.end());
    dropped_.clear();
    return out;
  }

 private:
  static constexpr size_t kMaxDropped = 10000;

  // The deleter of a watched ref's owner: runs when its last copy goes.
  struct Watcher {
    bool read = false;
    void operator()(Handle* last) const {
      if (!read) Get().Dropped((*last)->id());
      delete last;
    }
  };

  void Dropped(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!on_.load(std::memory_order_relaxed)) return;
    dropped_.push_back(id);
    if (dropped_.size() > kMaxDropped) dropped_.pop_front();
  }

  std::mutex mu_;
  std::atomic<bool> on_{false};
  std::deque<std::string> dropped_;
};

// Python exception types raised for the C++ errors that carry more than a
// message (set when the module loads).
PyObject* g_remote_error = nullptr;

void Init(const std::string& address, const std::string& token,
          const std::string& temp_dir, double num_cpus,
          const std::map<std::string, double>& resources,
          const std::string& cluster_program,
          const std::vector<std::string>& worker_argv,
          const std::map<std::string, std::string>& worker_env,
          const std::string& cpp_program, int dashboard_port,
          const std::string& version) {
  shoal::InitOptions options;
  options.address = address;
  options.token = token;
  options.temp_dir = temp_dir;
  options.num_cpus = num_cpus;
  options.resources = resources;
  options.dashboard_port = dashboard_port;
  shoal::internal::DriverProgram program;
  program.cluster_program = cluster_program;
  program.workers_run_this_program = false;
  program.worker_command.argv = worker_argv;
  program.worker_command.env = worker_env;
  program.cpp_program = cpp_program;
  program.version = version;
  py::gil_scoped_release release;
  shoal::internal::InitDriver(options, program);
}

// Stores an object of `size` bytes made of (offset, buffer) pieces, each
// copied once (straight into shared memory when the object is large).
BufferRef PutPieces(const std::vector<std::pair<size_t, py::buffer>>& pieces,
                    size_t size) {
  std::vector<py::buffer_info> infos;
  std::vector<shoal::internal::BufferPiece> parts;
  infos.reserve(pieces.size());
  for (const auto& [offset, buffer] : pieces) {
    infos.push_back(buffer.request());
    const py::buffer_info& info = infos.back();
    if (info.ndim > 1 && info.strides.back() != info.itemsize) {
      throw py::value_error("put: the buffers must be contiguous");
    }
    parts.push_back(
        {offset,
         std::string_view(static_cast<const char*>(info.ptr),
                          static_cast<size_t>(info.size * info.itemsize))});
  }
  py::gil_scoped_release release;
  return BufferRef(shoal::internal::PutPieces(parts, size));
}

// An object's value as Python reads it: a Python value's stored bytes
// (raw, or msgpack binary when inline) as StoredBytes, pinning the object
// while it lives, and any other msgpack value (a C++ program's) as
// ("msgpack", bytes). An inline value is copied into bytes when
// `copy_inline` (an argument lives in the task's message only while the
// call runs, and the function may keep it), or when it holds no
// out-of-band buffer (its stored form's buffer count, after the 4-byte
// magic, is 0): a small value then costs a bytes object, not a StoredBytes
// instance, and nothing can be a view of it.
py::object ValueObject(const ObjectValue& v, bool copy_inline) {
  auto first = static_cast<uint8_t>(v.data.empty() ? 0 : v.data[0]);
  bool binary = !v.raw && first >= 0xc4 && first <= 0xc6;  // msgpack bin
  if (!v.raw && !binary) {
    return py::make_tuple("msgpack", py::bytes(v.data.data(), v.data.size()));
  }
  shoal::Buffer buffer = shoal::internal::UnpackValue<shoal::Buffer>(v);
  const auto* data = reinterpret_cast<const char*>(buffer.data());
  const bool no_buffers =
      !v.raw && buffer.size() >= 8 &&
      std::string_view(data + 4, 4) == std::string_view("\0\0\0\0", 4);
  if (no_buffers || (copy_inline && v.keepalive == nullptr)) {
    return py::bytes(data, buffer.size());
  }
  return py::cast(StoredBytes{std::move(buffer)});
}

// How long a blocking get or wait sleeps between looks at the signals.
constexpr int64_t kSignalSliceMs = 100;

// Runs `wait(ms)`, which blocks up to `ms` (-1: without end) with the GIL
// released and answers whether it is done, in slices of kSignalSliceMs when
// `interruptible`, taking the GIL between them to run the signal handlers:
// Ctrl-C raises KeyboardInterrupt and a SIGALRM handler runs while a get
// blocks. A handler's exception ends the wait (error_already_set). False
// when `timeout_ms` passed first.
// In a Python worker, with the GIL held: whether the task this thread runs
// was cancelled, so that its blocking get raises KeyboardInterrupt.
bool TaskCancelledHere();
bool InPythonWorker();

// In a worker, a get always waits in slices: its task may be cancelled.
template <typename WaitFn>
bool WaitInSlices(int64_t timeout_ms, bool interruptible, WaitFn wait) {
  if (!interruptible && !InPythonWorker()) {
    py::gil_scoped_release release;
    return wait(timeout_ms);
  }
  const int64_t deadline_ms =
      timeout_ms < 0 ? -1 : shoal::MonotonicUs() / 1000 + timeout_ms;
  // A worker that waits past its first slice counts as blocked for the whole
  // wait, not once per slice (each slice's wait says so too, nested).
  struct Blocked {
    ~Blocked() {
      if (held) shoal::internal::RequireRuntime()->SetBlocked(false);
    }
    bool held = false;
  } blocked;
  while (true) {
    int64_t slice = kSignalSliceMs;
    if (deadline_ms >= 0) {
      slice = std::clamp<int64_t>(deadline_ms - shoal::MonotonicUs() / 1000, 0,
                                  kSignalSliceMs);
    }
    bool done;
    {
      py::gil_scoped_release release;
      done = wait(slice);
    }
    if (done) return true;
    if (!blocked.held && InPythonWorker()) {
      shoal::internal::RequireRuntime()->SetBlocked(true);
      blocked.held = true;
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (TaskCancelledHere()) {
      PyErr_SetNone(PyExc_KeyboardInterrupt);
      throw py::error_already_set();
    }
    if (deadline_ms >= 0 && shoal::MonotonicUs() / 1000 >= deadline_ms) {
      return false;
    }
  }
}

// The objects' values: a Python value's stored bytes (raw, or msgpack
// binary when inline) as StoredBytes mapped without a copy, and any other
// msgpack value (a C++ function's result) as ("msgpack", bytes).
// `interruptible`: signal handlers run while it blocks (WaitInSlices).
py::list Get(const std::vector<BufferRef>& refs, int64_t timeout_ms,
             bool interruptible, bool read) {
  if (read) UnreadResults::MarkRead(refs);
  std::vector<ObjectValue> values;
  values.reserve(refs.size());
  const int64_t deadline_ms =
      timeout_ms < 0 ? -1 : shoal::MonotonicUs() / 1000 + timeout_ms;
  for (const BufferRef& ref : refs) {
    int64_t left =
        deadline_ms < 0
            ? -1
            : std::max<int64_t>(0, deadline_ms - shoal::MonotonicUs() / 1000);
    bool got = WaitInSlices(left, interruptible, [&](int64_t ms) {
      try {
        values.push_back(shoal::internal::GetObject(*ref.handle(), ms));
        return true;
      } catch (const shoal::TimeoutError&) {
        return false;
      }
    });
    if (!got) {
      throw shoal::TimeoutError("Get timed out: object " + ref.id() +
                                " was not ready in " +
                                std::to_string(timeout_ms) + " ms");
    }
  }
  py::list out;
  for (const ObjectValue& v : values) out.append(ValueObject(v, false));
  return out;
}

bool Cancel(const BufferRef& ref, bool force, bool recursive) {
  py::gil_scoped_release release;
  return shoal::internal::CancelTask(*ref.handle(), force, recursive);
}

std::vector<size_t> Wait(const std::vector<BufferRef>& refs, size_t num_returns,
                         int64_t timeout_ms, bool interruptible) {
  std::vector<const shoal::internal::RefHandle*> handles;
  handles.reserve(refs.size());
  for (const BufferRef& ref : refs) handles.push_back(ref.handle().get());
  std::vector<size_t> ready;
  WaitInSlices(timeout_ms, interruptible, [&](int64_t ms) {
    ready = shoal::internal::WaitReady(handles, num_returns, ms);
    return ready.size() >= num_returns;
  });
  return ready;
}

// A task's arguments: each an ObjectRef (resolved before the task runs, on
// whichever node) or a small serialized value, copied here: raw bytes for a
// Python function, msgpack for a C++ one (`raw` false).
std::vector<shoal::internal::TaskArg> TaskArgs(const py::list& args,
                                               bool raw = true) {
  std::vector<shoal::internal::TaskArg> out;
  out.reserve(args.size());
  for (const py::handle& arg : args) {
    shoal::internal::TaskArg task_arg;
    if (py::isinstance<BufferRef>(arg)) {
      task_arg.ref = arg.cast<const BufferRef&>().handle();
    } else {
      py::buffer_info info = py::reinterpret_borrow<py::buffer>(arg).request();
      auto bytes = std::make_shared<std::string>(
          static_cast<const char*>(info.ptr),
          static_cast<size_t>(info.size * info.itemsize));
      task_arg.value = ObjectValue{*bytes, raw, bytes};
    }
    out.push_back(std::move(task_arg));
  }
  return out;
}

// The resources a task or actor of `resources` holds, as agents name them
// (in a placement group, the group's and its bundle's).
std::map<std::string, double> ShapeOf(
    const std::map<std::string, double>& resources,
    const std::string& placement_group_id, int bundle_index) {
  auto shape =
      shoal::internal::ShapeFor(resources, placement_group_id, bundle_index);
  if (!shape.ok()) throw shoal::Error(std::string(shape.status().message()));
  std::map<std::string, double> out;
  for (const auto& [name, amount] : shape->amounts()) {
    out[name] = shape->GetDouble(name);
  }
  return out;
}

BufferRef Submit(const std::string& function, const py::list& args,
                 const std::map<std::string, double>& resources,
                 int max_retries, const std::string& placement_group_id,
                 int bundle_index, bool cpp,
                 const std::map<std::string, std::string>& label_selector,
                 bool label_selector_soft, bool worker_may_end, bool watch) {
  shoal::internal::TaskOptions options;
  options.worker_may_end = worker_may_end;
  options.label_selector = label_selector;
  options.label_selector_soft = label_selector_soft;
  options.resources = resources;
  options.max_retries = max_retries;
  options.placement_group_id = placement_group_id;
  options.bundle_index = bundle_index;
  options.in_cpp_program = cpp;
  std::vector<shoal::internal::TaskArg> task_args = TaskArgs(args, !cpp);
  py::gil_scoped_release release;
  auto handle =
      shoal::internal::SubmitTask(function, std::move(task_args), options);
  return BufferRef(watch ? UnreadResults::Get().Watch(std::move(handle))
                         : std::move(handle));
}

std::string CreateActor(
    const std::string& factory, const std::string& class_name,
    const py::list& args, const std::string& name,
    const std::map<std::string, double>& resources, int max_restarts,
    int max_task_retries, int max_concurrency, bool detached,
    const std::string& placement_group_id, int bundle_index,
    const std::map<std::string, std::string>& label_selector,
    bool label_selector_soft) {
  shoal::internal::ActorOptions options;
  options.label_selector = label_selector;
  options.label_selector_soft = label_selector_soft;
  options.name = name;
  options.resources = resources;
  options.max_restarts = max_restarts;
  options.max_task_retries = max_task_retries;
  options.max_concurrency = max_concurrency;
  options.detached = detached;
  options.placement_group_id = placement_group_id;
  options.bundle_index = bundle_index;
  std::vector<shoal::internal::TaskArg> task_args = TaskArgs(args);
  py::gil_scoped_release release;
  return shoal::internal::CreateActor(factory, class_name, std::move(task_args),
                                      options);
}

BufferRef SubmitActorTask(const std::string& actor_id,
                          const std::string& method, const py::list& args,
                          bool watch) {
  std::vector<shoal::internal::TaskArg> task_args = TaskArgs(args);
  py::gil_scoped_release release;
  auto handle =
      shoal::internal::SubmitActorTask(actor_id, method, std::move(task_args));
  return BufferRef(watch ? UnreadResults::Get().Watch(std::move(handle))
                         : std::move(handle));
}

// The live actor named `name` as (actor id, factory key, class name, state),
// or None.
py::object GetActor(const std::string& name) {
  shoal::proto::GetActorRequest req;
  req.set_name(name);
  absl::StatusOr<shoal::proto::ActorInfo> found;
  {
    py::gil_scoped_release release;
    found = shoal::internal::RequireRuntime()->head().GetActor(req);
  }
  if (absl::IsNotFound(found.status())) return py::none();
  if (!found.ok()) {
    throw shoal::Error("cannot look up actor \"" + name +
                       "\": " + std::string(found.status().message()));
  }
  if (found->state() == shoal::proto::ActorInfo::DEAD) return py::none();
  return py::make_tuple(found->spec().actor_id(), found->spec().factory(),
                        found->spec().class_name());
}

// The head's key-value store. `user_ns` None: Shoal's own space (function
// and class blobs); bytes: the users' space (Ray's internal_kv) in that
// namespace. Keys are bytes (a str is its UTF-8).
shoal::proto::KvSpace KvSpaceOf(const std::optional<std::string>& user_ns) {
  shoal::proto::KvSpace space;
  if (user_ns.has_value()) {
    space.set_user(true);
    space.set_ns(*user_ns);
  }
  return space;
}

// Runs one call to the head's key-value store without the GIL; its error
// says what failed, with the key escaped (any bytes may be in it).
template <typename Reply, typename Call>
Reply KvCall(const char* what, const std::string& key, Call call) {
  absl::StatusOr<Reply> reply;
  {
    py::gil_scoped_release release;
    reply = call(shoal::internal::RequireRuntime()->head());
  }
  if (!reply.ok()) {
    throw shoal::Error(absl::StrCat(
        "cannot ", what, " \"", absl::CHexEscape(key),
        "\" in the head's key-value store: ", reply.status().message()));
  }
  return *std::move(reply);
}

bool KvPut(const std::string& key, const py::bytes& value, bool overwrite,
           const std::optional<std::string>& user_ns) {
  shoal::proto::KvPutRequest req;
  req.set_key(key);
  req.set_value(std::string(value));
  req.set_overwrite(overwrite);
  *req.mutable_space() = KvSpaceOf(user_ns);
  return KvCall<shoal::proto::KvPutReply>(
             "store", key,
             [&](shoal::rpc::HeadClient& head) { return head.KvPut(req); })
      .added();
}

py::object KvGet(const std::string& key,
                 const std::optional<std::string>& user_ns) {
  shoal::proto::KvGetRequest req;
  req.set_key(key);
  *req.mutable_space() = KvSpaceOf(user_ns);
  auto reply = KvCall<shoal::proto::KvGetReply>(
      "read", key,
      [&](shoal::rpc::HeadClient& head) { return head.KvGet(req); });
  if (!reply.found()) return py::none();
  return py::bytes(reply.value());
}

int64_t KvDel(const std::string& key, bool by_prefix,
              const std::optional<std::string>& user_ns) {
  shoal::proto::KvDelRequest req;
  req.set_key(key);
  req.set_by_prefix(by_prefix);
  *req.mutable_space() = KvSpaceOf(user_ns);
  return KvCall<shoal::proto::KvDelReply>(
             "delete", key,
             [&](shoal::rpc::HeadClient& head) { return head.KvDel(req); })
      .deleted();
}

py::list KvKeys(const std::string& prefix,
                const std::optional<std::string>& user_ns) {
  shoal::proto::KvKeysRequest req;
  req.set_prefix(prefix);
  *req.mutable_space() = KvSpaceOf(user_ns);
  auto reply = KvCall<shoal::proto::KvKeysReply>(
      "list the keys under", prefix,
      [&](shoal::rpc::HeadClient& head) { return head.KvKeys(req); });
  py::list keys;
  for (const std::string& key : reply.keys()) keys.append(py::bytes(key));
  return keys;
}

// The head's records of the tasks that match every KEY=VALUE filter
// (job_id, state, ...), at most `limit` of them, each a dict of its fields.
py::list ListTasks(const std::vector<std::string>& filters, int limit) {
  shoal::proto::ListTasksRequest req;
  for (const std::string& f : filters) req.add_filters(f);
  req.set_limit(limit);
  absl::StatusOr<shoal::proto::TaskList> list;
  {
    py::gil_scoped_release release;
    list = shoal::internal::RequireRuntime()->head().ListTasks(req);
  }
  if (!list.ok()) {
    throw shoal::Error("cannot list the head's tasks: " +
                       std::string(list.status().message()));
  }
  py::list out;
  for (const shoal::proto::TaskEvent& t : list->tasks()) {
    py::dict d;
    d["task_id"] = t.task_id();
    d["attempt"] = t.attempt();
    d["name"] = t.name();
    d["actor_id"] = t.actor_id();
    d["state"] = shoal::proto::TaskEvent::State_Name(t.state());
    d["node_id"] = t.node_id();
    d["worker_id"] = t.worker_id();
    d["error"] = t.error();
    d["error_type"] = t.error_type();
    d["job_id"] = t.job_id();
    int64_t ended = 0;
    for (int64_t ms : t.state_times_ms()) ended = std::max(ended, ms);
    d["time_ms"] = ended;
    out.append(d);
  }
  return out;
}

// The log files of node `node_id` ("": every alive node's) as
// (node id, name, size) tuples.
py::list ListLogs(const std::string& node_id) {
  shoal::proto::ListLogsRequest req;
  req.set_node_id(node_id);
  absl::StatusOr<shoal::proto::LogList> list;
  {
    py::gil_scoped_release release;
    list = shoal::internal::RequireRuntime()->head().ListLogs(req);
  }
  if (!list.ok()) {
    throw shoal::Error("cannot list the nodes' logs: " +
                       std::string(list.status().message()));
  }
  py::list out;
  for (const shoal::proto::LogFile& f : list->files()) {
    out.append(py::make_tuple(f.node_id(), f.name(), f.size()));
  }
  return out;
}

// Up to `max_bytes` of log `name` of node `node_id` from `offset`, as
// (bytes, next offset, the file's size).
py::tuple ReadLog(const std::string& node_id, const std::string& name,
                  int64_t offset, int64_t max_bytes) {
  shoal::proto::ReadLogRequest req;
  req.set_node_id(node_id);
  req.set_name(name);
  req.set_offset(offset);
  req.set_max_bytes(max_bytes);
  absl::StatusOr<shoal::proto::LogChunk> chunk;
  {
    py::gil_scoped_release release;
    chunk = shoal::internal::RequireRuntime()->head().ReadLog(req);
  }
  if (!chunk.ok()) {
    throw shoal::Error("cannot read log " + name + " of node " + node_id +
                       ": " + std::string(chunk.status().message()));
  }
  return py::make_tuple(py::bytes(chunk->data()), chunk->next_offset(),
                        chunk->size());
}

py::dict NodeDict(const shoal::NodeInfo& n) {
  py::dict d;
  d["NodeID"] = n.node_id;
  d["Address"] = n.address;
  d["NodeManagerAddress"] = n.address.substr(0, n.address.rfind(':'));
  d["NodeManagerHostname"] = n.hostname;
  d["Alive"] = n.alive;
  d["IsHeadNode"] = n.is_head_node;
  d["Resources"] = n.total;
  d["Available"] = n.available;
  // Shoal's labels also under Ray's names ("ray.io/tpu-slice-name"), as
  // code written for Ray reads them.
  py::dict labels;
  for (const auto& [key, value] : n.labels) {
    labels[py::str(key)] = value;
    if (key.rfind("shoal.io/", 0) == 0) {
      labels[py::str("ray.io/" + key.substr(9))] = value;
    }
  }
  d["Labels"] = labels;
  return d;
}

py::dict AssignedDevicesDict() {
  shoal::AssignedDevices held = shoal::GetAssignedDevices();
  py::dict d;
  d["kind"] = held.kind;
  d["ids"] = held.ids;
  d["accelerator_type"] = held.accelerator_type;
  d["slice_name"] = held.slice_name;
  d["worker_id"] = held.worker_id;
  return d;
}

// ---- The worker side: tasks, actors and methods run by Python ----

py::list ArgList(const std::vector<ObjectValue>& args) {
  py::list out;
  for (const ObjectValue& v : args) out.append(ValueObject(v, true));
  return out;
}

// What the package's runtime returns for a call: ("ok", pieces, size) with
// the result's (offset, buffer) pieces, ("error", text, type, data), or
// ("exit", text) when the actor ends after this call (exit_actor(),
// __ray_terminate__): the worker answers the call with `text` and exits.
bool IsOk(const py::tuple& outcome) {
  py::handle kind = outcome[0];
  return PyUnicode_Check(kind.ptr()) &&
         PyUnicode_CompareWithASCIIString(kind.ptr(), "ok") == 0;
}

ObjectValue Outcome(const py::tuple& outcome) {
  if (!IsOk(outcome)) {
    std::string kind = outcome[0].cast<std::string>();
    if (kind == "exit") {
      throw shoal::internal::ActorExitRequested{outcome[1].cast<std::string>()};
    }
    throw shoal::internal::ForeignError(outcome[1].cast<std::string>(),
                                        outcome[2].cast<std::string>(),
                                        outcome[3].cast<std::string>());
  }
  py::list pieces = outcome[1];
  size_t size = outcome[2].cast<size_t>();
  auto bytes = std::make_shared<std::string>(size, '\0');
  auto copy = [&](size_t offset, const void* data, size_t n) {
    if (offset > size || n > size - offset) {
      throw std::runtime_error("a result piece lies past the result's end");
    }
    memcpy(bytes->data() + offset, data, n);
  };
  for (py::handle item : pieces) {
    py::tuple piece = py::reinterpret_borrow<py::tuple>(item);
    const size_t offset = piece[0].cast<size_t>();
    py::handle data = piece[1];
    if (PyBytes_Check(data.ptr())) {  // the pickle stream and its head
      copy(offset, PyBytes_AS_STRING(data.ptr()),
           static_cast<size_t>(PyBytes_GET_SIZE(data.ptr())));
      continue;
    }
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(data).request();
    copy(offset, info.ptr, static_cast<size_t>(info.size * info.itemsize));
  }
  return ObjectValue{*bytes, true, bytes};
}

// Runs `fn` with the GIL held, turning a Python exception that escaped the
// package's own handling into a runtime error.
template <typename Fn>
auto WithGil(Fn fn) {
  py::gil_scoped_acquire gil;
  try {
    return fn();
  } catch (py::error_already_set& e) {
    throw std::runtime_error(std::string("the Python worker failed: ") +
                             e.what());
  }
}

// The package's worker runtime (shoal._worker.Runtime): its methods take
// and return what Outcome reads.
class PythonRuntime : public shoal::internal::ForeignRuntime {
 public:
  explicit PythonRuntime(py::object runtime) : runtime_(std::move(runtime)) {}
  ~PythonRuntime() override {
    py::gil_scoped_acquire gil;
    runtime_ = py::object();
  }

  // ("ok", pieces, size, True): the worker ends after this call.
  ObjectValue Call(const std::string& function,
                   const std::vector<ObjectValue>& args) override {
    return WithGil([&] {
      // While it runs (the GIL held), a cancel may interrupt it.
      call_thread_ = PyThread_get_thread_ident();
      interrupted_ = false;
      struct Calling {
        explicit Calling(bool* on) : on(on) { *on = true; }
        ~Calling() { *on = false; }
        bool* on;
      } calling(&calling_);
      py::tuple outcome = runtime_.attr("call")(function, ArgList(args));
      if (outcome.size() > 3 && IsOk(outcome) && outcome[3].cast<bool>()) {
        exit_after_call_ = true;
      }
      return Outcome(outcome);
    });
  }

  bool TakeExitAfterCall() override {
    return std::exchange(exit_after_call_, false);
  }

  // KeyboardInterrupt in the running call's thread, at its next bytecode,
  // unless a blocking get there raised it first (ClaimInterrupt).
  void InterruptTask() override {
    py::gil_scoped_acquire gil;
    if (!calling_ || interrupted_) return;
    interrupted_ = true;
    PyThreadState_SetAsyncExc(call_thread_, PyExc_KeyboardInterrupt);
  }

  // With the GIL held, in a blocking get of the cancelled call's thread:
  // true when that get is to raise KeyboardInterrupt itself (one pending
  // from InterruptTask is withdrawn, so it is raised once).
  bool ClaimInterrupt() {
    if (!calling_ || call_thread_ != PyThread_get_thread_ident()) return false;
    if (interrupted_) PyThreadState_SetAsyncExc(call_thread_, nullptr);
    interrupted_ = true;
    return true;
  }

  shoal::internal::ActorInstance Construct(
      const std::string& factory,
      const std::vector<ObjectValue>& args) override {
    return WithGil([&] {
      py::tuple outcome = runtime_.attr("construct")(factory, ArgList(args));
      if (outcome[0].cast<std::string>() != "ok") Outcome(outcome);
      auto* instance = new py::object(outcome[1]);
      return shoal::internal::ActorInstance(instance, [](void* p) {
        py::gil_scoped_acquire gil;
        delete static_cast<py::object*>(p);
      });
    });
  }

  ObjectValue CallMethod(void* instance, const std::string& method,
                         const std::vector<ObjectValue>& args) override {
    return WithGil([&] {
      return Outcome(runtime_.attr("call_method")(
          *static_cast<py::object*>(instance), method, ArgList(args)));
    });
  }

 private:
  py::object runtime_;
  bool exit_after_call_ = false;  // the worker's task thread only
  // Under the GIL: a Call runs, on which thread, and whether it was
  // interrupted.
  bool calling_ = false;
  unsigned long call_thread_ = 0;
  bool interrupted_ = false;
};

// This process's runtime when it is a Python worker (null in a driver).
PythonRuntime* g_python_worker = nullptr;

bool InPythonWorker() { return g_python_worker != nullptr; }

bool TaskCancelledHere() {
  return g_python_worker != nullptr &&
         shoal::internal::CurrentTaskCancelled() &&
         g_python_worker->ClaimInterrupt();
}

// Tells the head that this process's actor is ending for good, so that
// the process's end is not taken for a crash to restart from.
void ActorExiting() {
  shoal::internal::ActorHost* host = shoal::internal::ActorHost::Current();
  if (host == nullptr) {
    throw shoal::Error(
        "this process holds no actor: exit_actor() is for an "
        "actor's methods");
  }
  shoal::proto::ActorExitingRequest req;
  req.set_actor_id(host->actor_id());
  req.set_worker_id(shoal::env::Get(shoal::env::Var::kWorkerId));
  absl::Status st;
  {
    py::gil_scoped_release release;
    st = shoal::internal::RequireRuntime()->head().ActorExiting(req);
  }
  if (!st.ok()) {
    throw shoal::Error("the head did not hear that the actor exits: " +
                       std::string(st.message()));
  }
}

int RunWorker(py::object runtime) {
  // Lives as long as the process: the worker ends with _exit.
  auto* python = new PythonRuntime(std::move(runtime));
  g_python_worker = python;
  py::gil_scoped_release release;
  return shoal::internal::RunForeignWorker(python);
}

// ---- Placement groups ----

shoal::PlacementStrategy StrategyNamed(const std::string& strategy) {
  static const std::map<std::string, shoal::PlacementStrategy> kStrategies = {
      {"PACK", shoal::PlacementStrategy::kPack},
      {"SPREAD", shoal::PlacementStrategy::kSpread},
      {"STRICT_PACK", shoal::PlacementStrategy::kStrictPack},
      {"STRICT_SPREAD", shoal::PlacementStrategy::kStrictSpread}};
  auto it = kStrategies.find(strategy);
  if (it == kStrategies.end()) {
    throw py::value_error(
        "strategy must be PACK, SPREAD, STRICT_PACK or "
        "STRICT_SPREAD, not " +
        strategy);
  }
  return it->second;
}

py::tuple CreatePlacementGroup(
    const std::vector<std::map<std::string, double>>& bundles,
    const std::string& strategy, const std::string& name, bool detached,
    const std::vector<std::map<std::string, std::string>>& selectors) {
  shoal::PlacementGroupOptions options;
  options.bundles = bundles;
  options.bundle_label_selector = selectors;
  options.name = name;
  options.lifetime =
      detached ? shoal::Lifetime::kDetached : shoal::Lifetime::kNonDetached;
  options.strategy = StrategyNamed(strategy);
  shoal::PlacementGroup group;
  {
    py::gil_scoped_release release;
    group = shoal::CreatePlacementGroup(options);
  }
  return py::make_tuple(group.id(), group.name(), group.bundle_count());
}

shoal::PlacementGroup Group(const std::string& id, size_t bundles) {
  return shoal::PlacementGroup(id, "", bundles);
}

// ---- The cluster's state, as the head reports it (shoal.util.state) ----
//
// Each call answers the head's reply as JSON with the proto's field names
// (int64 fields as strings, bytes as base64): the package builds Ray's
// records from it.

std::string StateJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    throw shoal::Error("cannot read the head's reply: " +
                       std::string(status.message()));
  }
  return out;
}

// The reply of `call` (a blocking HeadClient call) as JSON, or the error
// the head (or the way to it) gave.
template <typename Call>
absl::StatusOr<std::string> StateReply(Call call) {
  std::shared_ptr<shoal::internal::CoreRuntime> runtime =
      shoal::internal::RequireRuntime();
  py::gil_scoped_release release;
  auto reply = call(runtime->head());
  if (!reply.ok()) return reply.status();
  return StateJson(*reply);
}

[[noreturn]] void StateFailed(const std::string& what,
                              const absl::Status& status) {
  throw shoal::Error("cannot " + what + ": " + std::string(status.message()) +
                     " (is the cluster's head up? `shoal status` says)");
}

// The head's reply to `call` as JSON; shoal::Error, saying what failed.
template <typename Call>
std::string StateCall(const std::string& what, Call call) {
  absl::StatusOr<std::string> json = StateReply(call);
  if (!json.ok()) StateFailed(what, json.status());
  return *std::move(json);
}

// As StateCall, for one record the head may not know: None then.
template <typename Call>
py::object StateLookup(const std::string& what, Call call) {
  absl::StatusOr<std::string> json = StateReply(call);
  if (absl::IsNotFound(json.status())) return py::none();
  if (!json.ok()) StateFailed(what, json.status());
  return py::str(*json);
}

void DefineStateCalls(py::module_& m) {
  m.def(
      "state_cluster_status",
      [](int64_t timeout_ms) {
        return StateCall("read the cluster's status", [&](auto& head) {
          return head.ClusterStatus(timeout_ms);
        });
      },
      py::arg("timeout_ms"),
      "ClusterStatus (nodes, actors, placement groups, leases) as JSON.");
  m.def(
      "state_list_tasks",
      [](const std::vector<std::string>& filters, int limit, bool summary,
         int64_t timeout_ms) {
        shoal::proto::ListTasksRequest req;
        for (const std::string& f : filters) req.add_filters(f);
        req.set_limit(limit);
        req.set_summary(summary);
        return StateCall("list the tasks", [&](auto& head) {
          return head.ListTasks(req, timeout_ms);
        });
      },
      py::arg("filters"), py::arg("limit"), py::arg("summary"),
      py::arg("timeout_ms"),
      "TaskList as JSON: the head's task records (KEY=VALUE filters), or "
      "with summary, their counts by name.");
  m.def(
      "state_list_objects",
      [](int limit, int64_t timeout_ms) {
        shoal::proto::ListObjectsRequest req;
        req.set_limit(limit);
        return StateCall("list the objects", [&](auto& head) {
          return head.ListObjects(req, timeout_ms);
        });
      },
      py::arg("limit"), py::arg("timeout_ms"),
      "ObjectList as JSON: the objects in the nodes' stores.");
  m.def(
      "state_list_jobs",
      [](int64_t timeout_ms) {
        return StateCall("list the jobs",
                         [&](auto& head) { return head.ListJobs(timeout_ms); });
      },
      py::arg("timeout_ms"), "JobList as JSON: the submitted jobs.");
  m.def(
      "state_get_actor",
      [](const std::string& actor_id, int64_t timeout_ms) {
        shoal::proto::GetActorRequest req;
        req.set_actor_id(actor_id);
        return StateLookup("look up actor " + actor_id, [&](auto& head) {
          return head.GetActor(req, timeout_ms);
        });
      },
      py::arg("actor_id"), py::arg("timeout_ms"),
      "ActorInfo of the actor as JSON, or None when the head knows none.");
  m.def(
      "state_get_placement_group",
      [](const std::string& pg_id, int64_t timeout_ms) {
        shoal::proto::GetPlacementGroupRequest req;
        req.set_pg_id(pg_id);
        return StateLookup("look up placement group " + pg_id, [&](auto& head) {
          return head.GetPlacementGroup(req, timeout_ms);
        });
      },
      py::arg("pg_id"), py::arg("timeout_ms"),
      "PlacementGroupInfo of the group as JSON, or None when the head knows "
      "none.");
  m.def("host_id", &shoal::HostId,
        "What tells this host apart (the nodes' host_id).");
  m.def("primary_ip_address", &shoal::PrimaryIpAddress,
        "The IPv4 address of this host's default-route interface.");
  m.def("is_local_address", &shoal::IsLocalAddress, py::arg("ip"),
        "True when `ip` is one of this host's addresses.");
}

}  // namespace

PYBIND11_MODULE(_shoal, m) {
  m.doc() = "The native half of the shoal package (docs/design/python.md).";

  auto error =
      py::register_exception<shoal::Error>(m, "ShoalError", PyExc_RuntimeError);
  // Also Python's TimeoutError, as Ray's is: `except TimeoutError` works.
  py::register_exception<shoal::TimeoutError>(
      m, "GetTimeoutError",
      py::make_tuple(error, py::handle(PyExc_TimeoutError)).ptr());
  py::register_exception<shoal::ObjectLostError>(m, "ObjectLostError",
                                                 error.ptr());
  py::register_exception<shoal::WorkerDiedError>(m, "WorkerDiedError",
                                                 error.ptr());
  py::register_exception<shoal::ActorDiedError>(m, "ActorDiedError",
                                                error.ptr());
  py::register_exception<shoal::InfeasibleError>(m, "InfeasibleError",
                                                 error.ptr());
  py::register_exception<shoal::TaskCancelledError>(m, "TaskCancelledError",
                                                    error.ptr());
  // A remote function raised: (function, node, message, error_data), which
  // the package turns into the user's own exception type.
  g_remote_error =
      PyErr_NewException("_shoal.RemoteError", error.ptr(), nullptr);
  // The module holds a reference of its own; g_remote_error keeps the one
  // PyErr_NewException gave, for the life of the process.
  m.attr("RemoteError") = py::handle(g_remote_error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const shoal::RemoteError& e) {
      py::tuple args =
          py::make_tuple(e.function_name(), e.node_id(), e.remote_message(),
                         py::bytes(e.error_data()));
      PyErr_SetObject(g_remote_error, args.ptr());
    }
  });

  py::class_<BufferRef>(m, "ObjectRef")
      .def("hex", &BufferRef::id, "The object's id.")
      .def("__repr__",
           [](const BufferRef& r) { return "ObjectRef(" + r.id() + ")"; })
      .def("__eq__", [](const BufferRef& a,
                        const BufferRef& b) { return a.id() == b.id(); })
      .def("__hash__",
           [](const BufferRef& r) { return py::hash(py::str(r.id())); });

  py::class_<StoredBytes>(m, "StoredBytes", py::buffer_protocol())
      .def_buffer([](const StoredBytes& s) {
        return py::buffer_info(const_cast<uint8_t*>(s.buffer.data()), 1,
                               py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(s.buffer.size())}, {1},
                               /*readonly=*/true);
      })
      .def("__len__", [](const StoredBytes& s) { return s.buffer.size(); });

  m.def("init", &Init, py::arg("address"), py::arg("token"),
        py::arg("temp_dir"), py::arg("num_cpus"), py::arg("resources"),
        py::arg("cluster_program"), py::arg("worker_argv"),
        py::arg("worker_env"), py::arg("cpp_program"),
        py::arg("dashboard_port") = -1, py::arg("version") = "");
  m.def(
      "version", [] { return std::string(shoal::ShoalVersion()); },
      "The version of Shoal this module was built as.");
  m.def(
      "shutdown",
      [] {
        py::gil_scoped_release release;
        shoal::Shutdown();
      },
      "Leaves the cluster (and stops the local one Init started).");
  m.def("is_initialized", &shoal::IsInitialized);
  m.def(
      "connection_info",
      [] {
        auto runtime = shoal::internal::RequireRuntime();
        py::dict info;
        info["address"] = runtime->head().address();
        info["gcs_address"] = runtime->head().address();
        info["node_id"] = shoal::CurrentNodeId();
        info["job_id"] = runtime->JobId();
        return info;
      },
      "What init() returns: the head's address, this process's node and "
      "job.");
  m.def(
      "dashboard_address",
      [] {
        shoal::proto::ClusterStatusRequest req;
        req.set_head_only(true);  // not every node, at every init()
        std::shared_ptr<shoal::internal::CoreRuntime> runtime =
            shoal::internal::RequireRuntime();
        absl::StatusOr<shoal::proto::ClusterStatus> status;
        {
          py::gil_scoped_release release;
          status = runtime->head().ClusterStatus(req);
        }
        if (!status.ok()) {
          throw shoal::Error(
              absl::StrCat("cannot ask the head where its "
                           "dashboard is: ",
                           status.status().message()));
        }
        return status->dashboard_address();
      },
      "host:port of the head's dashboard (\"\": it serves none).");
  m.def(
      "job_id", [] { return shoal::internal::RequireRuntime()->JobId(); },
      "The job whose workers run what this process submits.");
  m.def(
      "ref_from_id",
      [](const std::string& id) {
        return BufferRef(shoal::internal::HandleFor(id));
      },
      py::arg("id"),
      "The ref of an object this process references, by its id (a ref "
      "read back from a value); ShoalError elsewhere.");
  m.def(
      "lend",
      [](const BufferRef& ref) {
        std::string owner;
        {
          py::gil_scoped_release release;
          owner = shoal::internal::ValueOrThrow(
              shoal::internal::RequireRuntime()->Lend(ref.handle()));
        }
        shoal::internal::NoteLentRef(ref.id(), owner);
        return owner;
      },
      py::arg("ref"),
      "Puts the ref into the task result being written, not waited for: "
      "its owner keeps the object for the result's reader. Returns the "
      "owner's address.");
  m.def(
      "borrow",
      [](const std::string& id, const std::string& owner) {
        std::shared_ptr<shoal::internal::RefHandle> handle;
        {
          py::gil_scoped_release release;
          handle = shoal::internal::ValueOrThrow(
              shoal::internal::RequireRuntime()->Borrow(id, owner));
        }
        return BufferRef(std::move(handle));
      },
      py::arg("id"), py::arg("owner"),
      "The ref of object `id` that the process at `owner` lent (a ref read "
      "back from a task's result).");
  m.def("put_pieces", &PutPieces, py::arg("pieces"), py::arg("size"),
        "Stores an object made of (offset, buffer) pieces, copied once.");
  m.def("get", &Get, py::arg("refs"), py::arg("timeout_ms"),
        py::arg("interruptible") = false, py::arg("read") = false,
        "The objects' stored bytes, mapped without a copy, or (\"msgpack\", "
        "bytes) for a value of another language. With read, the user read "
        "them (a failed result dropped unread is reported, one read is not).");
  m.def("cancel", &Cancel, py::arg("ref"), py::arg("force"),
        py::arg("recursive"),
        "Cancels the task that makes `ref` (and with `recursive`, the "
        "tasks it submitted): whether it was pending.");
  m.def("wait", &Wait, py::arg("refs"), py::arg("num_returns"),
        py::arg("timeout_ms"), py::arg("interruptible") = false,
        "The indices of the refs that are ready.");
  m.def("shape_of", &ShapeOf, py::arg("resources"),
        py::arg("placement_group_id"), py::arg("bundle_index"),
        "The resources held, as agents name them.");
  m.def("submit", &Submit, py::arg("function"), py::arg("args"),
        py::arg("resources"), py::arg("max_retries"),
        py::arg("placement_group_id"), py::arg("bundle_index"),
        py::arg("cpp") = false,
        py::arg("label_selector") = std::map<std::string, std::string>(),
        py::arg("label_selector_soft") = false,
        py::arg("worker_may_end") = false, py::arg("watch") = false,
        "Submits a task of the function stored under key `function`, or "
        "with cpp, of the registered C++ function of that name (arguments "
        "in msgpack). With watch, a result the user drops unread is reported "
        "if the task failed (watch_unread_results).");
  m.def("create_actor", &CreateActor, py::arg("factory"), py::arg("class_name"),
        py::arg("args"), py::arg("name"), py::arg("resources"),
        py::arg("max_restarts"), py::arg("max_task_retries"),
        py::arg("max_concurrency"), py::arg("detached"),
        py::arg("placement_group_id"), py::arg("bundle_index"),
        py::arg("label_selector") = std::map<std::string, std::string>(),
        py::arg("label_selector_soft") = false);
  m.def("submit_actor_task", &SubmitActorTask, py::arg("actor_id"),
        py::arg("method"), py::arg("args"), py::arg("watch") = false,
        "A call of the actor's method; with watch, a result the user drops "
        "unread is reported if the call failed (watch_unread_results).");
  m.def(
      "watch_unread_results", [](bool on) { UnreadResults::Get().SetOn(on); },
      py::arg("on"),
      "Whether the refs that submit and submit_actor_task return with "
      "watch=True from now on are watched for being dropped before get() "
      "read them.");
  m.def("take_warnings", &shoal::internal::TakeWarnings,
        "(type, text) of the runtime's warnings for the driver since the "
        "last call (logged already when they came).");
  m.def(
      "take_unread_dropped", [] { return UnreadResults::Get().TakeDropped(); },
      "The ids of watched results dropped unread since the last call.");
  m.def("get_actor", &GetActor, py::arg("name"));
  m.def(
      "kill_actor",
      [](const std::string& actor_id, bool no_restart) {
        py::gil_scoped_release release;
        shoal::internal::KillActor(actor_id, no_restart);
      },
      py::arg("actor_id"), py::arg("no_restart"));
  m.def("kv_put", &KvPut, py::arg("key"), py::arg("value"),
        py::arg("overwrite"), py::arg("user_ns") = py::none(),
        "Stores the pair (unless the key has a value and not `overwrite`); "
        "True when the key was new.");
  m.def("kv_get", &KvGet, py::arg("key"), py::arg("user_ns") = py::none());
  m.def("kv_del", &KvDel, py::arg("key"), py::arg("by_prefix"),
        py::arg("user_ns") = py::none(), "How many keys were deleted.");
  m.def("kv_keys", &KvKeys, py::arg("prefix"), py::arg("user_ns") = py::none());
  m.def("run_worker", &RunWorker, py::arg("runtime"),
        "Serves this process's agent as a worker whose tasks `runtime` "
        "runs; never returns.");
  m.def(
      "set_process_title",
      [](const std::string& title) { shoal::SetProcessTitle(title); },
      py::arg("title"),
      "This process's title as ps shows it, cut to the length of the "
      "command line it started with (the environment's memory is left "
      "whole).");
  m.def("actor_exiting", &ActorExiting,
        "Tells the head that this process's actor ends for good (no "
        "restart).");
  m.def("list_tasks", &ListTasks, py::arg("filters"), py::arg("limit"));
  m.def("list_logs", &ListLogs, py::arg("node_id"));
  m.def("read_log", &ReadLog, py::arg("node_id"), py::arg("name"),
        py::arg("offset"), py::arg("max_bytes"));
  m.def("current_node_id", &shoal::CurrentNodeId);
  m.def(
      "current_task_id", [] { return shoal::internal::CurrentTaskId(); },
      "The id of the task or actor call this thread runs (\"\" where none).");
  m.def("current_actor_id", [] {
    shoal::internal::ActorHost* host = shoal::internal::ActorHost::Current();
    return host != nullptr ? host->actor_id() : std::string();
  });
  m.def("process_actor_id", &shoal::internal::ProcessActorId,
        "The actor this worker was last asked to make (\"\" where none): "
        "its id while its constructor runs.");
  m.def("assigned_devices", &AssignedDevicesDict);
  m.def("create_placement_group", &CreatePlacementGroup, py::arg("bundles"),
        py::arg("strategy"), py::arg("name"), py::arg("detached"),
        py::arg("bundle_label_selector"));
  m.def(
      "wait_placement_group",
      [](const std::string& id, size_t bundles, int64_t timeout_ms) {
        py::gil_scoped_release release;
        return Group(id, bundles).Wait(timeout_ms);
      },
      py::arg("id"), py::arg("bundles"), py::arg("timeout_ms"));
  m.def(
      "placement_group_nodes",
      [](const std::string& id, size_t bundles) {
        py::gil_scoped_release release;
        return Group(id, bundles).BundleNodes();
      },
      py::arg("id"), py::arg("bundles"));
  m.def(
      "get_placement_group",
      [](const std::string& name) -> py::object {
        std::optional<shoal::PlacementGroup> found;
        {
          py::gil_scoped_release release;
          found = shoal::GetPlacementGroup(name);
        }
        if (!found) return py::none();
        return py::make_tuple(found->id(), found->bundle_count());
      },
      py::arg("name"));
  m.def(
      "remove_placement_group",
      [](const std::string& id, size_t bundles) {
        py::gil_scoped_release release;
        shoal::RemovePlacementGroup(Group(id, bundles));
      },
      py::arg("id"), py::arg("bundles"));
  m.def(
      "reserve_tpu_slice",
      [](const std::string& slice_name, int64_t timeout_ms) {
        shoal::SliceReservation r;
        {
          py::gil_scoped_release release;
          r = shoal::ReserveTpuSlice(slice_name, timeout_ms);
        }
        py::dict d;
        d["id"] = r.group.id();
        d["bundles"] = r.group.bundle_count();
        d["slice_name"] = r.slice_name;
        d["accelerator_type"] = r.accelerator_type;
        d["chips_per_host"] = r.chips_per_host;
        d["hosts"] = r.hosts;
        return d;
      },
      py::arg("slice_name"), py::arg("timeout_ms"));
  m.def(
      "reserve_slices",
      [](const std::string& topology, const std::string& version,
         int num_slices, bool group_per_slice,
         const std::map<std::string, double>& resources_per_bundle,
         const std::string& strategy, const std::string& name, bool detached,
         const std::vector<std::map<std::string, std::string>>& selectors) {
        shoal::tpu::SliceRequest request;
        request.topology = topology;
        request.accelerator_version = version;
        request.num_slices = num_slices;
        request.group_per_slice = group_per_slice;
        request.resources_per_bundle = resources_per_bundle;
        request.strategy = StrategyNamed(strategy);
        request.name = name;
        request.lifetime = detached ? shoal::Lifetime::kDetached
                                    : shoal::Lifetime::kNonDetached;
        request.bundle_label_selector = selectors;
        shoal::tpu::SliceGroup g;
        {
          py::gil_scoped_release release;
          g = shoal::tpu::ReserveSlices(request);
        }
        py::list groups;
        for (const auto& group : g.groups) {
          groups.append(py::make_tuple(group.id(), group.bundle_count()));
        }
        py::dict d;
        d["groups"] = groups;
        d["slice_names"] = g.slice_names;
        d["pod_type"] = g.pod_type;
        d["topology"] = g.topology;
        d["hosts_per_slice"] = g.hosts_per_slice;
        d["chips_per_host"] = g.chips_per_host;
        d["bundles_per_host"] = g.bundles_per_host;
        d["bundle_resources"] = g.bundle_resources;
        d["bundle_label_selector"] = g.bundle_label_selector;
        return d;
      },
      py::arg("topology"), py::arg("accelerator_version"),
      py::arg("num_slices"), py::arg("group_per_slice"),
      py::arg("resources_per_bundle"), py::arg("strategy"), py::arg("name"),
      py::arg("detached"), py::arg("bundle_label_selector"));
  m.def(
      "reserve_subslice",
      [](const std::string& topology, const std::string& version, int index,
         const std::string& name, bool detached) {
        shoal::tpu::SubsliceRequest request;
        request.topology = topology;
        request.accelerator_version = version;
        request.subslice_index = index;
        request.name = name;
        request.lifetime = detached ? shoal::Lifetime::kDetached
                                    : shoal::Lifetime::kNonDetached;
        shoal::tpu::Subslice s;
        {
          py::gil_scoped_release release;
          s = shoal::tpu::ReserveSubslice(request);
        }
        py::dict d;
        d["id"] = s.group.id();
        d["slice_name"] = s.slice_name;
        d["parent_type"] = s.parent_type;
        d["pod_type"] = s.pod_type;
        d["topology"] = s.topology;
        d["subslice_index"] = s.subslice_index;
        d["worker_ids"] = s.worker_ids;
        d["chips_per_host"] = s.chips_per_host;
        d["bundle_resources"] = s.bundle_resources;
        d["bundle_label_selector"] = s.bundle_label_selector;
        return d;
      },
      py::arg("topology"), py::arg("accelerator_version"), py::arg("index"),
      py::arg("name"), py::arg("detached"));
  m.def(
      "count_ready_slices",
      [](const std::string& topology, const std::string& version) {
        py::gil_scoped_release release;
        return shoal::tpu::CountReadySlices(topology, version);
      },
      py::arg("topology"), py::arg("accelerator_version"));
  m.def(
      "slice_shape",
      [](const std::string& topology, const std::string& version) {
        shoal::tpu::SliceShape s = shoal::tpu::ShapeOf(topology, version);
        return py::make_tuple(s.pod_type, s.hosts, s.chips_per_host, s.chips);
      },
      py::arg("topology"), py::arg("accelerator_version"));
  m.def("cluster_resources", [] {
    py::gil_scoped_release release;
    return shoal::ClusterResources();
  });
  m.def("available_resources", [] {
    py::gil_scoped_release release;
    return shoal::AvailableResources();
  });
  m.def("nodes", [] {
    std::vector<shoal::NodeInfo> nodes;
    {
      py::gil_scoped_release release;
      nodes = shoal::Nodes();
    }
    py::list out;
    for (const auto& n : nodes) out.append(NodeDict(n));
    return out;
  });

  DefineStateCalls(m);
}
