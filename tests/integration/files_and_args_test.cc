// What a stranger on the same host can learn from a running cluster: its
// session folders are its user's alone (0700 folders, 0600 files: head.db
// holds the jobs' environments, logs hold their output), no process shows
// the cluster's token or its Redis password in its arguments, the commands
// `shoal start` prints for copying pass a token made of shell syntax as is,
// and a node id that would name a path outside the session is refused
// before anything starts.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "common/random.h"
#include "common/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/api.h"
#include "shoal/init.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/restart_workload.h"
#include "tests/testing/test_cluster.h"

namespace {

using ::shoal::testing::ClusterSpec;
using ::shoal::testing::NodeSpec;
using ::shoal::testing::ProcessesMentioning;
using ::shoal::testing::RedisServer;
using ::shoal::testing::RunCli;
using ::shoal::testing::Square;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Entries under `root` (not following links) that group or others may
// read, write or enter, each as "PATH MODE".
std::vector<std::string> OpenToOthers(const std::string& root) {
  std::vector<std::string> open;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st;
    if (lstat(it->path().c_str(), &st) != 0 || S_ISLNK(st.st_mode)) continue;
    if ((st.st_mode & 077) != 0) {
      char mode[8];
      snprintf(mode, sizeof(mode), "%o", st.st_mode & 0777);
      open.push_back(absl::StrCat(it->path().string(), " ", mode));
    }
  }
  return open;
}

mode_t CurrentUmask() {
  mode_t mask = umask(0);
  umask(mask);
  return mask;
}

class SessionFilesTest : public shoal::testing::DriverClusterTest {};

