#include "api/program_copies.h"

#include <utility>

#include "common/logging.h"

namespace shoal::internal {

ProgramCopies::ProgramCopies(SendFn send, TellFn tell)
    : send_(std::move(send)), tell_(std::move(tell)) {}

ProgramCopies::~ProgramCopies() { Shutdown(); }

void ProgramCopies::Adopt(const std::string& program_hash) {
  shoal::MutexLock lock(&mu_);
  hashes_.program = program_hash;
  sent_ = true;
}

ProgramCopies::Hashes ProgramCopies::Known() const {
  shoal::MutexLock lock(&mu_);
  return hashes_;
}

bool ProgramCopies::sent() const {
  shoal::MutexLock lock(&mu_);
  return sent_;
}

absl::Status ProgramCopies::SendAndRecord() {
  absl::StatusOr<Hashes> sent = send_();
  if (sent.ok()) {
    shoal::MutexLock lock(&mu_);
    hashes_ = *sent;
    sent_ = true;
  }
  tell_(sent);
  return sent.status();
}

absl::Status ProgramCopies::SendOnce() {
  mu_.Lock();
  while (sending_) cv_.Wait(&mu_);
  if (sent_) {
    Hashes known = hashes_;
    mu_.Unlock();
    tell_(known);
    return absl::OkStatus();
  }
  sending_ = true;
  mu_.Unlock();
  absl::Status sent = SendAndRecord();
  {
    shoal::MutexLock lock(&mu_);
    sending_ = false;
  }
  cv_.SignalAll();
  return sent;
}

void ProgramCopies::Wanted() {
  shoal::MutexLock lock(&copier_mu_);
  if (stopping_) return;
  copy_wanted_ = true;
  if (copier_running_) return;
  if (copier_.joinable()) copier_.join();  // it has ended
  copier_running_ = true;
  copier_ = std::thread([this] {
    while (true) {
      {
        shoal::MutexLock lock(&copier_mu_);
        if (!copy_wanted_ || stopping_) {
          copier_running_ = false;
          return;
        }
        copy_wanted_ = false;
      }
      absl::Status sent = SendOnce();
      if (!sent.ok()) {
        SHOAL_LOG(WARNING) << "a node has no copy of this program, and "
                              "none could be sent: "
                           << sent;
      }
    }
  });
}

void ProgramCopies::SendAgain() {
  // Programs never sent (every node was on this host) are not sent now
  // either.
  if (!sent()) return;
  shoal::MutexLock lock(&uploader_mu_);
  if (stopping_ || uploading_.exchange(true)) return;
  if (uploader_.joinable()) uploader_.join();  // done: uploading_ was false
  uploader_ = std::thread([this] {
    absl::Status st = SendAndRecord();
    if (!st.ok()) {
      SHOAL_LOG(WARNING) << "cannot give the head this job's binary again ("
                         << st << "); workers it starts may fail";
    }
    uploading_ = false;
  });
}

void ProgramCopies::Shutdown() {
  stopping_ = true;
  std::thread uploader;
  {
    shoal::MutexLock lock(&uploader_mu_);
    uploader = std::move(uploader_);
  }
  if (uploader.joinable()) uploader.join();
  std::thread copier;
  {
    shoal::MutexLock lock(&copier_mu_);
    copier = std::move(copier_);
  }
  if (copier.joinable()) copier.join();
}

}  // namespace shoal::internal
