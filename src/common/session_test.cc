#include "common/session.h"

#include <arpa/inet.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/environment_testing.h"
#include "common/files.h"
#include "common/net.h"
#include "common/process.h"
#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// A fresh folder under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/shoal_session_test_XXXXXX";
    const char* made = mkdtemp(tmpl);
    EXPECT_NE(made, nullptr) << "mkdtemp: " << strerror(errno);
    if (made != nullptr) path_ = made;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A pid that belonged to a process that has exited and been reaped.
pid_t DeadPid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  EXPECT_GT(pid, 0);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return pid;
}

// A session folder with the given files, made by hand so that names (and so
// their order) are under the test's control.
std::string MakeSession(
    const std::string& temp_dir, const std::string& name,
    const std::vector<std::pair<std::string, std::string>>& files) {
  std::string dir = absl::StrCat(temp_dir, "/", name);
  EXPECT_TRUE(MakeDirs(dir).ok());
  for (const auto& [file, contents] : files) {
    EXPECT_TRUE(WriteFile(dir + "/" + file, contents).ok());
  }
  return dir;
}

// ---- session ----

TEST(SessionTest, CreateSessionDirMakesLogsAndLatestLink) {
  TempDir temp;
  // A parent that does not exist yet is created too.
  const std::string parent = temp.path() + "/nested/shoal";
  absl::StatusOr<std::string> dir = CreateSessionDir(parent);
  ASSERT_TRUE(dir.ok()) << dir.status();

  EXPECT_THAT(*dir, StartsWith(parent + "/session_"));
  struct stat st;
  ASSERT_EQ(stat((*dir + "/logs").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));

  const std::string link = parent + "/session_latest";
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(std::filesystem::canonical(link), std::filesystem::canonical(*dir));
  // Relative, so that the folder can be moved.
  EXPECT_EQ(std::filesystem::read_symlink(link),
            std::filesystem::path(*dir).filename());
  // No temporary link is left behind.
  EXPECT_THAT(ListSessionDirs(parent), ElementsAre(*dir));
}

TEST(SessionTest, CreateSessionDirRepointsLatestLink) {
  TempDir temp;
  const std::string older =
      MakeSession(temp.path(), "session_2000-01-01_00-00-00_1", {});
  ASSERT_EQ(symlink("session_2000-01-01_00-00-00_1",
                    (temp.path() + "/session_latest").c_str()),
            0);
  absl::StatusOr<std::string> dir = CreateSessionDir(temp.path());
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(std::filesystem::canonical(temp.path() + "/session_latest"),
            std::filesystem::canonical(*dir));
  EXPECT_THAT(ListSessionDirs(temp.path()), ElementsAre(*dir, older));
}

TEST(SessionTest, ListSessionDirsIsNewestFirstAndSkipsOtherEntries) {
  TempDir temp;
  const std::string a =
      MakeSession(temp.path(), "session_2024-01-01_10-00-00_100", {});
  const std::string c =
      MakeSession(temp.path(), "session_2024-03-01_09-00-00_5", {});
  const std::string b =
      MakeSession(temp.path(), "session_2024-02-01_23-59-59_7", {});
  MakeSession(temp.path(), "not_a_session", {});
  ASSERT_EQ(symlink(c.c_str(), (temp.path() + "/session_latest").c_str()), 0);
  // A link being swapped into place by CreateSessionDir.
  ASSERT_EQ(symlink(c.c_str(), (temp.path() + "/session_latest.123").c_str()),
            0);

  EXPECT_THAT(ListSessionDirs(temp.path()), ElementsAre(c, b, a));
}

TEST(SessionTest, ListSessionDirsOfMissingFolderIsEmpty) {
  TempDir temp;
  EXPECT_THAT(ListSessionDirs(temp.path() + "/missing"), IsEmpty());
}

TEST(SessionTest, ReadSessionFileTrimsAndDefaultsToEmpty) {
  TempDir temp;
  const std::string dir = MakeSession(temp.path(), "session_x",
                                      {{"token", "  abc123\n"}, {"empty", ""}});
  EXPECT_EQ(ReadSessionFile(dir, "token"), "abc123");
  EXPECT_EQ(ReadSessionFile(dir, "empty"), "");
  EXPECT_EQ(ReadSessionFile(dir, "missing"), "");
}

