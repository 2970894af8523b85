#include "paladin/k8s/server_moves.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "json_fields.h"

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;

constexpr char kMoverComponent[] = "paladin-mover";

std::string Place(const std::string& node, int gpu) {
  return gpu >= 0 ? node + "/" + std::to_string(gpu) : node;
}

// What the move asks for, in words: "GPU 1 of its node", "node b, the packer's GPU".
std::string Target(const api::PodMove& m) {
  if (m.to.node.empty() || m.to.node == m.from_node) {
    return m.to.gpu >= 0 ? "GPU " + std::to_string(m.to.gpu) + " of its node"
                         : "the GPU Paladin's packer chooses on its node";
  }
  return "node " + m.to.node + (m.to.gpu >= 0 ? ", GPU " + std::to_string(m.to.gpu) : "");
}

// The server takes printable text of up to 2048 bytes.
std::string ForTheServer(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  if (text.size() > 2048) text.resize(2048);
  return text;
}

// The pod NS/NAME's JSON, "" when the API server has none (or cannot say).
std::string PodJson(const ApiClient& kube, const std::string& ns, const std::string& name) {
  StatusOr<std::string> body = kube.Get("/api/v1/namespaces/" + ns + "/pods/" + name);
  return body.ok() ? *body : "";
}

// The uid of pod NS/NAME, or "" when it cannot be read (its events then go without it).
std::string PodUid(const ApiClient& kube, const std::string& ns, const std::string& name) {
  const Json pod = Json::parse(PodJson(kube, ns, name), nullptr, /*allow_exceptions=*/false);
  return pod.is_object() ? Str(pod.value("metadata", Json::object()), "uid") : "";
}

void Event(const ApiClient& kube, const std::string& ns, const std::string& name,
           const std::string& type, const std::string& reason, const std::string& message,
           const std::function<void(const std::string&)>& progress) {
  const std::string uid = PodUid(kube, ns, name);
  if (uid.empty()) return;  // the pod is gone: nothing to attach the event to
  Status s = PostPodEvent(kube, ns, name, uid, type, reason, message, kMoverComponent);
  if (!s.ok()) progress("event " + reason + " on pod " + ns + "/" + name + ": " + s.message());
}

// How a taken move ended; `unfinished`: it failed after the pod's checkpoint was whole (its
// process is only in the image), so it stays taken and the next pass finishes it from the image
// (SettleLeftovers, ResumeMove) rather than leave the pod stopped.
struct CarriedOut {
  api::PodMoveOutcome outcome;
  bool unfinished = false;
};

// Carries out one taken move.
CarriedOut CarryOut(const ApiClient& kube, const api::PodMove& m, const MoverOptions& options,
                    const std::function<void(const std::string&)>& progress) {
  CarriedOut out;
  api::PodMoveOutcome& outcome = out.outcome;
  const std::string pod = m.ns + "/" + m.name;
  StatusOr<MoveOptions> move = ServerMoveOptions(
      m, options, [&](const std::string& node) { return FindMover(kube, options, node); });
  if (!move.ok()) {
    outcome.message = move.status().message();
    return out;
  }
  StatusOr<MoveResult> r = MovePod(kube, *move, progress, &out.unfinished);
  if (!r.ok()) {
    outcome.message = r.status().message();
    return out;
  }
  out.unfinished = false;
  outcome.ok = true;
  outcome.new_name = r->new_name;
  outcome.node = r->to_node;
  outcome.gpu = r->to_gpu;
  outcome.paused_ms = r->paused_ms;
  outcome.message = "moved " + pod + " -> " + m.ns + "/" + r->new_name + ", " +
                    Place(r->from_node, r->from_gpu) + " -> " + Place(r->to_node, r->to_gpu) +
                    ": checkpoint " + std::to_string(r->checkpoint_ms) + " ms, paused " +
                    std::to_string(r->paused_ms) + " ms";
  return out;
}

