// Stores for transport tests: ranks as threads share a MemoryStore, ranks
// as forked processes a FileStore. Get throws CollectiveError on timeout.
#ifndef SHOAL_COLLECTIVE_TEST_STORES_H_
#define SHOAL_COLLECTIVE_TEST_STORES_H_

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "shoal/collective.h"

namespace shoal::collective::internal {

// A store shared by the threads of a test.
class MemoryStore : public Store {
 public:
  void Set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
    cv_.notify_all();
  }
  std::string Get(const std::string& key,
                  std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
      throw CollectiveError("timed out waiting for " + key, {});
    }
    return values_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

// A store the processes forked by a test share: one file per key.
class FileStore : public Store {
 public:
  explicit FileStore(std::filesystem::path dir) : dir_(std::move(dir)) {}
  void Set(const std::string& key, const std::string& value) override {
    std::filesystem::path path = PathOf(key);
    std::filesystem::path tmp = path;
    tmp += absl::StrCat(".tmp", getpid());
    std::ofstream(tmp, std::ios::binary) << value;
    std::filesystem::rename(tmp, path);
  }
  std::string Get(const std::string& key,
                  std::chrono::milliseconds timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      std::ifstream in(PathOf(key), std::ios::binary);
      if (in) {
        std::stringstream value;
        value << in.rdbuf();
        return value.str();
      }
      if (std::chrono::steady_clock::now() > deadline) {
        throw CollectiveError("timed out waiting for " + key, {});
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  std::filesystem::path PathOf(std::string key) const {
    for (char& c : key) {
      if (c == '/') c = '_';
    }
    return dir_ / key;
  }
  std::filesystem::path dir_;
};

}  // namespace shoal::collective::internal

#endif  // SHOAL_COLLECTIVE_TEST_STORES_H_
