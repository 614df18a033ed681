// The head's copies of the programs this process's workers run
// (program_copy.h says where nodes find a program and when one is sent):
// whether they were sent, their hashes, and the sends themselves, once at a
// time, on the caller's thread or on a thread of their own.
//
// Threading: thread-safe. Send() blocks the caller; Wanted() and
// SendAgain() return at once and send on a thread of their own, joined by
// Shutdown(). Never call the blocking ones from the runtime's event loop:
// the send itself needs it.
#ifndef SHOAL_API_PROGRAM_COPIES_H_
#define SHOAL_API_PROGRAM_COPIES_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace shoal::internal {

class ProgramCopies {
 public:
  // The hashes the head keeps the copies under: this process's own program
  // and RuntimeOptions::cpp_program's. Empty: none (not sent, or no such
  // program).
  struct Hashes {
    std::string program;
    std::string cpp_program;
  };
  // Gives the head the programs; blocking.
  using SendFn = std::function<absl::StatusOr<Hashes>()>;
  // The parts that name the copies hear them, or why there are none.
  using TellFn = std::function<void(const absl::StatusOr<Hashes>&)>;

  ProgramCopies(SendFn send, TellFn tell);
  ~ProgramCopies();
  ProgramCopies(const ProgramCopies&) = delete;
  ProgramCopies& operator=(const ProgramCopies&) = delete;

  // In a worker: its driver's copy, which the worker never sends itself.
  void Adopt(const std::string& program_hash);
  Hashes Known() const;
  bool sent() const;

  // Sends the copies unless they were sent (then the parts hear the known
  // ones): a caller that finds a send under way waits for it, and one that
  // failed lets the next caller try again.
  absl::Status SendOnce();
  // A node lacks a copy: SendOnce on a thread of its own. A wish made while
  // that thread runs is taken up by it before it ends.
  void Wanted();
  // The head may have lost the copies (it took over from another): when
  // they were sent, they are sent again on a thread of their own (one at a
  // time).
  void SendAgain();
  // No thread is started from now on; joins those that run. Idempotent.
  void Shutdown();

 private:
  // Sends and records what came back; the parts hear it.
  absl::Status SendAndRecord();

  const SendFn send_;
  const TellFn tell_;
  std::atomic<bool> stopping_{false};

  mutable shoal::Mutex mu_;
  shoal::CondVar cv_;
  bool sending_ ABSL_GUARDED_BY(mu_) = false;
  bool sent_ ABSL_GUARDED_BY(mu_) = false;
  Hashes hashes_ ABSL_GUARDED_BY(mu_);

  // Wanted()'s thread: joined once it has ended, or by Shutdown.
  shoal::Mutex copier_mu_;
  std::thread copier_ ABSL_GUARDED_BY(copier_mu_);
  bool copier_running_ ABSL_GUARDED_BY(copier_mu_) = false;
  bool copy_wanted_ ABSL_GUARDED_BY(copier_mu_) = false;

  // SendAgain()'s thread.
  shoal::Mutex uploader_mu_;
  std::thread uploader_ ABSL_GUARDED_BY(uploader_mu_);
  std::atomic<bool> uploading_{false};
};

}  // namespace shoal::internal

#endif  // SHOAL_API_PROGRAM_COPIES_H_