// One pass at a time on a node: an exclusive lock on IMAGES/mover.lock (made 0600, never through
// a link, refused unless it is this user's and no one else's), held by the pass. Holding it, a
// mover knows that no other mover of the node is in the middle of a move, so what its name left
// taken was left by a mover that stopped. The lock goes with the process, however it ends, and
// with the children it started: the descriptor is inherited (no O_CLOEXEC), so a runc checkpoint
// left running by a mover killed during it holds the lock until it ends, and the next pass
// waits for it rather than undoing a move whose dump is still being written.
class PassLock {
 public:
  // Busy: Unavailable; a file that cannot be made or is not the mover's own: the error.
  static StatusOr<PassLock> Take(const std::string& images) {
    std::error_code ec;
    std::filesystem::create_directories(images, ec);
    const std::string path = images + "/mover.lock";
    const int fd = open(path.c_str(), O_RDONLY | O_CREAT | O_NOFOLLOW, 0600);  // inherited
    if (fd < 0) return Internal("cannot open " + path + ": " + std::strerror(errno));
    PassLock lock(fd);
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077) != 0) {
      return PermissionDenied(path + " is not a file of this user's alone (mode 0600): refused");
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      return errno == EWOULDBLOCK
                 ? Unavailable("another mover of this node is in a pass (" + path + ")")
                 : Internal("cannot lock " + path + ": " + std::strerror(errno));
    }
    return lock;
  }
  PassLock(PassLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  PassLock& operator=(PassLock&&) = delete;
  PassLock(const PassLock&) = delete;
  PassLock& operator=(const PassLock&) = delete;
  ~PassLock() {
    if (fd_ >= 0) close(fd_);
  }

 private:
  explicit PassLock(int fd) : fd_(fd) {}
  int fd_;
};

// Tells the server how move ID ended, a few times: the server may be restarting.
void Finish(const api::Client& server, const std::string& id, api::PodMoveOutcome outcome,
            const std::function<void(const std::string&)>& progress) {
  outcome.message = ForTheServer(outcome.message);
  Status told = Status::Ok();
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (attempt > 0) sleep(1);
    told = server.Post("/v1/pod-moves/" + id + "/finish", api::ToJson(outcome)).status();
    if (told.ok() || told.code() != StatusCode::kUnavailable) break;
  }
  if (!told.ok()) progress("move " + id + ": the server did not take its end: " + told.message());
}

// Settles one leftover move `m` (SettleLeftover) from the API server's pods and, when the pod is
// still there without a replacement, on the node (ResumeMove).
void SettleOne(const ApiClient& kube, const api::Client& server, const MoverOptions& options,
               const api::PodMove& m, const std::function<void(const std::string&)>& progress) {
  const std::string id = std::to_string(m.id);
  const Leftover l =
      SettleLeftover(m, PodJson(kube, m.ns, m.name), PodJson(kube, m.ns, NextPodName(m.name)));
  if (l.action == Leftover::Action::kWait) return;
  if (l.action == Leftover::Action::kResume) {
    api::PodMoveOutcome outcome;
    StatusOr<MoveOptions> move = ServerMoveOptions(
        m, options, [&](const std::string& node) { return FindMover(kube, options, node); });
    bool whole = false;
    StatusOr<Resumed> r = move.ok() ? ResumeMove(kube, *move, progress, &whole) : move.status();
    if (!r.ok() && whole) {
      // The pod's process is in the image only: tried again next pass, then restored where it
      // was rather than left stopped.
      const double taken_for =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count() -
          m.taken_at;
      if (taken_for < options.finish_within_s) {
        progress("move " + id + ": finishing it failed (" + r.status().message() +
                 "); the next pass tries again (after " +
                 std::to_string(static_cast<int>(options.finish_within_s)) +
                 " s taken, the pod is restored where it was)");
        return;  // stays taken
      }
      MoveOptions home = *move;
      home.node = m.from_node;
      home.gpu = -1;  // the packer's choice there, the old pod not counted
      home.to_images.clear();
      home.to_mover.clear();
      progress("move " + id + ": not finished within " +
               std::to_string(static_cast<int>(options.finish_within_s)) + " s (" +
               r.status().message() + "): restoring the pod on its own node " + m.from_node);
      StatusOr<Resumed> back = ResumeMove(kube, home, progress);
      if (back.ok() && back->kind == Resumed::Kind::kFinished) {
        const MoveResult& mr = back->result;
        outcome.message = "could not be finished on " + Target(m) + " (" + r.status().message() +
                          "): the pod was restored where it was instead, as " + m.ns + "/" +
                          mr.new_name + " on " + Place(mr.to_node, mr.to_gpu) +
                          " from its checkpoint image " + mr.image;
        Event(kube, m.ns, mr.new_name, "Warning", "MoveFailed",
              "restored from pod " + m.ns + "/" + m.name + " with its process state on its own " +
                  "node (move " + id + ", asked by " + m.asked_by + "): " + outcome.message,
              progress);
      } else {
        outcome.message = "could not be finished on " + Target(m) + " (" + r.status().message() +
                          "), nor the pod restored where it was (" +
                          (back.ok() ? back->message : back.status().message()) +
                          "): its checkpoint image stays in the node's image folder";
      }
      progress("move " + id + ": failed, " + outcome.message);
      Finish(server, id, outcome, progress);
      return;
    }
    if (!r.ok()) {
      outcome.message = "its mover was stopped in the middle of it: " + r.status().message();
    } else if (r->kind == Resumed::Kind::kUndone) {
      outcome.message = r->message;
    } else {
      const MoveResult& mr = r->result;
      outcome.ok = true;
      outcome.new_name = mr.new_name;
      outcome.node = mr.to_node;
      outcome.gpu = mr.to_gpu;
      outcome.paused_ms = mr.paused_ms;
      outcome.message = "finished by the next pass of its mover from the checkpoint image " +
                        mr.image + ": moved " + m.ns + "/" + m.name + " -> " + m.ns + "/" +
                        mr.new_name + ", " + Place(mr.from_node, mr.from_gpu) + " -> " +
                        Place(mr.to_node, mr.to_gpu) + ", paused " + std::to_string(mr.paused_ms) +
                        " ms";
      Event(kube, m.ns, mr.new_name, "Normal", "Moved",
            "restored from pod " + m.ns + "/" + m.name + " with its process state (move " + id +
                ", asked by " + m.asked_by + "): " + outcome.message,
            progress);
    }
    progress("move " + id + " (left by a mover stopped in the middle of it): " +
             (outcome.ok ? "done, " : "failed, ") + outcome.message);
    Finish(server, id, outcome, progress);
    return;
  }
  if (l.action == Leftover::Action::kDeleteOldThenDone) {
    StatusOr<std::string> deleted = kube.Delete("/api/v1/namespaces/" + m.ns + "/pods/" + m.name);
    if (!deleted.ok() && deleted.status().code() != StatusCode::kNotFound) {
      progress("move " + id + ": deleting pod " + m.ns + "/" + m.name + ": " +
               deleted.status().message() + " (next pass)");
      return;
    }
  }
  if (l.action != Leftover::Action::kFail && !m.to.node.empty() && m.to.node != m.from_node) {
    // The replacement runs on the other node from its own copy: this node's is of no more use.
    if (int n = RemoveMoveImages(options.move.images, m.ns, m.name, l.new_name); n > 0) {
      progress("move " + id + ": this node's copy of its image removed");
    }
  }
  api::PodMoveOutcome outcome;
  outcome.ok = l.action != Leftover::Action::kFail;
  outcome.message = l.message;
  outcome.new_name = l.new_name;
  progress("move " + id + " (left by a mover stopped in the middle of it): " +
           (outcome.ok ? "done, " : "failed, ") + l.message);
  Finish(server, id, outcome, progress);
}

