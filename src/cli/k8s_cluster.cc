// `paladin k8s scheduler`, `explain` and `webhook`: the cluster-wide components of Paladin on
// Kubernetes (docs/kubernetes.md), run once per cluster, as Deployments.
//
//   scheduler  places the pods whose schedulerName is paladin with the core packer
//   explain    why the scheduler placed a pod where it is, or leaves it Pending (its pass,
//              binding nothing)
//   webhook    the mutating admission webhook: Paladin's scheduler and interposer for GPU pods
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "commands.h"
#include "fleet_format.h"
#include "k8s_args.h"
#include "paladin/base/size.h"
#include "paladin/k8s/explain.h"

namespace paladin::cli::kube {

StatusOr<k8s::SchedulerOptions> SchedulerOptionsOf(const K8sArgs& args) {
  if (Status s = UseServerCa(args); !s.ok()) return s;
  k8s::SchedulerOptions options;
  options.policy = args.policy;
  if (args.paladin_server.empty()) return options;
  StatusOr<std::shared_ptr<api::Client>> made = PaladinServer(args);
  if (!made.ok()) return made.status();
  std::shared_ptr<api::Client> server = *made;
  const std::string cluster = args.cluster;
  options.team_quotas = [server, cluster]() -> StatusOr<std::map<std::string, k8s::TeamQuota>> {
    StatusOr<api::Json> teams = server->Get("/v1/teams");
    if (!teams.ok()) return teams.status();
    return k8s::TeamQuotasOf(*teams, cluster);
  };
  // Its pods, to the server's API, dashboard and team tokens (an admin token: PUT /v1/pods).
  options.report_pods = [server](const api::PodList& list) {
    return server->Put("/v1/pods", api::ToJson(list)).status();
  };
  options.cluster = args.cluster;
  return options;
}

namespace {

int RunScheduler(const K8sArgs& args) {
  StatusOr<k8s::ApiConfig> config = Config(args);
  if (!config.ok()) {
    cli::Say("k8s scheduler", config.status().message());
    return 2;
  }
  StatusOr<k8s::SchedulerOptions> made = SchedulerOptionsOf(args);
  if (!made.ok()) {
    cli::Say("k8s scheduler", made.status().message());
    return 2;
  }
  const k8s::SchedulerOptions& options = *made;
  StatusOr<std::unique_ptr<k8s::Scheduler>> scheduler =
      k8s::Scheduler::Create(k8s::ApiClient(*config), options);
  if (!scheduler.ok()) {
    cli::Say("k8s scheduler", scheduler.status().message());
    return 2;
  }
  std::fprintf(stderr, "paladin k8s scheduler: placing pods of schedulerName %s (policy %s)\n",
               options.scheduler_name.c_str(), options.policy.c_str());
  std::string last_error;
  for (;;) {
    StatusOr<int> bound = (*scheduler)->RunOnce();
    if (!bound.ok() && bound.status().message() != last_error) {
      last_error = bound.status().message();
      cli::Say("k8s scheduler", last_error + " (retrying)");
    } else if (bound.ok()) {
      last_error.clear();
    }
    if (args.once) return bound.ok() ? 0 : 1;
    usleep(static_cast<useconds_t>(args.interval_s * 1e6));
  }
}

// `paladin k8s explain POD`: the scheduler's pass over the cluster as it is, binding nothing.
int RunExplain(const K8sArgs& args) {
  StatusOr<k8s::ApiConfig> config = Config(args);
  StatusOr<k8s::SchedulerOptions> options = SchedulerOptionsOf(args);
  if (!config.ok() || !options.ok()) {
    cli::Say("k8s explain", config.ok() ? options.status().message() : config.status().message());
    return 2;
  }
  StatusOr<k8s::PodExplanation> e =
      k8s::ExplainPod(k8s::ApiClient(*config), *options, args.explain_ns, args.explain_pod);
  if (!e.ok()) {
    cli::Say("k8s explain", e.status().message());
    return e.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  for (const auto& [key, value] : k8s::ExplanationRows(*e)) {
    std::printf("%-11s %s\n", (key + ":").c_str(), fleet::Printable(value).c_str());
  }
  return 0;
}

int RunWebhook(const K8sArgs& args) {
  if (args.cert.empty() || args.key.empty() || args.inject.lib_dir.empty()) {
    cli::Say("k8s webhook", "--cert, --key and --lib-dir are required");
    return 2;
  }
  if (!args.inject.emulated_gpus.empty() && args.inject.emu_state_dir.empty()) {
    cli::Say("k8s webhook", "--emulated-gpus needs --emu-state-dir");
    return 2;
  }
  k8s::InjectOptions inject = args.inject;
  if (!base::ParseSize(args.auto_default, &inject.auto_default_bytes) ||
      inject.auto_default_bytes < (uint64_t{1} << 20)) {
    cli::Say("k8s webhook", "--auto-default '" + args.auto_default +
                                "': expected a size of at least 1 MiB such as 4GiB");
    return 2;
  }
  if (Status s = UseServerCa(args); !s.ok()) {
    cli::Say("k8s webhook", s.message());
    return 2;
  }
  if (!args.paladin_server.empty()) {
    StatusOr<api::Endpoint> endpoint = api::ParseUrl(args.paladin_server);
    std::string token;
    std::ifstream in(args.paladin_token_file);
    if (!endpoint.ok() || !(in >> token)) {
      cli::Say("k8s webhook",
               "--paladin-server needs a URL and --paladin-token-file a token (" +
                   (endpoint.ok() ? "token unreadable" : endpoint.status().message()) + ")");
      return 2;
    }
    // The namespaces' teams (their label paladin.io/team) are read from the API server.
    StatusOr<k8s::ApiConfig> config = Config(args);
    if (!config.ok()) {
      const std::string why = config.status().message();
      cli::Say("k8s webhook", "--paladin-server: namespaces' teams are read from the API: " + why);
      return 2;
    }
    config->timeout_s = args.sizing_timeout_s;
    inject.size_auto = k8s::ServerSizer(std::make_shared<const k8s::ApiClient>(*config), *endpoint,
                                        token, args.sizing_timeout_s);
  }
  Status s = k8s::ServeWebhook(args.listen, args.cert, args.key, inject);
  cli::Say("k8s webhook", s.message());
  return s.ok() ? 0 : 1;
}

}  // namespace

void RegisterClusterCommands(CLI::App* k8s, const std::shared_ptr<K8sArgs>& args, int* exit_code) {
  CLI::App* scheduler = k8s->add_subcommand(
      "scheduler", "Place the pods whose schedulerName is paladin with Paladin's packer");
  scheduler->add_option("--policy", args->policy, "Packing policy (as the server's --policy)");
  scheduler->add_option("--interval", args->interval_s, "Seconds between passes");
  scheduler->add_flag("--once", args->once, "One pass, then exit");
  AddServerOptions(scheduler, args.get(),
                   "Paladin's server, whose teams' max_gpu_mem quotas the scheduler checks (a "
                   "namespace's team: its label paladin.io/team, else k8s-NAMESPACE) and to "
                   "which it reports its pods after each pass (GET /v1/pods)");
  scheduler
      ->add_option("--cluster", args->cluster,
                   "This cluster's name in the pods reported to Paladin's server")
      ->check([](const std::string& v) {
        return v.empty() || v.size() > 253 ||
                       v.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") !=
                           std::string::npos
                   ? std::string("expected a name of [a-z0-9.-]")
                   : std::string();
      });
  AddApiOptions(scheduler, args.get());
  scheduler->callback([args, exit_code] { *exit_code = RunScheduler(*args); });

  CLI::App* explain = k8s->add_subcommand(
      "explain",
      "Why Paladin's scheduler placed a pod where it is, or leaves it Pending: its pass over "
      "the cluster as it is now, binding nothing");
  explain->add_option("pod", args->explain_pod, "The pod")->required();
  explain->add_option("-n,--namespace", args->explain_ns, "Its namespace");
  explain->add_option("--policy", args->policy, "Packing policy (the scheduler's --policy)");
  AddServerOptions(explain, args.get(),
                   "Paladin's server, for the teams' quotas (the scheduler's flag)");
  AddApiOptions(explain, args.get());
  explain->callback([args, exit_code] { *exit_code = RunExplain(*args); });

  CLI::App* webhook = k8s->add_subcommand(
      "webhook",
      "Serve the mutating admission webhook that gives GPU pods Paladin's scheduler "
      "and interposer");
  webhook->add_option("--listen", args->listen, "HOST:PORT to serve HTTPS on");
  webhook->add_option("--cert", args->cert, "PEM server certificate");
  webhook->add_option("--key", args->key, "PEM server key");
  webhook->add_option("--lib-dir", args->inject.lib_dir,
                      "The nodes' folder of Paladin's libraries (paladin k8s node --lib-dir)");
  webhook->add_option("--emulated-gpus", args->inject.emulated_gpus,
                      "Give pods the emulated driver with these GPUs (e.g. 2x8GiB)");
  webhook->add_option("--emu-state-dir", args->inject.emu_state_dir,
                      "The nodes' folder of the emulated GPUs' shared state");
  webhook->add_option("--paladin-user", args->inject.paladin_users,
                      "The API server's user name of Paladin's scheduler and mover (e.g. "
                      "system:serviceaccount:paladin:paladin), the only one that may set "
                      "Paladin's own pod annotations; repeatable");
  webhook->add_option("--usage-user", args->inject.usage_users,
                      "The API server's user name of the nodes' measuring component (paladin k8s "
                      "node --usage, e.g. system:serviceaccount:paladin:paladin-node): of "
                      "Paladin's own pod annotations it may write paladin.io/gpu-memory-used "
                      "only; repeatable");
  AddServerOptions(webhook, args.get(),
                   "Paladin's server, which sizes pods annotated paladin.io/gpu-memory: auto "
                   "from their class's history (GET /v1/sizing)");
  webhook
      ->add_option("--sizing-timeout", args->sizing_timeout_s,
                   "Seconds to wait for the namespace's team and the server's size of an auto "
                   "pod before using --auto-default")
      ->check(CLI::Range(0.1, 8.0));
  webhook->add_option("--auto-default", args->auto_default,
                      "The size of an auto pod when Paladin's server cannot be asked (said in "
                      "its paladin.io/gpu-memory-sized annotation)");
  AddApiOptions(webhook, args.get());
  webhook->callback([args, exit_code] { *exit_code = RunWebhook(*args); });
}

}  // namespace paladin::cli::kube
