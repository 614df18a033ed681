// Replays every input kept for the fuzzers through the harnesses that the
// libFuzzer binaries run: the seeds of fuzz/corpus/<target>/ and the inputs
// of fuzz/regressions/<target>/ that once crashed a harness. A harness that
// crashes or fails a check aborts this test.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_targets.h"
#include "gtest/gtest.h"

#ifndef SHOAL_FUZZ_DIR
#error "SHOAL_FUZZ_DIR must name the fuzz/ folder of the source tree"
#endif

namespace shoal::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> FilesIn(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    // Dot files (.gitkeep) keep empty folders in git.
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') {
      files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

int Replay(const Target& target, const std::string& input) {
  return target.fuzz(reinterpret_cast<const uint8_t*>(input.data()),
                     input.size());
}

class FuzzRegressionTest : public ::testing::TestWithParam<Target> {
 protected:
  fs::path Dir(const char* kind) const {
    return fs::path(SHOAL_FUZZ_DIR) / kind / GetParam().name;
  }
};

TEST_P(FuzzRegressionTest, CorpusAndRegressionsReplay) {
  const std::vector<fs::path> corpus = FilesIn(Dir("corpus"));
  EXPECT_FALSE(corpus.empty()) << "no seeds in " << Dir("corpus");
  std::vector<fs::path> inputs = corpus;
  for (const fs::path& p : FilesIn(Dir("regressions"))) inputs.push_back(p);
  for (const fs::path& path : inputs) {
    SCOPED_TRACE(path.string());
    EXPECT_EQ(Replay(GetParam(), ReadBytes(path)), 0);
  }
}

// The committed corpus holds the seeds the harness defines, as it defines
// them (make_fuzz_corpus writes them).
TEST_P(FuzzRegressionTest, SeedsAreInTheCorpus) {
  for (const Seed& seed : GetParam().seeds()) {
    SCOPED_TRACE(seed.name);
    fs::path path = Dir("corpus") / seed.name;
    ASSERT_TRUE(fs::exists(path))
        << path << " is missing: run make_fuzz_corpus " << SHOAL_FUZZ_DIR
        << "/corpus in the fuzzing build";
    EXPECT_EQ(ReadBytes(path), seed.input)
        << path << " differs from its seed: run make_fuzz_corpus";
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzRegressionTest,
                         ::testing::ValuesIn(kTargets),
                         [](const ::testing::TestParamInfo<Target>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace shoal::fuzz
