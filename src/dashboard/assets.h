// The dashboard's pages, embedded in the binary (nothing is fetched from
// elsewhere): the UI, and the page that asks for the cluster token.
#ifndef SHOAL_DASHBOARD_ASSETS_H_
#define SHOAL_DASHBOARD_ASSETS_H_

#include <string>

namespace shoal::dashboard {

extern const char kDashboardPage[];
// The sign-in page; after a token that is not the cluster's, it says so.
std::string LoginPage(bool wrong_token);

}  // namespace shoal::dashboard

#endif  // SHOAL_DASHBOARD_ASSETS_H_
