// `shoal status` output lives in presentation/status_format.h, which the
// CLI, the dashboard and the launcher share; this name stays for the code
// that includes it from here.
#ifndef SHOAL_API_STATUS_FORMAT_H_
#define SHOAL_API_STATUS_FORMAT_H_

#include "presentation/status_format.h"

#endif  // SHOAL_API_STATUS_FORMAT_H_