// Settles the leftovers of this mover's name: moves it took and did not finish, taken at least
// options.settle_after_s ago. The caller holds the node's pass lock: none is in flight.
void SettleLeftovers(const ApiClient& kube, const api::Client& server, const MoverOptions& options,
                     const std::string& mover,
                     const std::function<void(const std::string&)>& progress) {
  StatusOr<Json> list =
      server.Get("/v1/pod-moves?node=" + options.node + "&state=taken&cluster=" + options.cluster);
  if (!list.ok()) return;  // the requested moves' list says why, just after
  const Json moves = list->value(api::key::kMoves, Json::array());
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const Json& j : moves.is_array() ? moves : Json::array()) {
    StatusOr<api::PodMove> m = api::DecodePodMove(j);
    if (!m.ok() || m->mover != mover || m->from_node != options.node) continue;
    const double taken_at = j.value(api::key::kTakenAt, now);
    if (now - taken_at < options.settle_after_s) continue;
    SettleOne(kube, server, options, *m, progress);
  }
}

// Takes move `m` in `mover`'s name and carries it out; whether it was taken.
bool TakeAndCarryOut(const ApiClient& kube, const api::Client& server, const MoverOptions& options,
                     const std::string& mover, const api::PodMove& m,
                     const std::function<void(const std::string&)>& progress) {
  const std::string id = std::to_string(m.id);
  const std::string pod = m.ns + "/" + m.name;
  StatusOr<Json> took = server.Post("/v1/pod-moves/" + id + "/take", {{api::key::kMover, mover}});
  if (!took.ok()) {
    progress("move " + id + " of pod " + pod + ": " + took.status().message() + " (skipped)");
    return false;
  }
  progress("move " + id + ": pod " + pod + " to " + Target(m) + ", asked by " + m.asked_by +
           ", taken by " + mover);
  Event(kube, m.ns, m.name, "Normal", "Moving",
        "Paladin moves this pod to " + Target(m) + " (move " + id +
            ", asked through Paladin's server by " + m.asked_by + ")",
        progress);
  const CarriedOut carried = CarryOut(kube, m, options, progress);
  const api::PodMoveOutcome& outcome = carried.outcome;
  if (carried.unfinished) {
    Event(kube, m.ns, m.name, "Warning", "MoveInterrupted",
          "move " + id + " stopped after this pod's checkpoint: " + outcome.message +
              "; the mover's next pass finishes it from the checkpoint image",
          progress);
    progress("move " + id +
             ": stopped after the checkpoint, left taken for the next pass: " + outcome.message);
    return true;
  }
  if (outcome.ok) {
    Event(kube, m.ns, outcome.new_name, "Normal", "Moved",
          "restored from pod " + pod + " with its process state (move " + id + ", asked by " +
              m.asked_by + "): " + outcome.message,
          progress);
  } else {
    Event(kube, m.ns, m.name, "Warning", "MoveFailed",
          "move " + id + " asked by " + m.asked_by + ": " + outcome.message, progress);
  }
  progress("move " + id + ": " + (outcome.ok ? "done, " : "failed, ") + outcome.message);
  Finish(server, id, outcome, progress);
  return true;
}

}  // namespace

