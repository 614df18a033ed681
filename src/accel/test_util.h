// Helpers for shoal_accel's tests (not part of the library).
#ifndef SHOAL_ACCEL_TEST_UTIL_H_
#define SHOAL_ACCEL_TEST_UTIL_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/string_view.h"
#include "accel/fs_util.h"
#include "gtest/gtest.h"

namespace shoal::accel::testing {

// A fresh directory under /tmp, removed with everything in it on
// destruction.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string pattern = "/tmp/shoal_accel_test.XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "mkdtemp failed";
    path_ = pattern;
  }
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }

  // Writes `contents` to path()/relative, creating parent directories.
  void Write(absl::string_view relative, absl::string_view contents) const {
    std::string file = internal::JoinPath(path_, relative);
    ASSERT_TRUE(internal::MakeDirectories(
                    std::filesystem::path(file).parent_path().string())
                    .ok());
    ASSERT_TRUE(internal::WriteFile(file, contents).ok()) << file;
  }
  // Creates the directory path()/relative.
  void MakeDir(absl::string_view relative) const {
    ASSERT_TRUE(
        internal::MakeDirectories(internal::JoinPath(path_, relative)).ok());
  }

 private:
  std::string path_;
};

}  // namespace shoal::accel::testing

#endif  // SHOAL_ACCEL_TEST_UTIL_H_
