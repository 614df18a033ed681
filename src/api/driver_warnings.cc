#include "api/driver_warnings.h"

#include <deque>

#include "common/logging.h"
#include "common/mutex.h"

namespace shoal::internal {
namespace {

shoal::Mutex& Mu() {
  static auto* mu = new shoal::Mutex;  // never destroyed: used at exit too
  return *mu;
}

std::deque<std::pair<std::string, std::string>>& Kept() {
  static auto* kept = new std::deque<std::pair<std::string, std::string>>;
  return *kept;
}

}  // namespace

void PublishWarning(const std::string& type, const std::string& text) {
  SHOAL_LOG(WARNING) << text;
  shoal::MutexLock lock(&Mu());
  Kept().emplace_back(type, text);
  if (Kept().size() > kMaxKeptWarnings) Kept().pop_front();
}

std::vector<std::pair<std::string, std::string>> TakeWarnings() {
  shoal::MutexLock lock(&Mu());
  std::vector<std::pair<std::string, std::string>> out(Kept().begin(),
                                                       Kept().end());
  Kept().clear();
  return out;
}

}  // namespace shoal::internal
