// A rank's own network namespace and its routes, through iproute2 (rank_net.h).
#include "paladin/ckpt/rank_net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "paladin/ckpt/subprocess.h"

namespace paladin::ckpt {

namespace {

constexpr double kIpTimeoutS = 10;

// `ip ARGS...`; its output (stdout and stderr) in *output. OK when it exits 0.
Status Ip(const std::vector<std::string>& args, std::string* output = nullptr) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  const SubprocessResult r = RunBounded(argv, {}, kIpTimeoutS);
  if (output != nullptr) *output = r.output;
  if (r.exit_code == 0 && !r.timed_out) return Status::Ok();
  std::string line;
  for (const std::string& a : argv) line += (line.empty() ? "" : " ") + a;
  std::string said = r.output;
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  if (r.exit_code == 127) return FailedPrecondition("`" + line + "`: no `ip` (install iproute2)");
  return Internal("`" + line + "` " +
                  (r.timed_out ? "still running after 10 s"
                               : "failed (exit " + std::to_string(r.exit_code) + ")") +
                  (said.empty() ? "" : ": " + said));
}

// Writes `value` to a file under /proc/sys/net, which names the caller's network namespace's
// settings.
Status SetSysctl(const std::string& path, const char* value) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open " + path + ": " + strerror(errno));
  const ssize_t n = write(fd, value, strlen(value));
  const int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(strlen(value))) {
    return IoError("cannot write " + path + ": " + strerror(err));
  }
  return Status::Ok();
}

bool NamespaceExists(const std::string& name) {
  struct stat st {};
  return lstat(RankNetPath(name).c_str(), &st) == 0;
}

// Whether interface `dev` exists in the caller's network namespace (or in namespace `ns`).
bool LinkExists(const std::string& dev, const std::string& ns = "") {
  std::vector<std::string> args;
  if (!ns.empty()) args = {"-n", ns};
  args.insert(args.end(), {"link", "show", "dev", dev});
  return Ip(args).ok();
}

// The veth pair: the host end here, pal0 in the namespace. A host end left without its peer in
// the namespace (a namespace removed by hand) is replaced.
Status MakeVethPair(const std::string& name, const std::string& host_if) {
  const bool inside = LinkExists(kRankInterface, name);
  const bool outside = LinkExists(host_if);
  if (inside && outside) return Status::Ok();
  if (inside) {
    return FailedPrecondition("network namespace " + name + " has a " + kRankInterface +
                              " whose host end " + host_if +
                              " is not in this network namespace; destroy the rank network first");
  }
  if (outside) PALADIN_RETURN_IF_ERROR(Ip({"link", "del", "dev", host_if}));
  return Ip(
      {"link", "add", host_if, "type", "veth", "peer", "name", kRankInterface, "netns", name});
}

}  // namespace

Status CheckRankNetName(const std::string& name) {
  if (name.empty() || name.size() > 64) {
    return InvalidArgument("rank network name '" + name + "': 1 to 64 characters");
  }
  if (name[0] == '.' || name[0] == '-') {
    return InvalidArgument("rank network name '" + name + "' starts with '" + name.substr(0, 1) +
                           "'");
  }
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) {
      return InvalidArgument("rank network name '" + name +
                             "': only letters, digits, '_', '.' and '-'");
    }
  }
  return Status::Ok();
}

Status CheckRankAddress(const std::string& address) {
  in_addr a{};
  // inet_pton takes only a plain dotted quad (no leading zeros, no shorter forms).
  if (address.size() > 15 || inet_pton(AF_INET, address.c_str(), &a) != 1) {
    return InvalidArgument("'" + address + "' is not an IPv4 address (a.b.c.d)");
  }
  const uint32_t host = ntohl(a.s_addr);
  const uint32_t first = host >> 24;
  if (host == 0 || first == 127 || first >= 224) {
    return InvalidArgument("'" + address +
                           "' cannot be a rank's address (unspecified, loopback, multicast or "
                           "reserved)");
  }
  return Status::Ok();
}

std::string RankNetPath(const std::string& name) { return std::string(kRankNetDir) + "/" + name; }

std::string RankNetNameOf(const std::string& path) {
  const std::string dir = std::string(kRankNetDir) + "/";
  if (path.compare(0, dir.size(), dir) != 0) return "";
  const std::string name = path.substr(dir.size());
  return CheckRankNetName(name).ok() ? name : "";
}

std::string RankHostInterface(const std::string& name) {
  uint32_t hash = 2166136261U;  // FNV-1a
  for (const char c : name) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 16777619U;
  }
  char out[16];
  std::snprintf(out, sizeof out, "pal-%08x", hash);
  return out;
}

