// The lock every part of Shoal uses: std::mutex, annotated so that clang's
// -Wthread-safety checks what it guards (scripts/check-thread-safety), as
// LevelDB's port::Mutex does. Not shoal::Mutex: on two cores, with a loop
// thread and a user thread handing each other work a few microseconds
// apart, its spin-and-yield slow path cost the Python frontend ~10% of its
// actor call rate (bench/py_bench.py); a futex-backed std::mutex sleeps at
// once.
//
// The names are absl's (Mutex, MutexLock, CondVar and their methods), so
// the code reads the same and the annotations are absl's macros.
#ifndef SHOAL_COMMON_MUTEX_H_
#define SHOAL_COMMON_MUTEX_H_

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace shoal {

class ABSL_LOCKABLE Mutex {
 public:
  constexpr Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Tells the analysis the lock is held (it cannot check it at run time).
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Waits on a Mutex the caller holds; it is held again on return. Spurious
// wakeups happen, as with shoal::CondVar: wait in a loop on the condition.
class CondVar {
 public:
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // True when `deadline` passed (absl's meaning).
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (deadline == absl::InfiniteFuture()) {
      Wait(mu);
      return false;
    }
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    bool timed_out = cv_.wait_until(lock, absl::ToChronoTime(deadline)) ==
                     std::cv_status::timeout;
    lock.release();
    return timed_out;
  }
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return WaitWithDeadline(mu, absl::Now() + timeout);
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace shoal

#endif  // SHOAL_COMMON_MUTEX_H_
