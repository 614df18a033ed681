#include "rpc/tls.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/blocking_channel.h"
#include "rpc/event_loop.h"
#include "rpc/rpc.h"
#include "rpc/rpc_testing.h"
#include "rpc/tls_testing.h"

namespace shoal::rpc {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kToken[] = "tls-test-token";
constexpr int kEcho = 1000;
constexpr auto kWait = std::chrono::seconds(20);

using Tls = std::shared_ptr<const TlsContext>;

const TestCertificates& Certs() { return SharedTestCertificates(); }

Tls Context(const TlsConfig& config) {
  absl::StatusOr<Tls> tls = TlsContext::Create(config);
  EXPECT_TRUE(tls.ok()) << tls.status();
  return tls.ok() ? *tls : nullptr;
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  std::string path = absl::StrCat(testing::TempDir(), "/", name);
  std::ofstream(path) << text;
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A client that trusts the cluster's CA and has no certificate.
TlsConfig CaOnly() { return TlsConfig{"", "", Certs().ca, false}; }

class TlsRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loop = EventLoop::Create("tls_test");
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
  }
  void TearDown() override {
    loop_->RunSync([this] {
      channels_.clear();
      servers_.clear();
    });
    loop_->Stop();
  }

  // An echo server on 127.0.0.1 with `tls` (null: plain); its port.
  int StartServer(Tls tls) {
    int port = 0;
    loop_->RunSync([&] {
      auto server =
          Server::Create(loop_.get(), "127.0.0.1", 0, kToken, std::move(tls));
      ASSERT_TRUE(server.ok()) << server.status();
      (*server)->Register(kEcho, [](std::string_view payload, Responder r) {
        r.ReplyRaw(std::string(payload));
      });
      port = (*server)->port();
      servers_.push_back(std::move(*server));
    });
    return port;
  }

  Channel* NewChannel(int port, Tls tls, const std::string& token = kToken) {
    Channel* out = nullptr;
    loop_->RunSync([&] {
      channels_.push_back(std::make_unique<TcpChannel>(
          loop_.get(), absl::StrCat("127.0.0.1:", port), token, "test",
          std::move(tls)));
      out = channels_.back().get();
    });
    return out;
  }

  absl::StatusOr<std::string> Call(Channel* channel, std::string payload) {
    auto done = std::make_shared<std::promise<absl::StatusOr<std::string>>>();
    auto future = done->get_future();
    loop_->Post([=] {
      channel->Call(kEcho, payload, [done](absl::StatusOr<std::string> r) {
        done->set_value(std::move(r));
      });
    });
    if (future.wait_for(kWait) != std::future_status::ready) {
      return absl::InternalError("no answer within 20 s: the call hangs");
    }
    return future.get();
  }

  std::unique_ptr<EventLoop> loop_;
  std::vector<std::unique_ptr<Server>> servers_;  // loop thread only
  std::vector<std::unique_ptr<Channel>> channels_;
};

TEST_F(TlsRpcTest, PayloadsOfEverySizeRoundTripOverTls) {
  int port = StartServer(Context(Certs().Config()));
  Channel* channel = NewChannel(port, Context(CaOnly()));
  std::string big(8 << 20, '\0');  // many TLS records, many socket buffers
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  for (const std::string& payload : {std::string(), std::string("x"), big}) {
    SCOPED_TRACE(payload.size());
    absl::StatusOr<std::string> reply = Call(channel, payload);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_TRUE(*reply == payload);
  }
}

TEST_F(TlsRpcTest, ManyPipelinedCallsOverTlsAllGetTheirOwnReply) {
  static constexpr int kCalls = 10000;
  int port = StartServer(Context(Certs().Config(/*mutual=*/true)));
  Channel* channel = NewChannel(port, Context(Certs().Config(true)));
  // The first wave waits for both handshakes, the second does not.
  for (int wave = 0; wave < 2; ++wave) {
    EXPECT_THAT(PipelinedEchoes(loop_.get(), channel, kEcho, kCalls,
                                absl::StrCat(wave)),
                IsEmpty())
        << "wave " << wave;
  }
}

