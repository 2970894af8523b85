// A fleet on this machine: `paladin up` and `paladin demo` run `paladin server` and `paladin
// agent` as child processes of their own (each in its own process group, output in
// DATA/logs/NAME.log), and stop them when done.
//
// Thread safety: none; owned by the command's main thread.
#pragma once

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "paladin/api/client.h"
#include "paladin/base/status.h"

namespace paladin::cli {

class LocalFleet {
 public:
  // `data_dir` holds server/, agents/NAME/ and logs/.
  explicit LocalFleet(std::string data_dir);
  ~LocalFleet();  // stops everything still running
  LocalFleet(const LocalFleet&) = delete;
  LocalFleet& operator=(const LocalFleet&) = delete;

  // Starts the server listening on `listen` (HOST:PORT, port 0 = any) and waits until it
  // answers; its admin token is then at hand.
  Status StartServer(const std::string& listen, const std::vector<std::string>& extra_flags);
  // Starts an agent named `name`, with a token of its own node's scope (agent:NAME), and waits
  // until the server lists it alive.
  Status StartAgent(const std::string& name, const std::vector<std::string>& extra_flags);
  // A node lost at once: its agent and every workload running under it are killed with SIGKILL.
  Status KillNode(const std::string& name);
  // SIGTERM to every child (agents first), SIGKILL after `grace_s`.
  void StopAll(double grace_s = 10);
  // The name of a child that has exited without being asked to, or "".
  std::string Exited();

  const std::string& data_dir() const { return data_dir_; }
  std::string AgentDir(const std::string& name) const { return data_dir_ + "/agents/" + name; }
  std::string LogPath(const std::string& name) const {
    return data_dir_ + "/logs/" + name + ".log";
  }
  const std::string& url() const { return url_; }
  const std::string& admin_token() const { return admin_token_; }
  api::Client Admin() const;

 private:
  StatusOr<pid_t> Spawn(const std::string& name, const std::vector<std::string>& args);
  StatusOr<std::string> NodeTokenFile(const std::string& name, const std::string& dir);
  std::string data_dir_;
  std::string exe_;
  std::string url_;
  std::string admin_token_;
  std::map<std::string, pid_t> children_;  // name -> pid, in start order by name
  std::set<std::string> kill_on_exit_;     // agents started with --kill-on-exit
  std::vector<std::string> order_;
};

// The path of the running `paladin` executable.
std::string SelfExe();

}  // namespace paladin::cli
