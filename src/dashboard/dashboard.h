// The head's HTTP port (8265 by default, as Ray's dashboard): the web UI,
// the Jobs REST API with Ray's paths, the cluster's state as JSON and the
// Prometheus metrics; and, on an agent's --metrics-port, that node's
// metrics. Every request needs the cluster token: `Authorization: Bearer
// <token>`, or the cookie that `/?token=<token>` sets for a browser (the
// page asks for the token otherwise); a call that changes something and is
// signed in by the cookie also needs `X-Shoal-Request`, and none may come
// from a page of another origin. See docs/design/jobs.md and
// docs/design/security.md.
//
// The server runs its own threads (HttpServer: slow clients and bodies
// without the token cost no worker); it talks to the head (or the agent)
// as any client does, over the RPC port.
#ifndef SHOAL_DASHBOARD_DASHBOARD_H_
#define SHOAL_DASHBOARD_DASHBOARD_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace shoal::dashboard {

struct DashboardOptions {
  std::string host = "127.0.0.1";  // address to listen on
  int port = 8265;                 // 0: any free port
  std::string token;
  // The head to serve (the UI, the REST API, /metrics of the cluster)...
  std::string head_address;
  // ...or, when set, only this node agent's /metrics.
  std::string agent_address;
};

class Dashboard {
 public:
  // Listens on options.host:options.port; the error says why it cannot.
  static absl::StatusOr<std::unique_ptr<Dashboard>> Start(
      const DashboardOptions& options);
  virtual ~Dashboard() = default;  // stops serving
  virtual int port() const = 0;
};

}  // namespace shoal::dashboard

#endif  // SHOAL_DASHBOARD_DASHBOARD_H_