TEST_F(TlsRpcTest, TokenIsStillCheckedInsideTls) {
  int port = StartServer(Context(Certs().Config()));
  absl::StatusOr<std::string> reply =
      Call(NewChannel(port, Context(CaOnly()), "wrong"), "x");
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kPermissionDenied)
      << reply.status();
}

TEST_F(TlsRpcTest, ServerSignedByAnotherCaIsRefusedByTheClient) {
  int port = StartServer(Context(Certs().Config()));
  Tls other = Context(TlsConfig{"", "", Certs().other_ca, false});
  absl::StatusOr<std::string> reply = Call(NewChannel(port, other), "x");
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(reply.status().message(),
              AllOf(HasSubstr("is not trusted"), HasSubstr("--tls-ca")));
  // The server still serves clients that trust it.
  EXPECT_TRUE(Call(NewChannel(port, Context(CaOnly())), "y").ok());
}

TEST_F(TlsRpcTest, MutualTlsRefusesAClientWithoutACertificate) {
  int port = StartServer(Context(Certs().Config(/*mutual=*/true)));
  testing::internal::CaptureStderr();
  absl::StatusOr<std::string> reply =
      Call(NewChannel(port, Context(CaOnly())), "x");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(reply.status().message(),
              AllOf(HasSubstr("requires a client certificate"),
                    HasSubstr("--tls-cert")));
  EXPECT_THAT(log, AllOf(HasSubstr("refused a TLS connection"),
                         HasSubstr("presented no certificate")));
  EXPECT_TRUE(Call(NewChannel(port, Context(Certs().Config(true))), "y").ok());
}

TEST_F(TlsRpcTest, MutualTlsRefusesAClientCertificateOfAnotherCa) {
  int port = StartServer(Context(Certs().Config(/*mutual=*/true)));
  const TestCertificates& c = Certs();
  // Trusts both CAs (so it takes the server's certificate), but its own
  // certificate is the other CA's, which the server does not trust.
  std::string both =
      WriteTemp("both-cas.pem", ReadAll(c.ca) + ReadAll(c.other_ca));
  Tls stranger = Context(TlsConfig{c.other_cert, c.other_key, both, true});
  testing::internal::CaptureStderr();
  absl::StatusOr<std::string> reply = Call(NewChannel(port, stranger), "x");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(reply.status().message(), HasSubstr("refused this process's"));
  EXPECT_THAT(log, HasSubstr("is not trusted"));
}

TEST_F(TlsRpcTest, PlainClientOfATlsServerIsToldToUseTls) {
  int port = StartServer(Context(Certs().Config()));
  absl::StatusOr<std::string> reply = Call(NewChannel(port, nullptr), "x");
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(reply.status().message(),
              AllOf(HasSubstr("uses TLS"), HasSubstr("--tls-ca"),
                    HasSubstr("SHOAL_TLS_CA")));
}

TEST_F(TlsRpcTest, TlsClientOfAPlainServerIsToldItDoesNotUseTls) {
  int port = StartServer(nullptr);
  absl::StatusOr<std::string> reply =
      Call(NewChannel(port, Context(CaOnly())), "x");
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(reply.status().message(), HasSubstr("does not use TLS"));
  // The plain server goes on serving plain clients.
  EXPECT_TRUE(Call(NewChannel(port, nullptr), "y").ok());
}

