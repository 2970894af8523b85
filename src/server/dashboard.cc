// The dashboard page: src/server/dashboard.html, embedded by cmake/embed_text.cmake.
#include "paladin/server/server.h"

namespace paladin::server {

extern const char kDashboardHtml[];
const char* DashboardHtml() { return kDashboardHtml; }

}  // namespace paladin::server
