// Who may make a request of the HTTP port, decided from its headers alone
// (so before any byte of its body is read): the cluster token, and, for a
// call that changes something, what a page of another origin cannot forge.
// See docs/design/security.md ("The HTTP port").
//
// Pure functions of the request; thread-safe.
#ifndef SHOAL_DASHBOARD_ADMISSION_H_
#define SHOAL_DASHBOARD_ADMISSION_H_

#include <httplib.h>

#include <optional>
#include <string>

namespace shoal::dashboard {

// The cookie that `/?token=<token>` sets for a browser.
inline constexpr char kTokenCookie[] = "shoal_token";
// Sent by the page's own calls: a page of another origin cannot send a
// header of its own without a CORS preflight, which is never granted.
inline constexpr char kRequestHeader[] = "X-Shoal-Request";

// Compares in time that does not depend on where they differ.
bool SameToken(const std::string& a, const std::string& b);

// The value of the kTokenCookie cookie, or "".
std::string CookieToken(const httplib::Request& req);

enum class Credential { kNone, kBearer, kCookie };
Credential Authenticate(const httplib::Request& req, const std::string& token);

struct Refusal {
  int status;       // 401, 403 or 415
  std::string why;  // says what to do instead
};

// Why `req` must be refused, or nullopt. `sign_in_page`: the request is for
// the page that asks for the token (it needs none).
//  - Without the token: 401.
//  - A POST, PUT, PATCH or DELETE with an Origin other than
//    "http://<its Host>": 403. Signed in by the cookie (not Bearer), it also
//    needs kRequestHeader (403 without), and a form's body type
//    (text/plain, application/x-www-form-urlencoded, multipart/form-data)
//    is 415. With Bearer no form can have sent it, so any type is taken, as
//    Ray's API takes curl's -d.
std::optional<Refusal> CheckAdmission(const httplib::Request& req,
                                      const std::string& token,
                                      bool sign_in_page);

}  // namespace shoal::dashboard

#endif  // SHOAL_DASHBOARD_ADMISSION_H_