TEST_F(TlsRpcTest, BlockingChannelOverTls) {
  int mutual_port = StartServer(Context(Certs().Config(/*mutual=*/true)));
  int plain_port = StartServer(nullptr);
  auto connect = [](int port, Tls tls) {
    return BlockingChannel::Connect(absl::StrCat("127.0.0.1:", port), kToken,
                                    "test", 10000, std::move(tls));
  };
  auto channel = connect(mutual_port, Context(Certs().Config(true)));
  ASSERT_TRUE(channel.ok()) << channel.status();
  std::string big(3 << 20, 'b');
  for (const std::string& payload : {std::string("small"), big}) {
    absl::StatusOr<std::string> reply = (*channel)->Call(kEcho, payload, 10000);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_TRUE(*reply == payload);
  }

  auto no_cert = connect(mutual_port, Context(CaOnly()));
  EXPECT_EQ(no_cert.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(no_cert.status().message(),
              HasSubstr("requires a client certificate"));
  auto plain = connect(mutual_port, nullptr);
  EXPECT_THAT(plain.status().message(), HasSubstr("uses TLS"));
  auto tls_to_plain = connect(plain_port, Context(CaOnly()));
  EXPECT_THAT(tls_to_plain.status().message(), HasSubstr("does not use TLS"));
}

TEST_F(TlsRpcTest, ServerWithoutACertificateFailsToStart) {
  absl::StatusOr<std::unique_ptr<Server>> server;
  loop_->RunSync([&] {
    server =
        Server::Create(loop_.get(), "127.0.0.1", 0, kToken, Context(CaOnly()));
  });
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(server.status().message(), HasSubstr("--tls-cert"));
}

// ---- loading the files ----

TEST(TlsContextTest, BadConfigsAreRefusedNamingTheFileAndTheFix) {
  const TestCertificates& c = Certs();
  std::string garbage = WriteTemp("garbage.pem", "not a certificate\n");
  struct Case {
    TlsConfig config;
    std::vector<std::string> says;
  };
  const Case cases[] = {
      {{c.cert, c.key, "", false}, {"--tls-ca", "no CA"}},
      {{c.cert, "", c.ca, false}, {"--tls-key", "go together"}},
      {{"", "", c.ca, true}, {"mutual", "--tls-cert"}},
      {{c.cert, c.key, "/nonexistent/ca.pem", false},
       {"/nonexistent/ca.pem", "No such file", "SHOAL_TLS_CA"}},
      {{c.cert, c.key, garbage, false},
       {garbage, "is not a PEM certificate", "BEGIN CERTIFICATE"}},
      {{garbage, c.key, c.ca, false}, {"--tls-cert", garbage}},
      {{c.cert, garbage, c.ca, false}, {"--tls-key", "not a PEM private key"}},
      {{c.cert, c.other_key, c.ca, false},
       {c.other_key, "does not match", c.cert}},
      {{c.other_cert, c.other_key, c.ca, false},
       {c.other_cert, "is not signed by", c.ca}},
  };
  for (const Case& k : cases) {
    absl::StatusOr<Tls> tls = TlsContext::Create(k.config);
    ASSERT_FALSE(tls.ok()) << k.says[0];
    for (const std::string& s : k.says) {
      EXPECT_THAT(std::string(tls.status().message()), HasSubstr(s));
    }
  }
  EXPECT_TRUE(TlsContext::Create(c.Config(true)).ok());
  EXPECT_TRUE(TlsContext::Create(CaOnly()).ok());
}

TEST(TlsConfigTest, TravelsThroughTheEnvironmentWithAbsolutePaths) {
  TlsConfig config{"cert.pem", "key.pem", "/etc/ca.pem", true};
  config.ExportToEnvironment();
  TlsConfig back = TlsConfig::FromEnvironment();
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  EXPECT_EQ(back.cert, absl::StrCat(cwd, "/cert.pem"));
  EXPECT_EQ(back.key, absl::StrCat(cwd, "/key.pem"));
  EXPECT_EQ(back.ca, "/etc/ca.pem");
  EXPECT_TRUE(back.mutual);
  TlsConfig{}.ExportToEnvironment();
  EXPECT_FALSE(TlsConfig::FromEnvironment().enabled());
}

}  // namespace
}  // namespace shoal::rpc
