// The dashboard's pages, embedded in the binary (nothing is fetched from
// elsewhere): the UI, and the page that asks for the cluster token.
#ifndef SHOAL_DASHBOARD_ASSETS_H_
#define SHOAL_DASHBOARD_ASSETS_H_

#include <string>

namespace shoal::dashboard {

extern const char kDashboardPage[];
// The sign-in page; after a token that is not the cluster's, it says so.
std::string LoginPage(bool wrong_token);

// Their Content-Security-Policy headers. The page's one inline script is
// allowed by its SHA-256 (so a script that an injected string smuggled into
// the page would not run); styles are inline and set per element (usage
// bars), and a style cannot run code, so style-src is 'unsafe-inline'.
// Neither may be framed (frame-ancestors 'none', as X-Frame-Options: DENY).
const std::string& DashboardPagePolicy();
const std::string& LoginPagePolicy();

}  // namespace shoal::dashboard

#endif  // SHOAL_DASHBOARD_ASSETS_H_
