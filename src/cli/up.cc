// `paladin up`: a fleet of one on this machine — the server and one agent, embedded defaults,
// everything under one directory — and the CLI configured to use it.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "commands.h"
#include "local_fleet.h"
#include "paladin/api/client.h"
#include "paladin/api/wire.h"

namespace paladin::cli {

namespace key = api::key;

namespace {

struct UpArgs {
  std::string data;
  std::string listen = "127.0.0.1:7070";
  std::string emulated_gpus;
  std::string node;
  double checkpoint_every_s = 300;
  // HTTPS: the server's certificate and key, and the CA its clients trust (default: the
  // certificate itself, a self-signed one).
  std::string tls_cert, tls_key, tls_ca;
};

volatile sig_atomic_t g_up_stop = 0;
void OnUpSignal(int /*signal*/) { g_up_stop = 1; }

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "node-1";
  return name;
}

// Lets `paladin ps` and friends find this fleet with no flags.
Status WriteClientConfig(const std::string& url, const std::string& token,
                         const std::string& ca_file) {
  const std::string home = api::PaladinHome();
  std::error_code ec;
  std::filesystem::create_directories(home, ec);
  const std::string path = home + "/client.json";
  std::ofstream out(path, std::ios::trunc);
  if (!out) return IoError("cannot write " + path);
  api::Json config = {{key::kUrl, url}, {key::kToken, token}};
  if (!ca_file.empty()) config[key::kCaFile] = ca_file;
  out << config.dump(2) << "\n";
  out.close();
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write, ec);
  return Status::Ok();
}

int Up(UpArgs args) {
  // As root, workloads run as an unprivileged user who must reach their run directories: not
  // under a home directory.
  if (args.data.empty()) {
    args.data = geteuid() == 0 ? "/var/lib/paladin/up" : api::PaladinHome() + "/up";
  }
  if (args.node.empty()) args.node = Hostname();
  if (args.checkpoint_every_s < 0) {
    Say("up", "--checkpoint-every must be 0 (off) or a number of seconds");
    return 2;
  }
  std::vector<std::string> server_flags = {"--checkpoint-every", ""};
  char every[32];
  std::snprintf(every, sizeof every, "%g", args.checkpoint_every_s);
  server_flags[1] = every;
  if (!args.tls_cert.empty() || !args.tls_key.empty()) {
    if (args.tls_cert.empty() || args.tls_key.empty()) {
      Say("up", "--tls-cert and --tls-key go together");
      return 2;
    }
    std::error_code ec;
    for (std::string* path : {&args.tls_cert, &args.tls_key, &args.tls_ca}) {
      if (!path->empty()) *path = std::filesystem::absolute(*path, ec).string();
    }
    if (args.tls_ca.empty()) args.tls_ca = args.tls_cert;
    server_flags.insert(server_flags.end(),
                        {"--tls-cert", args.tls_cert, "--tls-key", args.tls_key});
    // The agent, this process's own client and the CLI configured below trust it.
    setenv("PALADIN_CA_FILE", args.tls_ca.c_str(), 1);
  }
  LocalFleet fleet(args.data);
  Say("up", "data in " + args.data + "; logs in " + args.data + "/logs");
  if (Status s = fleet.StartServer(args.listen, server_flags); !s.ok()) {
    Say("up", s.message());
    return 1;
  }
  std::vector<std::string> agent_flags;
  if (!args.emulated_gpus.empty()) agent_flags = {"--emulated-gpus", args.emulated_gpus};
  if (Status s = fleet.StartAgent(args.node, agent_flags); !s.ok()) {
    Say("up", s.message());
    return 1;
  }
  if (Status s = WriteClientConfig(fleet.url(), fleet.admin_token(), args.tls_ca); !s.ok()) {
    Say("up", s.message());
  }
  Say("up", "server " + fleet.url() + ", agent " + args.node + " ready");
  Say("up", "dashboard: " + fleet.url() + "/#token=" + fleet.admin_token());
  Say("up", "try: paladin submit --gpu-mem auto -- python3 train.py; paladin ps; Ctrl-C stops");
  struct sigaction stop {};
  stop.sa_handler = OnUpSignal;
  sigaction(SIGINT, &stop, nullptr);
  sigaction(SIGTERM, &stop, nullptr);
  while (g_up_stop == 0) {
    const std::string gone = fleet.Exited();
    if (!gone.empty()) {
      Say("up", gone + " exited; see " + fleet.LogPath(gone) + "; stopping");
      fleet.StopAll();
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  Say("up", "stopping (workloads keep running and are re-adopted by the next `paladin up`)");
  fleet.StopAll();
  return 0;
}

}  // namespace

void RegisterUp(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<UpArgs>();
  CLI::App* up = app.add_subcommand(
      "up", "Run a fleet of one on this machine: the server, one agent and the dashboard");
  up->add_option("--data", args->data, "Where state, checkpoints and logs go")
      ->default_str("/var/lib/paladin/up as root, else $PALADIN_HOME/up (~/.paladin/up)");
  up->add_option("--listen", args->listen, "HOST:PORT the server listens on")
      ->capture_default_str();
  up->add_option("--emulated-gpus", args->emulated_gpus,
                 "Emulated GPUs for the agent, e.g. 2x80GiB (default: the real GPUs, else one "
                 "emulated 80 GiB GPU)");
  up->add_option("--node", args->node, "The agent's node name (default: the host name)");
  up->add_option("--checkpoint-every", args->checkpoint_every_s,
                 "Seconds between periodic checkpoints of each job (0: off)")
      ->capture_default_str();
  up->add_option("--tls-cert", args->tls_cert,
                 "Serve the API over HTTPS with this certificate (PEM; with --tls-key)");
  up->add_option("--tls-key", args->tls_key, "The certificate's key (PEM)");
  up->add_option("--tls-ca", args->tls_ca,
                 "The CA the agent and the CLI trust for it (default: --tls-cert, self-signed)");
  up->callback([args, exit_code] { *exit_code = Up(*args); });
}

}  // namespace paladin::cli
