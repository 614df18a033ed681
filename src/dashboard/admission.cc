#include "dashboard/admission.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace shoal::dashboard {
namespace {

bool ChangesSomething(const std::string& method) {
  return method != "GET" && method != "HEAD" && method != "OPTIONS";
}

// The content types an HTML form can send without a preflight.
bool IsFormContentType(const std::string& content_type) {
  std::string type = absl::AsciiStrToLower(absl::StripAsciiWhitespace(
      content_type.substr(0, content_type.find(';'))));
  return type == "text/plain" || type == "application/x-www-form-urlencoded" ||
         type == "multipart/form-data";
}

// Why a call that changes something must be refused as possibly forged by
// another site's page, or "". A browser sends the cookie with a form or a
// fetch from any port of this host (SameSite does not separate ports), but
// such a page can neither add a header of its own nor choose its Origin.
std::string CrossSiteRefusal(const httplib::Request& req,
                             Credential credential) {
  if (req.has_header("Origin")) {
    std::string origin = absl::AsciiStrToLower(req.get_header_value("Origin"));
    std::string own = absl::StrCat(
        "http://", absl::AsciiStrToLower(req.get_header_value("Host")));
    if (origin != own) {
      return absl::StrCat(
          "the request comes from a page of ", req.get_header_value("Origin"),
          ", not of this dashboard (", own,
          "): send it from the dashboard's own page, or without a browser "
          "with `Authorization: Bearer <token>`");
    }
  }
  if (credential == Credential::kCookie && !req.has_header(kRequestHeader)) {
    return absl::StrCat(
        "a call that changes something, signed in by the cookie, needs the "
        "header `",
        kRequestHeader,
        ": 1` (the dashboard's page sends it); scripts and tools: send "
        "`Authorization: Bearer <token>` instead");
  }
  return "";
}

}  // namespace

bool SameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

std::string CookieToken(const httplib::Request& req) {
  std::string cookies = req.get_header_value("Cookie");
  std::string prefix = absl::StrCat(kTokenCookie, "=");
  for (size_t at = 0; at < cookies.size();) {
    size_t end = cookies.find(';', at);
    if (end == std::string::npos) end = cookies.size();
    std::string part = cookies.substr(at, end - at);
    size_t start = part.find_first_not_of(' ');
    if (start != std::string::npos &&
        part.compare(start, prefix.size(), prefix) == 0) {
      return part.substr(start + prefix.size());
    }
    at = end + 1;
  }
  return "";
}

Credential Authenticate(const httplib::Request& req, const std::string& token) {
  std::string auth = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  if (auth.compare(0, bearer.size(), bearer) == 0 &&
      SameToken(auth.substr(bearer.size()), token)) {
    return Credential::kBearer;
  }
  if (SameToken(CookieToken(req), token)) return Credential::kCookie;
  return Credential::kNone;
}

std::optional<Refusal> CheckAdmission(const httplib::Request& req,
                                      const std::string& token,
                                      bool sign_in_page) {
  if (sign_in_page) return std::nullopt;
  Credential credential = Authenticate(req, token);
  if (credential == Credential::kNone) {
    return Refusal{401,
                   "this needs the cluster token: send `Authorization: Bearer "
                   "<token>` (the token is in the head's session folder, or "
                   "printed by shoal start --head)"};
  }
  if (!ChangesSomething(req.method)) return std::nullopt;
  std::string cross_site = CrossSiteRefusal(req, credential);
  if (!cross_site.empty()) return Refusal{403, cross_site};
  if (credential == Credential::kCookie &&
      IsFormContentType(req.get_header_value("Content-Type"))) {
    return Refusal{
        415,
        absl::StrCat("this endpoint takes JSON, not ",
                     req.get_header_value("Content-Type"),
                     ": send the body with `Content-Type: application/json` "
                     "(curl: -H 'Content-Type: application/json')")};
  }
  return std::nullopt;
}

}  // namespace shoal::dashboard