Leftover SettleLeftover(const api::PodMove& move, const std::string& old_pod,
                        const std::string& new_pod) {
  const std::string pod = move.ns + "/" + move.name;
  const auto read = [](const std::string& text) {
    return text.empty() ? Json() : Json::parse(text, nullptr, /*allow_exceptions=*/false);
  };
  const Json old_json = read(old_pod);
  Json new_json = read(new_pod);
  // A pod of the replacement's name that is not this pod's replacement is not one.
  if (new_json.is_object()) {
    const Json meta = new_json.value("metadata", Json::object());
    const std::string from = Str(meta.value("annotations", Json::object()), kMovedFromAnnotation);
    if (from.rfind(pod + " (", 0) != 0) new_json = Json();
  }
  const std::string old_phase =
      old_json.is_object() ? Str(old_json.value("status", Json::object()), "phase") : "";
  Leftover l;
  if (new_json.is_object()) {
    const std::string name = Str(new_json.value("metadata", Json::object()), "name");
    const std::string phase = Str(new_json.value("status", Json::object()), "phase");
    if (api::PodPhaseRunning(phase)) {
      l.action =
          old_json.is_object() ? Leftover::Action::kDeleteOldThenDone : Leftover::Action::kDone;
      l.new_name = name;
      l.message = "finished by the next pass of its mover: the replacement " + move.ns + "/" +
                  name + " runs" + (old_json.is_object() ? ", pod " + pod + " deleted" : "");
    } else if (api::PodPhaseEnded(phase)) {
      l.action = Leftover::Action::kFail;
      l.message = "the replacement " + move.ns + "/" + name + " ended (" + phase +
                  ") without running on; the checkpoint image stays in the node's image folder";
    }
    return l;  // kWait while it starts
  }
  if (old_json.is_object()) {
    // On the node: undone if its container runs on, else finished from the image (ResumeMove).
    // Its phase says little: once the checkpoint has ended its container, the pod shows Failed
    // (or Succeeded) while its process is whole in the image.
    l.action = Leftover::Action::kResume;
    return l;
  }
  l.action = Leftover::Action::kFail;
  l.message = "its mover was stopped before the replacement ran, and pod " + pod +
              " is gone: nothing to finish the move with; its checkpoint image, if the "
              "checkpoint ended, stays in the node's image folder (its owner file names the pod)";
  return l;
}

