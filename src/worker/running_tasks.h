// What this worker runs now, for task events (common/task_event_record.h): a
// task that is still running one report interval after it began is
// reported RUNNING to the head from a thread of its own (the worker's loop
// may be busy running it). Tasks that end sooner are not reported here:
// their owner reports them, with the start time their result carries.
#ifndef SHOAL_WORKER_RUNNING_TASKS_H_
#define SHOAL_WORKER_RUNNING_TASKS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "shoal/shoal.pb.h"

namespace shoal::rpc {
class EventLoop;
class HeadClient;
}  // namespace shoal::rpc

namespace shoal::internal {

class RunningTasks {
 public:
  struct Options {
    std::string head_address;
    std::string token;
    std::string job_id;
    std::string node_id;
    std::string worker_id;
    int64_t interval_ms = 1000;
  };
  explicit RunningTasks(Options options);
  ~RunningTasks();
  RunningTasks(const RunningTasks&) = delete;
  RunningTasks& operator=(const RunningTasks&) = delete;

  // `spec` begins to run at `start_ms`; it must outlive the matching End.
  // Any thread.
  void Begin(const proto::TaskSpec* spec, int64_t start_ms);
  void End(const proto::TaskSpec* spec);

 private:
  struct Running {
    const proto::TaskSpec* spec;
    int64_t start_ms;
    bool reported;
  };
  void Loop();
  void Send(const proto::TaskEventBatch& batch);

  const Options options_;
  shoal::Mutex mu_;
  shoal::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Running> running_ ABSL_GUARDED_BY(mu_);
  // Made on the first report; used by the reporting thread only.
  std::unique_ptr<rpc::EventLoop> loop_;
  std::unique_ptr<rpc::HeadClient> head_;
  std::thread thread_;
};

}  // namespace shoal::internal

#endif  // SHOAL_WORKER_RUNNING_TASKS_H_
