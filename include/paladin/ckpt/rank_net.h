// A rank's own network: a named network namespace holding one IPv4 address that stays the rank's
// wherever it runs, so that a restored rank keeps its TCP connections to the other ranks of its
// gang on any node (docs/distributed.md, "Ranks with their own network").
//
// Inside the namespace: loopback up, and `pal0` (one end of a veth pair) with ADDRESS/32 and a
// default route out of it. The other end stays in the network namespace of the caller (the node's,
// or a simulated host's), named by RankHostInterface, with a /32 route to ADDRESS and proxy ARP on
// it so that the rank reaches everything the node routes; the node forwards IPv4. Ranks on other
// nodes are reached by host routes ADDRESS/32 via NEXTHOP (SetRankRoute), which whoever places the
// gang keeps pointing at the node each rank lives on.
//
// The namespace is bound at /run/netns/NAME (where `ip netns` keeps its own, so `ip netns exec`
// works on it). Everything is done with iproute2's `ip`, each call bounded in time; every name and
// address is checked before it reaches a command line. Creating or destroying twice is no error.
// Needs CAP_NET_ADMIN and CAP_SYS_ADMIN (root). Not thread safe: one caller per name at a time.
#ifndef PALADIN_CKPT_RANK_NET_H_
#define PALADIN_CKPT_RANK_NET_H_

#include <string>

#include "paladin/base/status.h"

namespace paladin::ckpt {

inline constexpr const char* kRankNetDir = "/run/netns";
// The rank's interface inside its namespace (what GLOO_SOCKET_IFNAME or NCCL_SOCKET_IFNAME name).
inline constexpr const char* kRankInterface = "pal0";

struct RankNet {
  std::string name;     // the namespace: kRankNetDir/NAME
  std::string address;  // the rank's IPv4 address, dotted quad
};

// NAME: 1-64 of [A-Za-z0-9_.-], not starting with '.' or '-'.
Status CheckRankNetName(const std::string& name);
// A dotted-quad IPv4 unicast address (not 0.0.0.0, loopback, multicast or broadcast).
Status CheckRankAddress(const std::string& address);

// kRankNetDir/NAME.
std::string RankNetPath(const std::string& name);
// NAME when `path` is kRankNetDir/NAME with a valid NAME, else "".
std::string RankNetNameOf(const std::string& path);
// The host end of the rank's veth pair: "pal-" and 8 hex digits of a hash of NAME (interface
// names have at most 15 bytes).
std::string RankHostInterface(const std::string& name);

// Creates the rank's namespace, veth pair, address and routes, in and against the caller's
// network namespace; turns on IPv4 forwarding there. Idempotent: what exists already is kept, but
// a namespace whose pal0 holds another address is refused.
Status CreateRankNet(const RankNet& net);
// Removes the rank's namespace (its processes must be gone or elsewhere: a namespace that a
// process still holds lives on, unnamed) and the host end of its veth pair with its route.
// Idempotent.
Status DestroyRankNet(const std::string& name);
// The address pal0 holds in namespace NAME (NotFound when NAME or its address is missing).
StatusOr<std::string> RankNetAddress(const std::string& name);

// Host route ADDRESS/32 via NEXTHOP in the caller's network namespace (replaces one that exists):
// a rank that lives on the node at NEXTHOP.
Status SetRankRoute(const std::string& address, const std::string& next_hop);
// Removes the host route to ADDRESS/32; no error when there is none.
Status RemoveRankRoute(const std::string& address);

}  // namespace paladin::ckpt

#endif  // PALADIN_CKPT_RANK_NET_H_
