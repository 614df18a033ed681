#include "common/logging.h"

#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string_view>

#include "common/environment.h"

namespace shoal::internal {
namespace {

std::string& Component() {
  static std::string* component = new std::string("shoal");
  return *component;
}

LogSeverity ParseSeverity(std::string_view v) {
  if (v == "debug") return LogSeverity::kDebug;
  if (v == "warning") return LogSeverity::kWarning;
  if (v == "error") return LogSeverity::kError;
  return LogSeverity::kInfo;
}

const char* SeverityLetter(LogSeverity s) {
  switch (s) {
    case LogSeverity::kDebug:
      return "D";
    case LogSeverity::kInfo:
      return "I";
    case LogSeverity::kWarning:
      return "W";
    case LogSeverity::kError:
      return "E";
    case LogSeverity::kFatal:
      return "F";
  }
  return "?";
}

}  // namespace

LogSeverity MinLogSeverity() {
  static const LogSeverity severity =
      ParseSeverity(env::Get(env::Var::kLogLevel));
  return severity;
}

void SetLogComponent(const std::string& component) { Component() = component; }

std::string LogTimestamp(const timeval& when) {
  tm local;
  localtime_r(&when.tv_sec, &local);
  char text[32];
  size_t n = strftime(text, sizeof(text), "%m%d %H:%M:%S", &local);
  // Milliseconds in three digits: ".068", never ".68".
  snprintf(text + n, sizeof(text) - n, ".%03d",
           static_cast<int>(when.tv_usec / 1000));
  return text;
}

LogMessage::LogMessage(const char* file, int line, LogSeverity severity)
    : severity_(severity) {
  timeval tv;
  gettimeofday(&tv, nullptr);
  const char* base = strrchr(file, '/');
  stream_ << SeverityLetter(severity) << LogTimestamp(tv) << " " << Component()
          << " " << getpid() << " " << (base ? base + 1 : file) << ":" << line
          << "] ";
}

LogMessage::~LogMessage() {
  stream_ << "\n";
  std::string text = stream_.str();
  ssize_t ignored = write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
  if (severity_ == LogSeverity::kFatal) abort();
}

}  // namespace shoal::internal