TEST(SessionTest, LivePid) {
  TempDir temp;
  const std::string self = absl::StrCat(getpid());
  const std::string dead = absl::StrCat(DeadPid());
  struct Case {
    std::string label;
    std::optional<std::string> contents;  // nullopt: no pid file
    int64_t want;
  };
  const std::vector<Case> cases = {
      {"live", self, getpid()},
      {"live with newline", self + "\n", getpid()},
      {"dead", dead, 0},
      {"garbage", "not a pid", 0},
      {"empty", "", 0},
      {"zero", "0", 0},
      {"negative", "-1", 0},
      // Does not fit a pid_t; truncated it would name pid 1.
      {"too large", "4294967297", 0},
      {"missing", std::nullopt, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string dir = temp.path() + "/" + std::to_string(&c - &cases[0]);
    ASSERT_TRUE(MakeDirs(dir).ok());
    if (c.contents) {
      ASSERT_TRUE(WriteFile(dir + "/head.pid", *c.contents).ok());
    }
    EXPECT_EQ(LivePid(dir, "head"), c.want);
  }
}

TEST(SessionTest, FindLocalClusterPicksNewestLiveSessionWithAddress) {
  TempDir temp;
  const std::string self = absl::StrCat(getpid());
  const std::string dead = absl::StrCat(DeadPid());
  // Newest: alive but has not written its address yet.
  MakeSession(temp.path(), "session_2024-01-04_00-00-00_4",
              {{"head.pid", self}, {"token", "t4"}});
  // Dead head.
  MakeSession(temp.path(), "session_2024-01-03_00-00-00_3",
              {{"head.pid", dead},
               {"cluster_address", "10.0.0.3:6379"},
               {"token", "t3"}});
  // A live agent that joined a cluster: the one to pick.
  const std::string want =
      MakeSession(temp.path(), "session_2024-01-02_00-00-00_2",
                  {{"agent.pid", self},
                   {"cluster_address", "10.0.0.2:6379\n"},
                   {"token", "t2\n"}});
  // Older live head.
  MakeSession(temp.path(), "session_2024-01-01_00-00-00_1",
              {{"head.pid", self},
               {"cluster_address", "10.0.0.1:6379"},
               {"token", "t1"}});

  LocalCluster c = FindLocalCluster(temp.path());
  EXPECT_EQ(c.session_dir, want);
  EXPECT_EQ(c.head_address, "10.0.0.2:6379");
  EXPECT_EQ(c.token, "t2");
}

TEST(SessionTest, FindLocalClusterWithoutLiveSessionIsEmpty) {
  TempDir temp;
  MakeSession(temp.path(), "session_2024-01-01_00-00-00_1",
              {{"head.pid", absl::StrCat(DeadPid())},
               {"cluster_address", "10.0.0.1:6379"}});
  LocalCluster c = FindLocalCluster(temp.path());
  EXPECT_EQ(c.session_dir, "");
  EXPECT_EQ(c.head_address, "");
  EXPECT_EQ(c.token, "");
}

class ResolveClusterAddressTest : public ::testing::Test {
 protected:
  // Neither variable leaks in from the environment the test runs in.
  ScopedEnv address_env_{"SHOAL_ADDRESS", std::nullopt};
  ScopedEnv token_env_{"SHOAL_TOKEN", std::nullopt};
  TempDir temp_;

  void StartLocalHead() {
    MakeSession(temp_.path(), "session_2024-01-01_00-00-00_1",
                {{"head.pid", absl::StrCat(getpid())},
                 {"cluster_address", "127.0.0.1:6379"},
                 {"token", "local-token"}});
  }
};

TEST_F(ResolveClusterAddressTest, ExplicitValuesWin) {
  StartLocalHead();
  ScopedEnv address("SHOAL_ADDRESS", "10.0.0.9:1");
  ScopedEnv token("SHOAL_TOKEN", "env-token");
  std::string addr = "10.0.0.5:6379", tok = "explicit-token";
  ASSERT_TRUE(ResolveClusterAddress(temp_.path(), &addr, &tok).ok());
  EXPECT_EQ(addr, "10.0.0.5:6379");
  EXPECT_EQ(tok, "explicit-token");
}

TEST_F(ResolveClusterAddressTest, ExplicitAddressOfLocalClusterGetsItsToken) {
  StartLocalHead();
  std::string addr = "127.0.0.1:6379", tok;
  ASSERT_TRUE(ResolveClusterAddress(temp_.path(), &addr, &tok).ok());
  EXPECT_EQ(tok, "local-token");
}

TEST_F(ResolveClusterAddressTest, ExplicitAddressElsewhereGetsNoLocalToken) {
  StartLocalHead();
  std::string addr = "10.0.0.5:6379", tok;
  ASSERT_TRUE(ResolveClusterAddress(temp_.path(), &addr, &tok).ok());
  EXPECT_EQ(addr, "10.0.0.5:6379");
  EXPECT_EQ(tok, "");
}

TEST_F(ResolveClusterAddressTest, EnvironmentBeatsLocalCluster) {
  StartLocalHead();
  ScopedEnv address("SHOAL_ADDRESS", "10.0.0.7:6379");
  ScopedEnv token("SHOAL_TOKEN", "env-token");
  std::string addr, tok;
  ASSERT_TRUE(ResolveClusterAddress(temp_.path(), &addr, &tok).ok());
  EXPECT_EQ(addr, "10.0.0.7:6379");
  EXPECT_EQ(tok, "env-token");
}

TEST_F(ResolveClusterAddressTest, EnvironmentWithoutLocalCluster) {
  ScopedEnv address("SHOAL_ADDRESS", "10.0.0.7:6379");
  std::string addr, tok;
  ASSERT_TRUE(ResolveClusterAddress(temp_.path(), &addr, &tok).ok());
  EXPECT_EQ(addr, "10.0.0.7:6379");
  EXPECT_EQ(tok, "");
}

TEST_F(ResolveClusterAddressTest, FallsBackToLocalClusterAndItsToken) {
  StartLocalHead();
  std::string addr, tok;
  ASSERT_TRUE(ResolveClusterAddress(temp_.path(), &addr, &tok).ok());
  EXPECT_EQ(addr, "127.0.0.1:6379");
  EXPECT_EQ(tok, "local-token");
}

TEST_F(ResolveClusterAddressTest, TokenFromStoppedSessionWithSameAddress) {
  MakeSession(temp_.path(), "session_2024-01-01_00-00-00_1",
              {{"head.pid", absl::StrCat(DeadPid())},
               {"cluster_address", "10.0.0.7:6379"},
               {"token", "old-token"}});
  std::string addr = "10.0.0.7:6379", tok;
  ASSERT_TRUE(ResolveClusterAddress(temp_.path(), &addr, &tok).ok());
  EXPECT_EQ(tok, "old-token");
}

TEST_F(ResolveClusterAddressTest, NothingFoundSaysHowToStartOne) {
  // An empty SHOAL_ADDRESS counts as unset.
  ScopedEnv address("SHOAL_ADDRESS", "");
  std::string addr, tok;
  absl::Status status = ResolveClusterAddress(temp_.path(), &addr, &tok);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("shoal start --head"));
  EXPECT_THAT(status.message(), HasSubstr("--address"));
  EXPECT_THAT(status.message(), HasSubstr(temp_.path()));
}

