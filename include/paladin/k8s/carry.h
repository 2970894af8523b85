// Carrying a move's checkpoint image to another machine: the destination node's mover listens
// (`paladin k8s mover --carry-listen ADDR:PORT`) and takes images into its node's image folder;
// the source's mover (or `paladin k8s move --to-mover HOST:PORT`) sends them with Paladin's
// transfer (src/transfer: chunks checked as they arrive, resumable, the image verified before it
// appears). Both ends hold the cluster's move key, from which the channel's secret is derived; it
// never crosses the network. The line protocol (docs/kubernetes.md, "Carrying an image between
// machines"):
//
//   (the server first)       CHALLENGE <c> and the answers of migrate::CheckProof: both sides
//                            prove CarryToken(key), and every line after carries a MAC
//                            (include/paladin/migrate/control.h)
//   CARRY <image> <bytes>    -> OK present (the image is here already, whole)
//                             | OK <port> <salt>: the transfer's receiver listens there, taking
//                               this image only, with a token both ends derive from the salt
//                               (random, made for it) and the channel's secret; once the
//                               sender has sent the image, a second answer: OK carried <files>
//                               <bytes> (verified and renamed into the folder) | ERR <why>
//   MARK <image> <file>      -> OK yes | OK no: whether the image's folder holds that file (the
//                               mark the destination's runtime leaves once it restored a
//                               container's GPU state)
//   PRUNE <node> [<uid>,...] -> OK <removed>: the periodic checkpoints node <node> sent that are
//                               no longer of use (PruneCheckpoints: those of pods not listed, and
//                               all but the newest of each listed one; a claimed one is kept)
#ifndef PALADIN_K8S_CARRY_H_
#define PALADIN_K8S_CARRY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "paladin/base/status.h"

namespace paladin::k8s {

// The channel's secret: HMAC-SHA256 of a fixed label under the cluster's move key, in hex. Who
// holds the key can make restore tokens already; the carry asks nothing more of it.
std::string CarryToken(const std::string& key);

// The node's move key file (`--key`), as moves read it.
StatusOr<std::string> ReadMoveKey(const std::string& path);

// A name the carry takes: a move's image ("move-" then lowercase letters, digits and dashes) or a
// periodic checkpoint's ("recover-" then a pod's uid and the time: CheckpointImageName).
bool CarriableImageName(const std::string& name);

struct CarryServerOptions {
  std::string images;  // this node's image folder: carried images land here
  std::string key;     // the cluster's move key (ReadKey's hex)
  std::string bind_address = "127.0.0.1";
  // The command port; each image's transfer listens on port + 1 (0: both ephemeral).
  int port = 0;
  double io_timeout_s = 30;
  // One line per carry and per refusal; called from connection threads, one at a time.
  std::function<void(const std::string&)> log;
};

// Serves carries on a thread of its own from Listen() until Stop() or destruction. Images are
// received one at a time (a second sender waits for the first); MARK is answered at once.
class CarryServer {
 public:
  // Binds and starts serving; fails when the address is taken or the folder cannot be made.
  // Folders of carries that a stopped server left unfinished (IMAGES/.carry-*) are removed.
  static StatusOr<std::unique_ptr<CarryServer>> Listen(CarryServerOptions options);
  ~CarryServer();
  CarryServer(const CarryServer&) = delete;
  CarryServer& operator=(const CarryServer&) = delete;
  int port() const;
  void Stop();

  struct Impl;

 private:
  explicit CarryServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct CarryReport {
  bool present = false;  // the destination had the image already
  int files = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

// Sends the image folder `dir` (its last path element names it) to the carry server at
// host:port, writing its manifest first when it has none. Returns once the destination has it
// verified in its folder. `progress` gets a line now and then (may be empty).
StatusOr<CarryReport> CarryImageTo(const std::string& dir, const std::string& host, int port,
                                   const std::string& key,
                                   const std::function<void(const std::string&)>& progress);

// PRUNE at the destination: how many older checkpoint images of `node` it removed.
StatusOr<int> PruneCarried(const std::string& host, int port, const std::string& key,
                           const std::string& node, const std::set<std::string>& present_uids);

// Whether the destination's image `image` holds `file` (MARK); also how a move asks, before it
// checkpoints anything, whether the destination's mover is there and takes this node's key.
StatusOr<bool> CarriedImageHas(const std::string& host, int port, const std::string& key,
                               const std::string& image, const std::string& file);

}  // namespace paladin::k8s

#endif  // PALADIN_K8S_CARRY_H_
