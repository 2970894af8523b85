// `paladin k8s`: Paladin's side of a Kubernetes cluster (docs/kubernetes.md).
//
//   node   advertises this node's GPU memory to the API server as the node-level extended
//          resource paladin.io/gpu-memory (bytes, the sum over its GPUs as NVML reports them, or
//          --gpu-memory), so that pods asking for it are admitted only where it fits and a
//          ResourceQuota on it caps a namespace
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "paladin/base/size.h"
#include "paladin/gpu/nvml.h"
#include "paladin/k8s/api.h"

namespace paladin::cli {
namespace {

struct NodeArgs {
  std::string node;
  std::string gpu_memory;  // empty: from NVML
  std::string nvml = "libnvidia-ml.so.1";
  std::string server;  // empty: in-cluster
  std::string ca_cert;
  std::string client_cert;
  std::string client_key;
  std::string token_file;
};

void Say(const std::string& line) { cli::Say("k8s node", line); }

// The node's GPU memory in bytes, with where it came from.
StatusOr<uint64_t> GpuMemory(const NodeArgs& args, std::string* source) {
  if (!args.gpu_memory.empty()) {
    uint64_t bytes = 0;
    if (!base::ParseSize(args.gpu_memory, &bytes) || bytes == 0) {
      return InvalidArgument("--gpu-memory '" + args.gpu_memory +
                             "': expected a size such as 80GiB");
    }
    *source = "--gpu-memory";
    return bytes;
  }
  StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load(args.nvml);
  if (!nvml.ok()) {
    return FailedPrecondition("no GPU memory to advertise: " + nvml.status().message() +
                              " (give --gpu-memory on a node without NVML)");
  }
  StatusOr<std::vector<gpu::GpuInfo>> gpus = (*nvml)->Gpus();
  if (!gpus.ok()) return gpus.status();
  if (gpus->empty()) return FailedPrecondition("NVML reports no GPU on this node");
  uint64_t total = 0;
  for (const gpu::GpuInfo& g : *gpus) total += g.total_bytes;
  *source = std::to_string(gpus->size()) + " GPU(s) as NVML reports them";
  return total;
}

StatusOr<k8s::ApiConfig> Config(const NodeArgs& args) {
  if (args.server.empty()) return k8s::InClusterConfig();
  k8s::ApiConfig config;
  if (Status s = k8s::SetServer(args.server, &config); !s.ok()) return s;
  config.ca_cert_file = args.ca_cert;
  if (args.client_cert.empty() != args.client_key.empty()) {
    return InvalidArgument("--client-cert and --client-key go together");
  }
  config.client_cert_file = args.client_cert;
  config.client_key_file = args.client_key;
  if (!args.token_file.empty()) {
    std::FILE* f = std::fopen(args.token_file.c_str(), "r");
    if (f == nullptr) return InvalidArgument("--token-file '" + args.token_file + "' unreadable");
    char buffer[8192];
    const size_t n = std::fread(buffer, 1, sizeof buffer, f);
    std::fclose(f);
    config.token.assign(buffer, n);
    while (!config.token.empty() && (config.token.back() == '\n' || config.token.back() == ' ')) {
      config.token.pop_back();
    }
    if (config.token.empty())
      return InvalidArgument("--token-file '" + args.token_file + "' is empty");
  }
  return config;
}

int RunNode(const NodeArgs& args) {
  if (Status s = k8s::CheckNodeName(args.node); !s.ok()) {
    Say(s.message());
    return 2;
  }
  StatusOr<k8s::ApiConfig> config = Config(args);
  if (!config.ok()) {
    Say(config.status().message());
    return 2;
  }
  std::string source;
  StatusOr<uint64_t> bytes = GpuMemory(args, &source);
  if (!bytes.ok()) {
    Say(bytes.status().message());
    return 1;
  }
  const k8s::ApiClient client(*config);
  StatusOr<std::string> node = client.PatchNodeStatus(
      args.node, k8s::ExtendedResourcePatch(k8s::kGpuMemoryResource, *bytes));
  if (!node.ok()) {
    Say(node.status().message());
    return 1;
  }
  std::printf("node %s: %s = %llu (%s, from %s)\n", args.node.c_str(), k8s::kGpuMemoryResource,
              static_cast<unsigned long long>(*bytes), base::FormatSize(*bytes).c_str(),
              source.c_str());
  return 0;
}

}  // namespace

void RegisterK8s(CLI::App& app, int* exit_code) {
  CLI::App* k8s = app.add_subcommand("k8s", "Paladin's side of a Kubernetes cluster");
  k8s->require_subcommand(1);
  auto args = std::make_shared<NodeArgs>();
  CLI::App* node = k8s->add_subcommand(
      "node", "Advertise this node's GPU memory as the extended resource paladin.io/gpu-memory");
  node->add_option("--node", args->node, "The Node's name in the cluster")->required();
  node->add_option("--gpu-memory", args->gpu_memory,
                   "GPU memory to advertise (e.g. 80GiB); default: the sum over NVML's GPUs");
  node->add_option("--nvml", args->nvml, "NVML library to read the GPUs from");
  node->add_option("--server", args->server,
                   "API server, https://HOST:PORT; default: the pod's (in-cluster)");
  node->add_option("--ca-cert", args->ca_cert, "PEM CA file verifying the API server");
  node->add_option("--client-cert", args->client_cert, "PEM client certificate");
  node->add_option("--client-key", args->client_key, "PEM client key");
  node->add_option("--token-file", args->token_file, "File holding a bearer token");
  node->callback([args, exit_code] { *exit_code = RunNode(*args); });
}

}  // namespace paladin::cli