// ---- util ----

TEST(UtilTest, SplitHostPort) {
  struct Case {
    std::string address;
    bool ok;
    std::string host;
    int port;
  };
  const std::vector<Case> cases = {
      {"127.0.0.1:6379", true, "127.0.0.1", 6379},
      {"head.example.com:1", true, "head.example.com", 1},
      {"localhost:65535", true, "localhost", 65535},
      {"[::1]:80", true, "[::1]", 80},
      {"", false, "", 0},
      {"127.0.0.1", false, "", 0},
      {"127.0.0.1:", false, "", 0},
      {":6379", false, "", 0},
      {"host:0", false, "", 0},
      {"host:-1", false, "", 0},
      {"host:65536", false, "", 0},
      {"host:port", false, "", 0},
      {"host:12x", false, "", 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.address);
    std::string host = "unchanged";
    int port = -7;
    absl::Status status = SplitHostPort(c.address, &host, &port);
    EXPECT_EQ(status.ok(), c.ok) << status;
    if (c.ok) {
      EXPECT_EQ(host, c.host);
      EXPECT_EQ(port, c.port);
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(status.message(), HasSubstr("HOST:PORT"));
      EXPECT_EQ(host, "unchanged");
    }
  }
}

TEST(UtilTest, WriteFileSetsModeAndReplacesAtomically) {
  TempDir temp;
  const std::string path = temp.path() + "/token";
  struct Case {
    int mode;
    std::string contents;
  };
  // The second write replaces the first, mode included (less the umask,
  // 022 in tests: see WriteFileNeverOpensMoreThanTheUmaskAllows).
  for (const Case& c : std::vector<Case>{{0600, "secret"},
                                         {0644, "public"},
                                         {0600, std::string("a\0b", 3)}}) {
    ASSERT_TRUE(WriteFile(path, c.contents, c.mode).ok());
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, static_cast<mode_t>(c.mode));
    absl::StatusOr<std::string> read = ReadFile(path);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, c.contents);
  }
  // Only the file itself is left: no temporary.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(temp.path())) {
    names.push_back(e.path().filename());
  }
  EXPECT_THAT(names, ElementsAre("token"));
}

