// Non-template entry points of the Shoal runtime that the public templates in
// shoal/api.h call. Not part of the public API: names may change.
#ifndef SHOAL_INTERNAL_RUNTIME_H_
#define SHOAL_INTERNAL_RUNTIME_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/serialization.h"

namespace shoal::internal {

// One reference to an object; the object is released when the last handle
// to it goes away.
class RefHandle {
 public:
  explicit RefHandle(std::string id) : id_(std::move(id)) {}
  ~RefHandle();
  RefHandle(const RefHandle&) = delete;
  RefHandle& operator=(const RefHandle&) = delete;
  const std::string& id() const { return id_; }

 private:
  std::string id_;
};

struct TaskArg {
  ObjectValue value;               // when ref is null
  std::shared_ptr<RefHandle> ref;  // an object to resolve before running
  // Refs inside `value`: kept alive until the task is done.
  std::vector<std::shared_ptr<RefHandle>> contained;
};

// Refs inside values. While a RefCapture lives on a thread, each ObjectRef
// packed there is recorded, so that the object made of the value (or the
// task it is an argument of) keeps the objects it refers to alive.
class RefCapture {
 public:
  RefCapture();
  ~RefCapture();
  RefCapture(const RefCapture&) = delete;
  RefCapture& operator=(const RefCapture&) = delete;
  std::vector<std::shared_ptr<RefHandle>> Take() { return std::move(refs_); }
  // Records `handle` in the innermost capture of this thread, if any.
  static void Note(const std::shared_ptr<RefHandle>& handle);

 private:
  std::vector<std::shared_ptr<RefHandle>> refs_;
  RefCapture* outer_;
};

// The live handle of object `id`, for a ref unpacked from a value. Throws
// shoal::Error when this process holds no reference to it (refs inside
// values can be read back only by the process that owns the objects).
std::shared_ptr<RefHandle> HandleFor(const std::string& id);

struct TaskOptions {
  std::map<std::string, double> resources;
  int max_retries = 3;
  // Runs in this bundle of this placement group (its resources come from
  // the bundle's reservation).
  std::string placement_group_id;
  int bundle_index = -1;
  // A registered C++ function called from a driver of another language (a
  // Python driver's shoal.cpp_function): it runs in the job's C++ program.
  bool in_cpp_program = false;
  // Runs only on nodes whose labels match (scheduling/label_selector.h:
  // "v", "!v", "in(a,b)", "!in(a,b)"); with soft, anywhere when none does.
  std::map<std::string, std::string> label_selector;
  bool label_selector_soft = false;
  // The worker that runs it may end after it (a Python function's
  // max_calls): its workers run one task at a time.
  bool worker_may_end = false;
};

// Throws shoal::Error unless 0 <= bundle_index < bundle_count, and for a
// group that was never created (empty id).
void CheckBundleIndex(const std::string& group_id, size_t bundle_count,
                      int bundle_index);

std::shared_ptr<RefHandle> SubmitTask(const std::string& function_name,
                                      std::vector<TaskArg> args,
                                      const TaskOptions& options);
// Values at or above the inline threshold go into the node's object store.
std::shared_ptr<RefHandle> PutObject(
    ObjectValue value, std::vector<std::shared_ptr<RefHandle>> contained = {});
// One piece of a raw object: `bytes` go at `offset`.
struct BufferPiece {
  size_t offset = 0;
  std::string_view bytes;
};
// Stores `size` raw bytes (read back as shoal::Buffer) made of `pieces`, each
// copied once, straight into shared memory when the object is large; bytes
// no piece covers are zero. Throws shoal::Error for a piece past `size`.
std::shared_ptr<RefHandle> PutPieces(const std::vector<BufferPiece>& pieces,
                                     size_t size);
// Blocks until the object is ready; throws shoal::Error subclasses for failed
// tasks and shoal::TimeoutError when timeout_ms >= 0 passes first. A stored
// object is mapped from this node's store (pulled here first if need be).
ObjectValue GetObject(const RefHandle& ref, int64_t timeout_ms);
// Cancels the task whose result `ref` is (shoal::Cancel): true when it was
// pending here (it fails as cancelled now, or once its worker stops it),
// false when it had ended. With `recursive`, the tasks it submitted are
// cancelled too. Throws shoal::Error for a ref that is no task's result
// here, or an actor call already given to its actor.
bool CancelTask(const RefHandle& ref, bool force, bool recursive);
// Indices of the ready objects among `refs` (at least `num_ready` of them
// unless the timeout passes first; timeout_ms < 0 waits forever).
std::vector<size_t> WaitReady(const std::vector<const RefHandle*>& refs,
                              size_t num_ready, int64_t timeout_ms);

// Runs registered function `function_name`(local_index, args...) once per
// local device in child processes; results in local-rank order.
std::vector<std::string> LaunchPerDevice(const std::string& function_name,
                                         const std::vector<std::string>& args);

// Function registry (SHOAL_REMOTE).
using Invoker =
    std::function<ObjectValue(const std::vector<ObjectValue>& args)>;
void RegisterFunction(const std::string& name, const void* address,
                      Invoker invoker);
// The registered name of the function at `address`; throws shoal::Error when
// the function was not registered.
const std::string& FunctionName(const void* address);

// Splits "f, ns::g" into names and registers each with its address.
template <typename... Fns>
bool RegisterFunctions(const char* names, Fns... fns);

}  // namespace shoal::internal

#endif  // SHOAL_INTERNAL_RUNTIME_H_
