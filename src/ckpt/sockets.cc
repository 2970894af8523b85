#include "paladin/ckpt/sockets.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace paladin::ckpt {

namespace fs = std::filesystem;

namespace {

// The kernel's TCP states as /proc/net/tcp numbers them (include/net/tcp_states.h).
constexpr int kTcpTimeWait = 6;
constexpr int kTcpClose = 7;
constexpr int kTcpListen = 10;

// "0100007F:1F90" (IPv4: the address word as the kernel prints a __be32 with %08X) or 32 hex
// digits of four such words (IPv6), then the port in hex.
bool ParseEndpoint(const std::string& text, bool ipv6, TcpEndpoint* out) {
  const size_t colon = text.find(':');
  const size_t digits = ipv6 ? 32 : 8;
  if (colon != digits || text.size() < colon + 2) return false;
  std::array<uint8_t, 16> addr{};
  if (!ipv6) {
    addr[10] = addr[11] = 0xff;
  }
  for (size_t word = 0; word < digits / 8; ++word) {
    char* end = nullptr;
    const std::string hex = text.substr(word * 8, 8);
    const uint32_t value = static_cast<uint32_t>(std::strtoul(hex.c_str(), &end, 16));
    if (end != hex.c_str() + 8) return false;
    // The printed word is the address's bytes read as a native integer: copy it back as is.
    std::memcpy(addr.data() + (ipv6 ? word * 4 : 12), &value, 4);
  }
  char* end = nullptr;
  const unsigned long port = std::strtoul(text.c_str() + colon + 1, &end, 16);
  if (*end != '\0' || port > 0xffff) return false;
  out->addr = addr;
  out->port = static_cast<uint16_t>(port);
  return true;
}

bool IsMappedV4(const std::array<uint8_t, 16>& a) {
  for (int i = 0; i < 10; ++i) {
    if (a[i] != 0) return false;
  }
  return a[10] == 0xff && a[11] == 0xff;
}

struct TableEntry {
  TcpConnection conn;
  bool connected = false;
};

std::vector<TableEntry> ParseTable(const std::string& text, bool ipv6) {
  std::vector<TableEntry> entries;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout;
    uint64_t inode = 0;
    if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode)) {
      continue;
    }
    TableEntry e;
    e.conn.ipv6 = ipv6;
    e.conn.inode = inode;
    e.conn.state = static_cast<int>(std::strtol(state.c_str(), nullptr, 16));
    if (!ParseEndpoint(local, ipv6, &e.conn.local) ||
        !ParseEndpoint(remote, ipv6, &e.conn.remote)) {
      continue;
    }
    e.connected = inode != 0 && e.conn.state != kTcpListen && e.conn.state != kTcpClose &&
                  e.conn.state != kTcpTimeWait;
    entries.push_back(e);
  }
  return entries;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The socket inodes the processes hold open ("socket:[N]" links under /proc/PID/fd).
std::set<uint64_t> SocketInodes(const std::vector<pid_t>& pids) {
  std::set<uint64_t> inodes;
  for (pid_t pid : pids) {
    std::error_code ec;
    for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end;
         !ec && it != end; it.increment(ec)) {
      std::error_code link_ec;
      const std::string target = fs::read_symlink(it->path(), link_ec).string();
      if (link_ec || target.rfind("socket:[", 0) != 0) continue;
      inodes.insert(std::strtoull(target.c_str() + 8, nullptr, 10));
    }
  }
  return inodes;
}

// Fills the request's address words from an endpoint: IPv4 in the first word, IPv6 in four.
void FillAddr(const TcpEndpoint& e, bool v4, __be32 out[4]) {
  std::memset(out, 0, 16);
  std::memcpy(out, v4 ? e.addr.data() + 12 : e.addr.data(), v4 ? 4 : 16);
}