// The mask of this process set to `mask` for the scope, and restored.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(umask(mask)) {}
  ~ScopedUmask() { umask(old_); }

 private:
  mode_t old_;
};

TEST(UtilTest, WriteFileNeverOpensMoreThanTheUmaskAllows) {
  TempDir temp;
  const std::string path = temp.path() + "/head.pid";
  ScopedUmask mask(077);
  ASSERT_TRUE(WriteFile(path, "1", 0644).ok());
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(SessionTest, SessionFoldersAreTheirUsersAloneWhateverTheUmask) {
  TempDir temp;
  ScopedUmask mask(0);
  const std::string parent = temp.path() + "/shoal";
  absl::StatusOr<std::string> dir = CreateSessionDir(parent);
  ASSERT_TRUE(dir.ok()) << dir.status();
  for (const std::string& d : {parent, *dir, *dir + "/logs"}) {
    struct stat st;
    ASSERT_EQ(stat(d.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u) << d;
  }
}

TEST(SessionTest, KeepSessionPrivateTakesGroupAndOtherOff) {
  TempDir temp;
  ScopedUmask mask(0);
  const std::string dir = temp.path() + "/session_1";
  ASSERT_TRUE(MakeDirs(dir + "/logs", 0755).ok());
  ASSERT_TRUE(WriteFile(dir + "/head.db", "x", 0644).ok());
  ASSERT_TRUE(WriteFile(dir + "/logs/job-a.log", "x", 0666).ok());
  ASSERT_TRUE(WriteFile(temp.path() + "/outside", "x", 0644).ok());
  ASSERT_EQ(symlink("../outside", (dir + "/link").c_str()), 0);
  KeepSessionPrivate(dir);
  auto mode = [](const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 ? st.st_mode & 0777 : 01000u;
  };
  EXPECT_EQ(mode(dir), 0700u);
  EXPECT_EQ(mode(dir + "/logs"), 0700u);
  EXPECT_EQ(mode(dir + "/head.db"), 0600u);
  EXPECT_EQ(mode(dir + "/logs/job-a.log"), 0600u);
  // A link is not followed out of the session.
  EXPECT_EQ(mode(temp.path() + "/outside"), 0644u);
}

TEST(SessionTest, AnAbandonedSessionGivesLatestBack) {
  TempDir temp;
  absl::StatusOr<std::string> first = CreateSessionDir(temp.path());
  ASSERT_TRUE(first.ok());
  std::string previous;
  absl::StatusOr<std::string> failed = CreateSessionDir(temp.path(), &previous);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(previous, std::filesystem::path(*first).filename().string());
  AbandonSessionDir(temp.path(), *failed, previous);
  EXPECT_EQ(std::filesystem::canonical(temp.path() + "/session_latest"),
            std::filesystem::canonical(*first));

  // The first session of a temp dir leaves no link; a link another start
  // has moved on is left alone.
  TempDir fresh;
  absl::StatusOr<std::string> only = CreateSessionDir(fresh.path(), &previous);
  ASSERT_TRUE(only.ok());
  EXPECT_EQ(previous, "");
  absl::StatusOr<std::string> newer = CreateSessionDir(fresh.path());
  ASSERT_TRUE(newer.ok());
  AbandonSessionDir(fresh.path(), *only, previous);
  EXPECT_EQ(std::filesystem::canonical(fresh.path() + "/session_latest"),
            std::filesystem::canonical(*newer));
  AbandonSessionDir(fresh.path(), *newer, "");
  EXPECT_FALSE(std::filesystem::exists(fresh.path() + "/session_latest"));
}

TEST(SessionTest, NodeIdsThatNameFilesOnly) {
  for (const std::string& ok :
       {std::string("n"), std::string("cpu-0"), std::string("tpu_1.host"),
        std::string(64, 'a')}) {
    EXPECT_TRUE(CheckNodeId(ok).ok()) << ok;
  }
  for (const std::string& bad :
       {std::string(""), std::string("../../etc"), std::string("a/b"),
        std::string("."), std::string(".hidden"), std::string("a b"),
        std::string("a\nb"), std::string("\xc3\xa9"), std::string(65, 'a')}) {
    absl::Status st = CheckNodeId(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(st.message()),
                HasSubstr("letters, digits, '-', '_' and '.'"));
  }
}

TEST(UtilTest, WriteFileIntoMissingFolderFails) {
  TempDir temp;
  absl::Status status = WriteFile(temp.path() + "/missing/file", "x");
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(temp.path() + "/missing/file"));
}

TEST(UtilTest, ReadFileOfMissingFileIsNotFound) {
  TempDir temp;
  EXPECT_EQ(ReadFile(temp.path() + "/missing").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(UtilTest, Sha256File) {
  TempDir temp;
  struct Case {
    std::string contents;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"abc",
       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.contents);
    const std::string path = temp.path() + "/blob";
    ASSERT_TRUE(WriteFile(path, c.contents).ok());
    absl::StatusOr<std::string> hash = Sha256File(path);
    ASSERT_TRUE(hash.ok()) << hash.status();
    EXPECT_EQ(*hash, c.want);
  }
  EXPECT_EQ(Sha256File(temp.path() + "/missing").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(UtilTest, Sha256FileOfFileLargerThanOneRead) {
  TempDir temp;
  const std::string path = temp.path() + "/big";
  // 3 MiB of 'a': more than one of Sha256File's 1 MiB reads.
  ASSERT_TRUE(WriteFile(path, std::string(3 << 20, 'a')).ok());
  absl::StatusOr<std::string> hash = Sha256File(path);
  ASSERT_TRUE(hash.ok()) << hash.status();
  EXPECT_EQ(*hash,
            "6f850bc94ae6f7de14297c01616c36d712d22864497b28a63b81d776b035e656");
}

// The waitpid status of a child that runs `body`.
int ChildStatus(void (*body)()) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  EXPECT_GT(pid, 0);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

TEST(UtilTest, DescribeWaitStatus) {
  EXPECT_EQ(DescribeWaitStatus(ChildStatus([] { _exit(3); })),
            "exited with code 3");
  EXPECT_EQ(DescribeWaitStatus(ChildStatus([] { _exit(0); })),
            "exited with code 0");
  EXPECT_EQ(DescribeWaitStatus(ChildStatus([] { raise(SIGKILL); })),
            absl::StrCat("killed by signal 9 (", strsignal(SIGKILL), ")"));
  EXPECT_THAT(DescribeWaitStatus(ChildStatus([] { raise(SIGTERM); })),
              StartsWith("killed by signal 15 ("));
}

TEST(UtilTest, ProcessAlive) {
  EXPECT_TRUE(ProcessAlive(getpid()));
  EXPECT_FALSE(ProcessAlive(DeadPid()));
  EXPECT_FALSE(ProcessAlive(0));
  EXPECT_FALSE(ProcessAlive(-1));
  EXPECT_FALSE(ProcessAlive(int64_t{1} << 32 | 1));
}

TEST(UtilTest, PrimaryIpAddressIsIpv4) {
  const std::string ip = PrimaryIpAddress();
  in_addr addr;
  EXPECT_EQ(inet_pton(AF_INET, ip.c_str(), &addr), 1) << ip;
  EXPECT_TRUE(IsLocalAddress(ip)) << ip;
}

TEST(UtilTest, IsLocalAddress) {
  EXPECT_TRUE(IsLocalAddress("127.0.0.1"));
  EXPECT_TRUE(IsLocalAddress("localhost"));
  // TEST-NET-1 (RFC 5737) is never assigned to a real interface.
  EXPECT_FALSE(IsLocalAddress("192.0.2.1"));
}

TEST(UtilTest, MakeDirsCreatesEveryLevelAndIsIdempotent) {
  TempDir temp;
  const std::string deep = temp.path() + "/a/b/c";
  ASSERT_TRUE(MakeDirs(deep).ok());
  EXPECT_TRUE(PathExists(deep));
  EXPECT_TRUE(MakeDirs(deep).ok());
  EXPECT_FALSE(PathExists(temp.path() + "/a/b/d"));
}

TEST(UtilTest, RandomHex) {
  const std::string a = RandomHex(16);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(RandomHex(16), a);
}

}  // namespace
}  // namespace shoal