StatusOr<std::string> RankNetAddress(const std::string& name) {
  PALADIN_RETURN_IF_ERROR(CheckRankNetName(name));
  if (!NamespaceExists(name)) return NotFound("no rank network " + RankNetPath(name));
  std::string out;
  if (!Ip({"-n", name, "-4", "-o", "addr", "show", "dev", kRankInterface}, &out).ok()) {
    return NotFound("network namespace " + name + " has no " + kRankInterface);
  }
  // "2: pal0    inet 10.1.0.2/32 scope global pal0\ ..."
  std::istringstream in(out);
  for (std::string word; in >> word;) {
    if (word != "inet" || !(in >> word)) continue;
    const std::string address = word.substr(0, word.find('/'));
    if (CheckRankAddress(address).ok()) return address;
  }
  return NotFound(std::string(kRankInterface) + " in network namespace " + name +
                  " has no IPv4 address");
}

Status CreateRankNet(const RankNet& net) {
  PALADIN_RETURN_IF_ERROR(CheckRankNetName(net.name));
  PALADIN_RETURN_IF_ERROR(CheckRankAddress(net.address));
  if (!NamespaceExists(net.name)) PALADIN_RETURN_IF_ERROR(Ip({"netns", "add", net.name}));
  const std::string host_if = RankHostInterface(net.name);
  PALADIN_RETURN_IF_ERROR(MakeVethPair(net.name, host_if));
  if (StatusOr<std::string> had = RankNetAddress(net.name); had.ok() && *had != net.address) {
    return FailedPrecondition("rank network " + net.name + " exists with address " + *had +
                              ", not " + net.address);
  }
  const std::string prefix = net.address + "/32";
  // No IPv6 link-local address on either end: the rank's only address is its own (a library that
  // picks "the address of pal0" must not find another).
  (void)Ip({"-n", net.name, "link", "set", "dev", kRankInterface, "addrgenmode", "none"});
  (void)Ip({"link", "set", "dev", host_if, "addrgenmode", "none"});
  PALADIN_RETURN_IF_ERROR(Ip({"-n", net.name, "addr", "replace", prefix, "dev", kRankInterface}));
  PALADIN_RETURN_IF_ERROR(Ip({"-n", net.name, "link", "set", "dev", "lo", "up"}));
  PALADIN_RETURN_IF_ERROR(Ip({"-n", net.name, "link", "set", "dev", kRankInterface, "up"}));
  // Every destination is on the link: the host end answers the rank's ARP for whatever the node
  // routes (proxy ARP), so the rank needs no gateway address.
  PALADIN_RETURN_IF_ERROR(
      Ip({"-n", net.name, "route", "replace", "default", "dev", kRankInterface}));
  PALADIN_RETURN_IF_ERROR(Ip({"link", "set", "dev", host_if, "up"}));
  PALADIN_RETURN_IF_ERROR(Ip({"route", "replace", prefix, "dev", host_if, "scope", "link"}));
  PALADIN_RETURN_IF_ERROR(SetSysctl("/proc/sys/net/ipv4/conf/" + host_if + "/proxy_arp", "1"));
  // The kernel otherwise delays each proxied answer by up to 0.8 s.
  PALADIN_RETURN_IF_ERROR(SetSysctl("/proc/sys/net/ipv4/neigh/" + host_if + "/proxy_delay", "0"));
  return SetSysctl("/proc/sys/net/ipv4/ip_forward", "1");
}

Status DestroyRankNet(const std::string& name) {
  PALADIN_RETURN_IF_ERROR(CheckRankNetName(name));
  // The pair first: a namespace that a process still holds outlives its name, and its veth with
  // it. Deleting one end deletes both, and the route through it.
  const std::string host_if = RankHostInterface(name);
  if (LinkExists(host_if)) PALADIN_RETURN_IF_ERROR(Ip({"link", "del", "dev", host_if}));
  if (NamespaceExists(name)) PALADIN_RETURN_IF_ERROR(Ip({"netns", "del", name}));
  return Status::Ok();
}

Status SetRankRoute(const std::string& address, const std::string& next_hop) {
  PALADIN_RETURN_IF_ERROR(CheckRankAddress(address));
  PALADIN_RETURN_IF_ERROR(CheckRankAddress(next_hop));
  return Ip({"route", "replace", address + "/32", "via", next_hop});
}

Status RemoveRankRoute(const std::string& address) {
  PALADIN_RETURN_IF_ERROR(CheckRankAddress(address));
  std::string out;
  PALADIN_RETURN_IF_ERROR(Ip({"route", "show", "exact", address + "/32"}, &out));
  // Only a route to another node: the route of a rank that lives here goes with its network.
  if (out.find(" via ") == std::string::npos) return Status::Ok();
  return Ip({"route", "del", address + "/32"});
}

}  // namespace paladin::ckpt
