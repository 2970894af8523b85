// `paladin rank-net create|destroy|route|unroute`: a rank's own network on this node and the
// routes to ranks on other nodes (include/paladin/ckpt/rank_net.h, docs/distributed.md).
#include "paladin/ckpt/rank_net.h"

#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"

namespace paladin::cli {
namespace {

struct RankNetArgs {
  std::string name;
  std::string address;
  std::string via;
};

int Report(const char* what, const Status& s, const std::string& done) {
  if (!s.ok()) {
    Say(what, s.message());
    return s.code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::printf("%s\n", done.c_str());
  return 0;
}

}  // namespace

void RegisterRankNet(CLI::App& app, int* exit_code) {
  CLI::App* net = app.add_subcommand(
      "rank-net",
      "A rank's own network namespace with a stable IPv4 address, and routes to ranks on other "
      "nodes (for gangs of ranks over several nodes)");
  net->require_subcommand(1);
  auto a = std::make_shared<RankNetArgs>();

  CLI::App* create = net->add_subcommand(
      "create", "Make network namespace /run/netns/NAME with ADDRESS on pal0, routed from here");
  create->add_option("name", a->name, "The rank network's name")->required();
  create->add_option("--address", a->address, "The rank's IPv4 address")->required();
  create->callback([a, exit_code] {
    *exit_code = Report("rank-net create", ckpt::CreateRankNet({a->name, a->address}),
                        "rank network " + a->name + " (" + a->address + ") on " +
                            ckpt::RankHostInterface(a->name) + ": " + ckpt::RankNetPath(a->name));
  });

  CLI::App* destroy =
      net->add_subcommand("destroy", "Remove a rank network (its namespace, veth pair and route)");
  destroy->add_option("name", a->name, "The rank network's name")->required();
  destroy->callback([a, exit_code] {
    *exit_code = Report("rank-net destroy", ckpt::DestroyRankNet(a->name),
                        "rank network " + a->name + " removed");
  });

  CLI::App* route = net->add_subcommand(
      "route", "Route a rank's ADDRESS/32 via NEXTHOP (the node it lives on); replaces a route");
  route->add_option("address", a->address, "The rank's IPv4 address")->required();
  route->add_option("--via", a->via, "The next hop: the address of the rank's node")->required();
  route->callback([a, exit_code] {
    *exit_code = Report("rank-net route", ckpt::SetRankRoute(a->address, a->via),
                        a->address + "/32 via " + a->via);
  });

  CLI::App* unroute =
      net->add_subcommand("unroute", "Remove the route to a rank on another node (none: no error)");
  unroute->add_option("address", a->address, "The rank's IPv4 address")->required();
  unroute->callback([a, exit_code] {
    *exit_code = Report("rank-net unroute", ckpt::RemoveRankRoute(a->address),
                        "no route to " + a->address + " via another node");
  });
}

}  // namespace paladin::cli