StatusOr<std::string> MoverAddress(const std::string& pod_list, const std::string& node, int port) {
  const Json list = Json::parse(pod_list, nullptr, false);
  if (!list.is_object() || !list.value("items", Json()).is_array()) {
    return InvalidArgument("the movers' pods are not a PodList");
  }
  std::string seen;
  for (const Json& pod : list["items"]) {
    if (!pod.is_object()) continue;
    const Json spec = pod.value("spec", Json::object());
    const Json status = pod.value("status", Json::object());
    if (!spec.is_object() || !status.is_object() || Str(spec, "nodeName") != node) continue;
    const std::string name = Str(pod.value("metadata", Json::object()), "name");
    if (Str(status, "phase") != "Running") {
      seen = "its mover pod " + name + " is " + Str(status, "phase");
      continue;
    }
    const std::string ip = Str(status, "podIP");
    if (ip.empty()) {
      seen = "its mover pod " + name + " has no IP yet";
      continue;
    }
    return (ip.find(':') != std::string::npos ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
  }
  return Unavailable("node " + node + " has no running mover to send the image to" +
                     (seen.empty() ? "" : " (" + seen + ")"));
}

StatusOr<std::string> FindMover(const ApiClient& kube, const MoverOptions& options,
                                const std::string& node) {
  const size_t slash = options.mover_pods.find('/');
  const size_t eq = options.mover_pods.find('=');
  if (slash == std::string::npos || eq == std::string::npos || eq < slash) {
    return InvalidArgument("--mover-pods '" + options.mover_pods +
                           "': expected NAMESPACE/KEY=VALUE");
  }
  const std::string ns = options.mover_pods.substr(0, slash);
  const std::string key = options.mover_pods.substr(slash + 1, eq - slash - 1);
  const std::string value = options.mover_pods.substr(eq + 1);
  StatusOr<std::string> pods =
      kube.Get("/api/v1/namespaces/" + ns + "/pods?labelSelector=" + key + "%3D" + value);
  if (!pods.ok()) {
    return Status(pods.status().code(),
                  "the movers' pods (" + options.mover_pods + "): " + pods.status().message());
  }
  return MoverAddress(*pods, node, options.carry_port);
}

StatusOr<MoveOptions> ServerMoveOptions(
    const api::PodMove& move, const MoverOptions& options,
    const std::function<StatusOr<std::string>(const std::string& node)>& find_mover) {
  MoveOptions out = options.move;
  out.ns = move.ns;
  out.pod = move.name;
  out.new_name.clear();
  out.node = move.to.node.empty() ? move.from_node : move.to.node;
  out.gpu = move.to.gpu;
  out.to_images.clear();
  out.to_mover.clear();
  if (out.node != move.from_node) {
    if (auto it = options.node_images.find(out.node); it != options.node_images.end()) {
      out.to_images = it->second;
    } else if (auto m = options.node_movers.find(out.node); m != options.node_movers.end()) {
      out.to_mover = m->second;
    } else if (options.carry_port > 0 && find_mover) {
      StatusOr<std::string> at = find_mover(out.node);
      if (!at.ok()) return Status(at.status().code(), at.status().message() + ": nothing moved");
      out.to_mover = *at;
    } else {
      return FailedPrecondition("the mover of node " + options.node +
                                " knows neither the image folder nor the mover of node " +
                                out.node + " (paladin k8s mover --node-images " + out.node +
                                "=DIR, or --node-movers " + out.node +
                                "=HOST:PORT): nothing moved");
    }
  }
  return out;
}

StatusOr<int> RunServerMoves(const ApiClient& kube, const api::Client& server,
                             const MoverOptions& options,
                             const std::function<void(const std::string&)>& progress) {
  StatusOr<Json> list = server.Get("/v1/pod-moves?node=" + options.node +
                                   "&state=requested&cluster=" + options.cluster);
  if (!list.ok()) return list.status();
  const Json moves = list->value(api::key::kMoves, Json::array());
  if (!moves.is_array()) return InvalidArgument("the server's moves: expected a list");
  const std::string mover = options.mover.empty() ? options.node : options.mover;
  StatusOr<PassLock> lock = PassLock::Take(options.move.images);
  if (!lock.ok() && lock.status().code() == StatusCode::kUnavailable) {
    progress(lock.status().message() + ": this pass does nothing");
    return 0;
  }
  if (!lock.ok()) return lock.status();
  SettleLeftovers(kube, server, options, mover, progress);
  int taken = 0;
  bool cordoned = false;
  // The server lists the newest first; the oldest is carried out first.
  for (auto j = moves.rbegin(); j != moves.rend(); ++j) {
    StatusOr<api::PodMove> m = api::DecodePodMove(*j);
    if (!m.ok()) {
      progress("a move the server listed is unreadable (" + m.status().message() + "): skipped");
      continue;
    }
    if (m->from_node != options.node || m->state != api::PodMoveState::kRequested) continue;
    // A drain's move: nothing new is to be placed on the node while its pods leave it.
    if (m->drain && !cordoned) {
      progress("move " + std::to_string(m->id) + " drains node " + options.node + ": cordoning it");
      if (Status c = CordonNode(kube, options.node); !c.ok()) {
        progress("cannot cordon node " + options.node + " (" + c.message() +
                 "): its drain's moves wait for the next pass");
        continue;
      }
      cordoned = true;
    }
    if (TakeAndCarryOut(kube, server, options, mover, *m, progress)) ++taken;
  }
  return taken;
}

}  // namespace paladin::k8s
