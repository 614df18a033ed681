// A process's connection to its node agent, as drivers and workers have
// one, for tests and benchmarks that drive the object store directly:
// blocking calls over an rpc::Channel on a loop the caller owns.
//
// Threading: any thread; calls may be made concurrently.
#ifndef SHOAL_TESTS_TESTING_AGENT_CLIENT_H_
#define SHOAL_TESTS_TESTING_AGENT_CLIENT_H_

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rpc/event_loop.h"
#include "rpc/rpc.h"
#include "shoal/shoal.pb.h"

namespace shoal::testing {

class AgentClient {
 public:
  // `timeout_ms` bounds each call.
  AgentClient(rpc::EventLoop* loop, const std::string& agent,
              const std::string& token, int64_t timeout_ms = 5000)
      : loop_(loop), timeout_ms_(timeout_ms) {
    loop_->RunSync([&] {
      channel_ = std::make_unique<rpc::TcpChannel>(loop_, agent, token, "test");
    });
  }
  ~AgentClient() {
    loop_->RunSync([&] { channel_.reset(); });
  }
  AgentClient(const AgentClient&) = delete;
  AgentClient& operator=(const AgentClient&) = delete;

  // Starts a call; the future gets its reply.
  template <typename Reply>
  std::future<absl::StatusOr<Reply>> CallAsync(
      int method, const google::protobuf::MessageLite& request) {
    auto done = std::make_shared<std::promise<absl::StatusOr<Reply>>>();
    std::future<absl::StatusOr<Reply>> reply = done->get_future();
    std::string payload = rpc::Serialize(request);
    loop_->Post([this, method, payload = std::move(payload), done] {
      channel_->Call(
          method, payload,
          [done](absl::StatusOr<std::string> p) {
            if (!p.ok()) return done->set_value(p.status());
            Reply r;
            if (!rpc::ParseMessage(*p, &r)) {
              return done->set_value(absl::DataLossError("malformed reply"));
            }
            done->set_value(std::move(r));
          },
          timeout_ms_);
    });
    return reply;
  }
  template <typename Reply>
  absl::StatusOr<Reply> Call(int method,
                             const google::protobuf::MessageLite& request) {
    return CallAsync<Reply>(method, request).get();
  }

  absl::StatusOr<proto::ObjectPlace> Create(const std::string& id,
                                            uint64_t size,
                                            uint64_t metadata_size = 0) {
    proto::ObjectRequest r;
    r.set_object_id(id);
    r.set_data_size(size);
    r.set_metadata_size(metadata_size);
    return Call<proto::ObjectPlace>(proto::OBJECT_CREATE, r);
  }
  absl::Status Seal(const std::string& id) {
    return Simple(id, proto::OBJECT_SEAL);
  }
  absl::StatusOr<proto::ObjectPlace> Get(const std::string& id) {
    proto::ObjectRequest r;
    r.set_object_id(id);
    return Call<proto::ObjectPlace>(proto::OBJECT_GET, r);
  }
  absl::Status Release(const std::string& id) {
    return Simple(id, proto::OBJECT_RELEASE);
  }
  absl::Status Delete(const std::string& id) {
    return Simple(id, proto::OBJECT_DELETE);
  }
  // OBJECT_PULL of `object` (its id, sizes and sources).
  std::future<absl::StatusOr<proto::ObjectPlace>> PullAsync(
      const proto::StoredObject& object, int64_t timeout_ms = 0) {
    proto::ObjectPullRequest r;
    *r.mutable_object() = object;
    r.set_timeout_ms(timeout_ms);
    return CallAsync<proto::ObjectPlace>(proto::OBJECT_PULL, r);
  }
  absl::StatusOr<proto::ObjectPlace> Pull(const proto::StoredObject& object,
                                          int64_t timeout_ms = 0) {
    return PullAsync(object, timeout_ms).get();
  }
  absl::StatusOr<proto::AgentInfo> Info() {
    return Call<proto::AgentInfo>(proto::GET_AGENT_INFO, proto::Empty());
  }

 private:
  absl::Status Simple(const std::string& id, int method) {
    proto::ObjectRequest r;
    r.set_object_id(id);
    return Call<proto::Empty>(method, r).status();
  }

  rpc::EventLoop* loop_;
  const int64_t timeout_ms_;
  std::unique_ptr<rpc::Channel> channel_;
};

}  // namespace shoal::testing

#endif  // SHOAL_TESTS_TESTING_AGENT_CLIENT_H_
