#include "collective/file_store.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/files.h"

namespace shoal::collective::internal {
namespace {

class DirectoryStore : public Store {
 public:
  explicit DirectoryStore(std::string directory)
      : directory_(std::move(directory)) {}

  void Set(const std::string& key, const std::string& value) override {
    absl::Status status = WriteFile(PathOf(key), value, 0600);
    if (!status.ok()) {
      throw CollectiveError(
          absl::StrCat("could not write key '", key, "': ", status.message()),
          {});
    }
  }

  std::string Get(const std::string& key,
                  std::chrono::milliseconds timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto backoff = std::chrono::milliseconds(1);
    while (true) {
      absl::StatusOr<std::string> value = ReadFile(PathOf(key));
      if (value.ok()) return *value;
      if (std::chrono::steady_clock::now() >= deadline) {
        throw CollectiveError(
            absl::StrCat("no value for key '", key, "' in ", directory_,
                         " after ", timeout.count(),
                         " ms: the other ranks may not have started"),
            {});
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(20));
    }
  }

 private:
  std::string PathOf(const std::string& key) const {
    return absl::StrCat(directory_, "/",
                        absl::StrReplaceAll(key, {{"%", "%25"}, {"/", "%2F"}}));
  }

  const std::string directory_;
};

}  // namespace

std::shared_ptr<Store> FileStore(const std::string& directory) {
  return std::make_shared<DirectoryStore>(directory);
}

}  // namespace shoal::collective::internal
