// Object transfer with TLS on either side or both: pulls that work, and
// the errors a puller gets from a server of the other kind or that refuses
// its certificate.
#include <stdlib.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "object_plane/transfer_client.h"
#include "object_plane/transfer_server.h"
#include "rpc/tls.h"
#include "rpc/tls_testing.h"

namespace shoal::object_plane {
namespace {

using ::testing::HasSubstr;
using Tls = std::shared_ptr<const rpc::TlsContext>;

constexpr char kToken[] = "transfer-token";
constexpr char kId[] = "object-1";

// Serves one object from memory.
class OneObject : public TransferServer::ObjectPins {
 public:
  explicit OneObject(std::string bytes) : bytes_(std::move(bytes)) {}
  absl::StatusOr<TransferServer::PinnedObject> Pin(const std::string& id,
                                                   int64_t) override {
    if (id != kId) return absl::NotFoundError("not here");
    return TransferServer::PinnedObject{
        reinterpret_cast<const uint8_t*>(bytes_.data()), bytes_.size()};
  }
  void Unpin(const std::string&, int64_t) override {}
  void UnpinAll(int64_t) override {}

 private:
  const std::string bytes_;
};

const rpc::TestCertificates& Certs() { return rpc::SharedTestCertificates(); }

Tls Context(const rpc::TlsConfig& config) {
  auto tls = rpc::TlsContext::Create(config);
  EXPECT_TRUE(tls.ok()) << tls.status();
  return tls.ok() ? *tls : nullptr;
}

TEST(ObjectTransferTlsTest, PullsWithTlsAndExplainsEveryMismatch) {
  const rpc::TestCertificates& c = Certs();
  const Tls mutual = Context(c.Config(/*mutual=*/true));
  const Tls ca_only = Context(rpc::TlsConfig{"", "", c.ca, false});
  const Tls other_ca = Context(rpc::TlsConfig{"", "", c.other_ca, false});
  std::string bytes(10 << 20, '\0');  // three chunks, several connections
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i);
  OneObject pins(bytes);
  struct Case {
    const char* name;
    Tls server, puller;
    std::vector<std::string> says;  // empty: the pull works
  };
  const Case cases[] = {
      {"tls", mutual, mutual, {}},
      {"plain", nullptr, nullptr, {}},
      {"plain puller", mutual, nullptr, {"uses TLS", "--tls-ca"}},
      {"tls puller", nullptr, mutual, {"does not use TLS"}},
      {"no client certificate",
       mutual,
       ca_only,
       {"requires a client certificate", "--tls-cert"}},
      {"another CA", mutual, other_ca, {"is not trusted", "--tls-ca"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    auto server = TransferServer::Create("127.0.0.1", kToken, &pins, k.server);
    ASSERT_TRUE(server.ok()) << server.status();
    PullOptions options;
    options.tls = k.puller;
    options.timeout_ms = 10000;
    std::string got(bytes.size(), '\0');
    absl::Status st =
        PullObject(kId, reinterpret_cast<uint8_t*>(got.data()), got.size(),
                   {{"n1", (*server)->address()}}, kToken, options);
    if (k.says.empty()) {
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_TRUE(got == bytes);
      continue;
    }
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    for (const std::string& s : k.says) {
      EXPECT_THAT(std::string(st.message()), HasSubstr(s));
    }
  }
}

}  // namespace
}  // namespace shoal::object_plane