Status Destroy(int nl, const TcpConnection& c) {
  struct {
    nlmsghdr header;
    inet_diag_req_v2 req;
  } msg{};
  // A pair of mapped IPv4 addresses in an IPv6 request is looked up in the kernel's IPv4 table.
  const bool v4 = !c.ipv6;
  msg.header.nlmsg_len = sizeof(msg);
  msg.header.nlmsg_type = SOCK_DESTROY;
  msg.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  msg.req.sdiag_family = v4 ? AF_INET : AF_INET6;
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0U;
  msg.req.id.idiag_sport = htons(c.local.port);
  msg.req.id.idiag_dport = htons(c.remote.port);
  FillAddr(c.local, v4, msg.req.id.idiag_src);
  FillAddr(c.remote, v4, msg.req.id.idiag_dst);
  msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(nl, &msg, sizeof(msg), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    return IoError("cannot ask the kernel to close " + c.Describe() + ": " + strerror(errno));
  }
  alignas(nlmsghdr) char reply[1024];
  const ssize_t n = recv(nl, reply, sizeof(reply), 0);
  if (n < static_cast<ssize_t>(NLMSG_LENGTH(sizeof(nlmsgerr)))) {
    return IoError("no answer from the kernel to closing " + c.Describe());
  }
  const auto* header = reinterpret_cast<const nlmsghdr*>(reply);
  if (header->nlmsg_type != NLMSG_ERROR) return Status::Ok();
  const int error = -reinterpret_cast<const nlmsgerr*>(NLMSG_DATA(header))->error;
  if (error == 0 || error == ENOENT) return Status::Ok();  // closed, or gone meanwhile
  if (error == EOPNOTSUPP) {
    return FailedPrecondition("cannot close the job's connection " + c.Describe() +
                              " to a peer outside the job: this kernel cannot abort sockets "
                              "(CONFIG_INET_DIAG_DESTROY)");
  }
  return FailedPrecondition("cannot close the job's connection " + c.Describe() +
                            " to a peer outside the job: " + strerror(error));
}

}  // namespace

std::string TcpEndpoint::Describe() const {
  char text[INET6_ADDRSTRLEN] = "?";
  if (IsMappedV4(addr)) {
    inet_ntop(AF_INET, addr.data() + 12, text, sizeof(text));
    return std::string(text) + ":" + std::to_string(port);
  }
  inet_ntop(AF_INET6, addr.data(), text, sizeof(text));
  return "[" + std::string(text) + "]:" + std::to_string(port);
}

std::string TcpConnection::Describe() const {
  return local.Describe() + " -> " + remote.Describe();
}

std::vector<TcpConnection> ParseTcpTableForTest(const std::string& text, bool ipv6) {
  std::vector<TcpConnection> out;
  for (const TableEntry& e : ParseTable(text, ipv6)) {
    if (e.connected) out.push_back(e.conn);
  }
  return out;
}

StatusOr<std::vector<TcpConnection>> JobConnections(const std::vector<pid_t>& pids) {
  if (pids.empty()) return std::vector<TcpConnection>();
  const std::set<uint64_t> mine = SocketInodes(pids);
  std::vector<TableEntry> all;
  for (bool ipv6 : {false, true}) {
    const std::string path = "/proc/" + std::to_string(pids[0]) + "/net/" + (ipv6 ? "tcp6" : "tcp");
    if (!fs::exists(path)) continue;  // a kernel without IPv6
    std::vector<TableEntry> table = ParseTable(ReadAll(path), ipv6);
    all.insert(all.end(), table.begin(), table.end());
  }
  std::vector<TcpConnection> out;
  for (const TableEntry& e : all) {
    if (!e.connected || mine.count(e.conn.inode) == 0) continue;
    TcpConnection c = e.conn;
    for (const TableEntry& peer : all) {
      if (peer.conn.local == c.remote && peer.conn.remote == c.local &&
          mine.count(peer.conn.inode) != 0) {
        c.internal = true;
        break;
      }
    }
    out.push_back(c);
  }
  return out;
}

Status CloseOutsideConnections(const std::vector<TcpConnection>& connections) {
  bool any = false;
  for (const TcpConnection& c : connections) any = any || !c.internal;
  if (!any) return Status::Ok();
  const int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return IoError(std::string("cannot open a sock_diag socket: ") + strerror(errno));
  Status result = Status::Ok();
  for (const TcpConnection& c : connections) {
    if (c.internal) continue;
    result = Destroy(nl, c);
    if (!result.ok()) break;
  }
  close(nl);
  return result;
}

}  // namespace paladin::ckpt
