// Placeholder until the server lands.
namespace paladin::server {
extern const char kDashboardHtml[];
const char* DashboardHtml() { return kDashboardHtml; }
}  // namespace paladin::server
