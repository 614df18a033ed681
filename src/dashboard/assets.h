// The dashboard's pages, embedded in the binary (nothing is fetched from
// elsewhere): the UI, and the page that asks for the cluster token.
#ifndef SHOAL_DASHBOARD_ASSETS_H_
#define SHOAL_DASHBOARD_ASSETS_H_

namespace shoal::dashboard {

extern const char kDashboardPage[];
extern const char kLoginPage[];

}  // namespace shoal::dashboard

#endif  // SHOAL_DASHBOARD_ASSETS_H_