TEST_F(SessionFilesTest, NothingASessionHoldsIsOpenToOthers) {
  ClusterSpec spec;
  spec.nodes = {{"files-head", 2, ""}, {"files-node", 2, ""}};
  StartAndConnect(spec);
  // Workers on both nodes, a job with a secret in its output.
  std::vector<shoal::ObjectRef<int64_t>> squares;
  for (int64_t i = 0; i < 8; ++i) {
    squares.push_back(shoal::Task(Square).Remote(i));
  }
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(shoal::Get(squares[i]), i * i);
  std::string out;
  ASSERT_EQ(RunCli({"job", "submit", "--temp-dir", cluster_->temp_dir(0),
                    "--submission-id", "files-job", "--", "sh", "-c",
                    "echo secret-output; umask"},
                   &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("secret-output"));
  // The job's own files are made as its user makes them: Shoal's mask is
  // not forced on the programs it runs.
  char mask[8];
  snprintf(mask, sizeof(mask), "%04o", CurrentUmask());
  EXPECT_THAT(out, HasSubstr(mask));

  // Each node's temp dir, with its session folders.
  for (size_t node = 0; node < 2; ++node) {
    EXPECT_THAT(OpenToOthers(cluster_->temp_dir(node)), IsEmpty());
  }
  std::vector<std::string> job_logs;
  for (size_t node = 0; node < 2; ++node) {
    const std::string session =
        std::filesystem::canonical(cluster_->session_dir(node)).string();
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(session)) {
      const std::string name = entry.path().filename().string();
      if (absl::StartsWith(name, "job-") && absl::EndsWith(name, ".log")) {
        job_logs.push_back(entry.path().string());
      }
    }
    struct stat st;
    ASSERT_EQ(stat(session.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u) << session;
    for (const char* file : {"token", "head.db", "head.db-wal"}) {
      const std::string path = session + "/" + file;
      if (stat(path.c_str(), &st) == 0) {
        EXPECT_EQ(st.st_mode & 0777, 0600u) << path;
      }
    }
  }
  ASSERT_FALSE(job_logs.empty());
  for (const std::string& log : job_logs) {
    struct stat st;
    ASSERT_EQ(stat(log.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << log;
  }
}

// A cluster whose head keeps its state in a Redis server that asks for a
// password: neither that password nor the cluster's token is in any
// process's arguments, and the password is in no process's environment.
TEST(SecretsTest, NoProcessShowsThePasswordOrTheToken) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  const std::string password = "pw-" + shoal::RandomHex(12);
  ASSERT_TRUE((*redis)->Cli({"CONFIG", "SET", "requirepass", password}).ok());
  char tmpl[] = "/tmp/shoal-secrets-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string scratch = tmpl;
  const std::string url_file = scratch + "/storage-url";
  ASSERT_TRUE(shoal::WriteFile(url_file,
                               absl::StrCat("redis://:", password,
                                            "@127.0.0.1:", (*redis)->port()),
                               0600)
                  .ok());

  ClusterSpec spec;
  NodeSpec head{"secret-head", 2, ""};
  head.extra_args = {"--storage-file", url_file};
  spec.nodes = {head, {"secret-node", 2, ""}};
  auto cluster = shoal::testing::TestCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  (*cluster)->Connect();
  EXPECT_EQ(shoal::Get(shoal::Task(Square).Remote(int64_t{7})), 49);
  std::string out;
  ASSERT_EQ(RunCli({"job", "submit", "--no-wait", "--temp-dir",
                    (*cluster)->temp_dir(0), "--", "sleep", "60"},
                   &out),
            0)
      << out;
  const std::string job = std::string(absl::StripAsciiWhitespace(
      out.substr(out.find_last_of('\n', out.size() - 2) + 1)));
  for (int i = 0; i < 100; ++i) {
    RunCli({"job", "status", "--temp-dir", (*cluster)->temp_dir(0), job}, &out);
    if (absl::StrContains(out, "RUNNING")) break;
    usleep(100000);
  }
  EXPECT_THAT(out, HasSubstr("RUNNING"));

  // The head, both agents, the workers and the job are all running now.
  EXPECT_THAT(ProcessesMentioning(password), IsEmpty());
  EXPECT_THAT(ProcessesMentioning((*cluster)->token()), IsEmpty());
  EXPECT_THAT(shoal::testing::ProcessesMentioning(password, "environ"),
              IsEmpty());
  // Nor is it in any log; the session keeps it in one 0600 file.
  const std::string session =
      std::filesystem::canonical((*cluster)->session_dir(0)).string();
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(session)) {
    if (!entry.is_regular_file() || entry.path().filename() == "storage") {
      continue;
    }
    auto text = shoal::ReadFile(entry.path().string());
    if (text.ok()) {
      EXPECT_FALSE(absl::StrContains(*text, password)) << entry.path();
    }
  }
  EXPECT_FALSE(std::filesystem::exists(session + "/storage.next"));
  for (size_t node = 0; node < 2; ++node) {
    EXPECT_THAT(OpenToOthers((*cluster)->temp_dir(node)), IsEmpty());
  }

  shoal::Shutdown();
  (*cluster)->Stop();
  std::filesystem::remove_all(scratch);
}

// The words /bin/sh passes to `shoal` when `line` is pasted into it, `shoal`
// being a function that prints them. Runs in `cwd`.
std::vector<std::string> PastedWords(const std::string& line,
                                     const std::string& cwd) {
  int out[2];
  if (pipe(out) != 0) return {"pipe failed"};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    if (chdir(cwd.c_str()) != 0) _exit(126);
    std::string script =
        absl::StrCat("shoal() { printf '%s\\0' \"$@\"; }\n", line, "\n");
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) > 0;)
    text.append(buf, n);
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return {"sh failed"};
  if (!text.empty() && text.back() == '\0') text.pop_back();
  return absl::StrSplit(text, '\0');
}

// The line of `printed` after the one containing `intro`, without its
// leading spaces.
std::string LineAfter(const std::string& printed, const std::string& intro) {
  size_t at = printed.find(intro);
  if (at == std::string::npos) return "";
  size_t begin = printed.find('\n', at);
  if (begin == std::string::npos) return "";
  begin = printed.find_first_not_of(' ', begin + 1);
  return printed.substr(begin, printed.find('\n', begin) - begin);
}

