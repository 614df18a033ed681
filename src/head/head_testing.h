// For tests against the head: a real Head on a free loopback port with a
// session folder of its own, and the actor specs the head's tests create.
#ifndef SHOAL_HEAD_HEAD_TESTING_H_
#define SHOAL_HEAD_HEAD_TESTING_H_

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "head/head.h"
#include "shoal/shoal.pb.h"

namespace shoal::testing {

// A Head listening on 127.0.0.1 (a free port) whose session folder is a
// fresh one under the test's temporary directory, removed with this object.
class TestHead {
 public:
  // Starts a head with `options`, its host, port and session folder filled
  // in here; the folder's name begins with `name`.
  static absl::StatusOr<std::unique_ptr<TestHead>> Start(
      const std::string& name, HeadOptions options) {
    std::string dir = ::testing::TempDir() + "/" + name + "XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("mkdtemp ", dir, ": ", strerror(errno)));
    }
    // From here the folder is removed however the start ends.
    std::unique_ptr<TestHead> test_head(new TestHead(dir));
    options.host = "127.0.0.1";
    options.port = 0;
    options.session_dir = dir;
    absl::StatusOr<std::unique_ptr<Head>> head = Head::Create(options);
    if (!head.ok()) return head.status();
    test_head->address_ = absl::StrCat("127.0.0.1:", (*head)->port());
    test_head->head_ = std::move(*head);
    return test_head;
  }

  ~TestHead() {
    Stop();
    std::error_code ignored;
    std::filesystem::remove_all(session_dir_, ignored);
  }
  TestHead(const TestHead&) = delete;
  TestHead& operator=(const TestHead&) = delete;

  // Stops the head, as its process ending would; the folder stays.
  void Stop() { head_.reset(); }

  // Stops the head and starts another on the same session folder and port
  // with `options` (a head restarting: it takes up what the last one kept).
  absl::Status Restart(HeadOptions options) {
    Stop();
    options.host = "127.0.0.1";
    options.port = std::stoi(address_.substr(address_.rfind(':') + 1));
    options.session_dir = session_dir_;
    absl::StatusOr<std::unique_ptr<Head>> head = Head::Create(options);
    if (!head.ok()) return head.status();
    head_ = std::move(*head);
    return absl::OkStatus();
  }

  // "127.0.0.1:<port>", also after Stop().
  const std::string& address() const { return address_; }
  const std::string& session_dir() const { return session_dir_; }

 private:
  explicit TestHead(std::string session_dir)
      : session_dir_(std::move(session_dir)) {}

  std::string session_dir_;
  std::string address_;
  std::unique_ptr<Head> head_;
};

// An actor of class "Counter" made by the factory "CreateCounter", the rest
// of its spec left as proto defaults.
inline proto::ActorSpec CounterActorSpec(const std::string& actor_id,
                                         int max_restarts,
                                         const std::string& name,
                                         const std::string& job_id) {
  proto::ActorSpec spec;
  spec.set_actor_id(actor_id);
  spec.set_name(name);
  spec.set_factory("CreateCounter");
  spec.set_class_name("Counter");
  spec.set_max_restarts(max_restarts);
  spec.set_job_id(job_id);
  return spec;
}

}  // namespace shoal::testing

#endif  // SHOAL_HEAD_HEAD_TESTING_H_
