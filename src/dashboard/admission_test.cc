#include "dashboard/admission.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::dashboard {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "0123456789abcdef";
constexpr char kHost[] = "127.0.0.1:8265";

struct Case {
  const char* what;
  const char* method;
  std::vector<std::pair<std::string, std::string>> headers;
  int status;  // 0: admitted
  const char* says = "";
};

httplib::Request Make(const Case& c) {
  httplib::Request req;
  req.method = c.method;
  req.path = "/api/jobs/";
  req.headers.emplace("Host", kHost);
  for (const auto& [name, value] : c.headers) req.headers.emplace(name, value);
  return req;
}

const std::string kBearer = std::string("Bearer ") + kToken;
const std::string kCookie = std::string("theme=dark; shoal_token=") + kToken;
const std::string kOwnOrigin = std::string("http://") + kHost;

TEST(AdmissionTest, DecidesFromTheHeadersAlone) {
  const std::vector<Case> cases = {
      {"no token", "GET", {}, 401, "Authorization: Bearer"},
      {"a wrong token", "POST", {{"Authorization", "Bearer nope"}}, 401},
      {"a wrong cookie", "GET", {{"Cookie", "shoal_token=nope"}}, 401},
      {"Bearer reads", "GET", {{"Authorization", kBearer}}, 0},
      {"the cookie reads", "GET", {{"Cookie", kCookie}}, 0},
      // Ray's clients: Bearer, any body type, no Origin.
      {"Bearer, JSON",
       "POST",
       {{"Authorization", kBearer}, {"Content-Type", "application/json"}},
       0},
      {"Bearer, curl -d's type",
       "POST",
       {{"Authorization", kBearer},
        {"Content-Type", "application/x-www-form-urlencoded"}},
       0},
      {"Bearer, no type", "DELETE", {{"Authorization", kBearer}}, 0},
      // The reported forgery: a text/plain form from another port.
      {"a form from another port",
       "POST",
       {{"Cookie", kCookie},
        {"Origin", "http://127.0.0.1:9999"},
        {"Content-Type", "text/plain"}},
       403,
       "http://127.0.0.1:9999"},
      {"the cookie without the page's header",
       "POST",
       {{"Cookie", kCookie}, {"Content-Type", "application/json"}},
       403,
       "X-Shoal-Request: 1"},
      {"the cookie, the header, another origin",
       "DELETE",
       {{"Cookie", kCookie},
        {"X-Shoal-Request", "1"},
        {"Origin", "http://localhost:8265"}},
       403},
      {"Bearer from another origin",
       "POST",
       {{"Authorization", kBearer}, {"Origin", "http://evil.example"}},
       403},
      {"the cookie, the header, a form's type",
       "POST",
       {{"Cookie", kCookie},
        {"X-Shoal-Request", "1"},
        {"Content-Type", "multipart/form-data; boundary=x"}},
       415,
       "application/json"},
      {"the cookie, the header, text/plain with a charset",
       "PUT",
       {{"Cookie", kCookie},
        {"X-Shoal-Request", "1"},
        {"Content-Type", " Text/Plain ; charset=utf-8"}},
       415},
      {"the page's own call",
       "POST",
       {{"Cookie", kCookie},
        {"X-Shoal-Request", "1"},
        {"Origin", kOwnOrigin},
        {"Content-Type", "application/json"}},
       0},
      {"the page's own stop (no body)",
       "POST",
       {{"Cookie", kCookie}, {"X-Shoal-Request", "1"}, {"Origin", kOwnOrigin}},
       0},
  };
  for (const Case& c : cases) {
    std::optional<Refusal> refusal =
        CheckAdmission(Make(c), kToken, /*sign_in_page=*/false);
    EXPECT_EQ(refusal.has_value() ? refusal->status : 0, c.status) << c.what;
    if (refusal.has_value()) {
      EXPECT_THAT(refusal->why, HasSubstr(c.says)) << c.what;
    }
  }
}

TEST(AdmissionTest, TheSignInPageNeedsNoToken) {
  EXPECT_FALSE(CheckAdmission(Make({"", "GET", {}, 0}), kToken,
                              /*sign_in_page=*/true)
                   .has_value());
}

TEST(AdmissionTest, TokensAndCookies) {
  EXPECT_TRUE(SameToken("abc", "abc"));
  EXPECT_FALSE(SameToken("abc", "abd"));
  EXPECT_FALSE(SameToken("abc", "abcd"));
  httplib::Request req;
  req.headers.emplace("Cookie", "a=1;  shoal_token=t0k; b=2");
  EXPECT_EQ(CookieToken(req), "t0k");
  req.headers.clear();
  req.headers.emplace("Cookie", "not_shoal_token=x");
  EXPECT_EQ(CookieToken(req), "");
}

}  // namespace
}  // namespace shoal::dashboard
