// Minimal leveled logging to stderr (a process's log file once the CLI has
// redirected it) and CHECK for bugs in Shoal's own code. Input from users,
// peers and the operating system is never CHECKed: it becomes a Status.
//
// Thread-safe: each message is written with one write(2).
#ifndef SHOAL_COMMON_LOGGING_H_
#define SHOAL_COMMON_LOGGING_H_

#include <sys/time.h>

#include <sstream>
#include <string>

namespace shoal::internal {

enum class LogSeverity { kDebug, kInfo, kWarning, kError, kFatal };

// Messages below this severity are dropped (SHOAL_LOG_LEVEL=debug|info|...).
LogSeverity MinLogSeverity();
// Prefix of every line, e.g. "head" or "agent n1"; set once at process start.
void SetLogComponent(const std::string& component);

// "1203 08:15:32.068": the month, day, time and milliseconds of `when`, in
// local time, as each log line starts.
std::string LogTimestamp(const timeval& when);

class LogMessage {
 public:
  LogMessage(const char* file, int line, LogSeverity severity);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Swallows the stream when a message is below the threshold.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace shoal::internal

#define SHOAL_LOG_SEVERITY_DEBUG ::shoal::internal::LogSeverity::kDebug
#define SHOAL_LOG_SEVERITY_INFO ::shoal::internal::LogSeverity::kInfo
#define SHOAL_LOG_SEVERITY_WARNING ::shoal::internal::LogSeverity::kWarning
#define SHOAL_LOG_SEVERITY_ERROR ::shoal::internal::LogSeverity::kError
#define SHOAL_LOG_SEVERITY_FATAL ::shoal::internal::LogSeverity::kFatal

#define SHOAL_LOG(level)                                              \
  (SHOAL_LOG_SEVERITY_##level < ::shoal::internal::MinLogSeverity())  \
      ? (void)0                                                       \
      : ::shoal::internal::LogVoidify() &                             \
            ::shoal::internal::LogMessage(__FILE__, __LINE__,         \
                                          SHOAL_LOG_SEVERITY_##level) \
                .stream()

#define SHOAL_CHECK(cond)                                              \
  (cond) ? (void)0                                                     \
         : ::shoal::internal::LogVoidify() &                           \
               ::shoal::internal::LogMessage(__FILE__, __LINE__,       \
                                             SHOAL_LOG_SEVERITY_FATAL) \
                       .stream()                                       \
                   << "Check failed: " #cond " "

#endif  // SHOAL_COMMON_LOGGING_H_