TEST(PrintedCommandsTest, ATokenOfShellSyntaxIsPassedAsIs) {
  char tmpl[] = "/tmp/shoal-printed-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  const std::string temp_dir = root + "/it's a dir";
  const std::string token = "a b;touch X 'q' \"$(touch Y)\" `touch Z` $HOME";
  std::string out;
  int started = RunCli({"start", "--head", "--port", "0", "--node-ip-address",
                        "127.0.0.1", "--dashboard-port", "0", "--num-cpus", "1",
                        "--temp-dir", temp_dir, "--token", token},
                       &out);
  ASSERT_EQ(started, 0) << out;
  const std::string address =
      shoal::ReadSessionFile(temp_dir + "/session_latest", "cluster_address");

  const std::string join = LineAfter(out, "To add another host");
  EXPECT_THAT(PastedWords(join, root),
              ElementsAre("start", "--address=" + address, "--token=" + token))
      << join;
  // The other hint, SHOAL_TOKEN=... as printed, read back by the shell.
  size_t set = out.find("(or set ");
  ASSERT_NE(set, std::string::npos) << out;
  set += strlen("(or set ");
  const std::string assignment = out.substr(set, out.find(")\n", set) - set);
  EXPECT_THAT(PastedWords(assignment + "\nshoal \"$SHOAL_TOKEN\"", root),
              ElementsAre(token))
      << assignment;
  // And a command naming the temp dir, which holds a quote and a space.
  size_t see = out.find("To see the cluster:");
  ASSERT_NE(see, std::string::npos) << out;
  std::string status_line = out.substr(see, out.find('\n', see) - see);
  status_line = status_line.substr(status_line.find("shoal status"));
  EXPECT_THAT(PastedWords(status_line, root),
              ElementsAre("status", "--temp-dir", temp_dir))
      << status_line;
  // Nothing in the token ran.
  for (const char* made : {"X", "Y", "Z"}) {
    EXPECT_FALSE(std::filesystem::exists(root + "/" + made)) << made;
  }
  EXPECT_THAT(ProcessesMentioning(token), IsEmpty());
  RunCli({"stop", "--temp-dir", temp_dir}, &out);
  std::filesystem::remove_all(root);
}

// A node id names the node's files and shared memory: one that is a path,
// or could be read as one, is refused before any folder or process is
// made, with what is allowed.
TEST(NodeIdTest, AnIdThatIsAPathIsRefusedBeforeAnythingStarts) {
  char tmpl[] = "/tmp/shoal-node-id-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  for (const std::string& id :
       {std::string("../../etc"), std::string("a/b"), std::string(".hidden"),
        std::string(".."), std::string("a b"), std::string("n\n1"),
        std::string(65, 'n')}) {
    const std::string temp_dir = root + "/t";
    std::string out;
    EXPECT_EQ(RunCli({"start", "--head", "--port", "0", "--node-ip-address",
                      "127.0.0.1", "--num-cpus", "1", "--temp-dir", temp_dir,
                      "--node-id", id},
                     &out),
              2)
        << id << ": " << out;
    EXPECT_THAT(out, HasSubstr("letters, digits, '-', '_' and '.'")) << id;
    EXPECT_FALSE(std::filesystem::exists(temp_dir)) << id;
    EXPECT_EQ(RunCli({"start", "--address", "127.0.0.1:1", "--token", "t",
                      "--temp-dir", temp_dir, "--node-id", id},
                     &out),
              2)
        << id << ": " << out;
    EXPECT_FALSE(std::filesystem::exists(temp_dir)) << id;
  }
  // A hand-made agent command line is checked too.
  std::string out;
  EXPECT_EQ(RunCli({"_agent", "--address", "127.0.0.1:1", "--session-dir", root,
                    "--node-id", "../x"},
                   &out, {"SHOAL_TOKEN=t"}),
            1);
  EXPECT_THAT(out, HasSubstr("is not allowed"));
  EXPECT_THAT(OpenToOthers(root), IsEmpty());
  std::filesystem::remove_all(root);
}

}  // namespace
