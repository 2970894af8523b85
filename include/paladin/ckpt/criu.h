// CRIU, the checkpoint/restore tool for a process tree's CPU-side state, run as a bounded
// subprocess. Paladin uses CRIU 4.x from a private prefix (scripts/criu.sh); see docs/ckpt.md.
#ifndef PALADIN_CKPT_CRIU_H_
#define PALADIN_CKPT_CRIU_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::ckpt {

struct Criu {
  std::string path;     // the criu program (the prefix's wrapper, or criu on the PATH)
  std::string version;  // e.g. "4.1.1"
  // CRIU's no-breakpoint fallback (CRIU_FAULT=130): needed on kernels where hardware breakpoints
  // do not fire (some virtual machines), where a dump otherwise hangs in parasite cure.
  bool no_breakpoints = false;
  // Whether the kernel tracks dirty memory (soft-dirty bits), which pre-dumps need.
  bool dirty_tracking = false;
  // Whether this CRIU dumps and restores inet sockets on this kernel (ProbeInetSockets; CRIU
  // before 4.2 cannot on Linux 6.16+), and CRIU's error when it cannot.
  bool inet_sockets = false;
  std::string inet_error;
  // How CRIU holds the job's TCP connections still while it dumps and restores them: "nftables"
  // where this CRIU and kernel can (`criu check --feature nftables`), else "skip" (CRIU's default,
  // iptables, needs a program nodes may lack). Without a lock a connection's peer in the job may
  // send into a socket being dumped, and its restore can fail ("Can't restore not-sent send
  // queue data"): docs/ckpt.md, "Sockets".
  std::string network_lock = "skip";
  // libpaladin-criu-rlimit.so, preloaded into every CRIU call, when this process lacks
  // CAP_SYS_RESOURCE (root in Docker and some sandboxed VMs): without it CRIU cannot read the
  // resource limits of a process of another user, so cannot dump unprivileged jobs. "" otherwise.
  std::string rlimit_preload;
  // Whether CRIU can dump a job that runs as another user: CAP_SYS_RESOURCE, or the preload.
  bool dumps_other_users = true;
  // One line for the user about the above when this process lacks CAP_SYS_RESOURCE ("" when it
  // has it): that the preload is used, or that it is missing and what that means. Said once by
  // whoever located CRIU.
  std::string rlimit_note;
  // The hash of Paladin's patches (scripts/criu-patches) this CRIU was built with, as its
  // wrapper from scripts/criu_lazy.sh names it; "" for a CRIU without them, which cannot serve
  // lazy pages here or leaves no copy on a failed post-copy move (docs/lazy_migration.md).
  std::string lazy_patches;

  // CRIU_FAULT for no_breakpoints, LD_PRELOAD for rlimit_preload.
  std::vector<std::pair<std::string, std::string>> Env() const;
};

// $PALADIN_CRIU, else /opt/paladin/criu/criu (scripts/criu.sh), else `criu` on the PATH; it must
// answer --version within 10 s and be version 4 or newer. Also decides rlimit_preload.
StatusOr<Criu> LocateCriu();

// The patch hash a CRIU wrapper names ("patches HASH" next to "criu-patches" in its first lines),
// "" when it names none.
std::string CriuPatches(const std::string& path);

// A CRIU for post-copy moves: `criu` itself when it has Paladin's patches, else the one of
// $PALADIN_CRIU_LAZY or /opt/paladin/criu-lazy/criu (scripts/criu_lazy.sh) with criu's other
// settings, if it has them and `criu check --feature uffd-noncoop` passes. Fails naming
// scripts/criu_lazy.sh when there is none.
StatusOr<Criu> LazyCriu(const Criu& criu);

// The CRIU a streaming pre-copy move runs, for the dump into the destination's page server and
// for that page server: LazyCriu's where there is one that locks the network as `criu` does
// (its dump ends the page stream without waiting out a TCP cork, about 0.25 s of the pause; its
// page server writes what it decrypts straight into the image: scripts/criu-patches/0007 and
// 0009); else `criu` itself. `lazy`: LazyCriu(criu)'s answer where the caller holds it (a receiver
// finds it when it starts); else it is asked for here (about 0.1 s: two `criu check`s).
Criu StreamCriu(const Criu& criu, const std::optional<StatusOr<Criu>>& lazy = std::nullopt);

// Whether this process has CAP_SYS_RESOURCE in its effective set (/proc/self/status, CapEff).
bool HasSysResource();

// libpaladin-criu-rlimit.so: $PALADIN_LIB_DIR, else next to the running program, else in
// ../lib/paladin from it (where `cmake --install` puts it).
StatusOr<std::string> FindCriuRlimitLibrary();

// Decides `no_breakpoints` for this kernel by dumping a throwaway process (its own PID
// namespace) with a 20 s limit, first plainly and then with CRIU_FAULT=130, and
// `dirty_tracking` with `criu check --feature mem_dirty_track`. The answers are cached per kernel
// in `cache_dir`. Fails (with CRIU's last log lines) when no dump works.
Status ProbeBreakpoints(Criu* criu, const std::string& cache_dir);

// Decides `inet_sockets`: dumps a throwaway process (pid 1 of its own PID namespace) holding a
// listening TCP socket and a UDP socket on loopback with the options of a job's dump, restores
// it and connects to the listening port. The answer is cached per kernel, CRIU version and CRIU
// path in `cache_dir`; a failed probe's images and logs are left in cache_dir, and
// `inet_error` names CRIU's first error and the log. Fails only when the probe cannot be run.
Status ProbeInetSockets(Criu* criu, const std::string& cache_dir);

struct DumpOptions {
  bool leave_running = false;  // the default is to kill the tree once dumped
  bool leave_stopped = false;
  bool pre_dump = false;      // memory only, the tree keeps running (iterative migration)
  std::string parent_images;  // a previous (pre-)dump, relative to the image dir
  double timeout_s = 600;
  // Where CRIU's log is copied when the dump fails, for the error to name (the caller removes a
  // failed image); "" names it in the image directory.
  std::string failed_log;
  // Post-copy: the dump keeps the tree's anonymous memory and serves it from a page server on
  // this connected socket (--ps-socket; the page relay carries it on to the destination's
  // lazy-pages daemon, migrate/page_relay.h) until the daemon has it all (or fails); the tree is
  // left stopped either way (with Paladin's patches). Dump returns once the server is up, with
  // the running dump in *lazy_dump (ServingResult waits for it); its log goes to lazy_log,
  // outside the image, which is sent while the dump still runs. The caller keeps the socket.
  // -1: not post-copy.
  int lazy_socket = -1;
  std::string lazy_log;
  pid_t* lazy_dump = nullptr;
  // Streaming pre-copy (a migration's source): the dump sends the tree's memory (pagemap and
  // pages images) to a `criu page-server` on this connected socket (--ps-socket; the page relay
  // carries it on to the destination's page server, migrate/page_relay.h) instead of writing it
  // into `dir`; the rest of the image is written into `dir` as usual. The caller keeps the
  // socket. -1: memory into `dir`.
  int page_server_socket = -1;
  // The tree's network namespace file when it is not this process's and stays out of the image (a
  // rank's own network, rank_net.h): CRIU records it as external (--external net[INODE]:KEY,
  // kExternalNetKey) instead of dumping its devices, addresses and routes, and its network lock
  // (criu.network_lock) is set in that namespace. The root must be in it.
  std::string net_ns;
};
// CRIU's key for a tree's external network namespace (DumpOptions::net_ns,
// RestoreOptions::net_ns_fd).
inline constexpr const char* kExternalNetKey = "paladin-net";
// Dumps the tree with Paladin's CRIU options (TCP connections with their state; see
// CloseOutsideConnections for those to outside peers). A failure names CRIU's first error line
// and where its full log is.
Status Dump(const Criu& criu, pid_t root, const std::string& dir, const DumpOptions& options);

struct RestoreOptions {
  bool leave_stopped = false;  // restored tasks wait in SIGSTOP (GPU restore comes next)
  double timeout_s = 600;
  // Files the dumped tree had open that the restored one gets from this process instead
  // (--inherit-fd): a descriptor here and the dumped file's path.
  std::vector<std::pair<int, std::string>> inherit_fds;
  bool lazy_pages = false;  // memory comes from a running `criu lazy-pages` (StartLazyPages)
  // For an image whose tree had an external network namespace (DumpOptions::net_ns): a
  // descriptor of the namespace it is restored into (--inherit-fd fd[N]:kExternalNetKey). -1:
  // none (CRIU refuses such an image without one).
  int net_ns_fd = -1;
};
// Restores the tree detached from CRIU; returns the host pid of its root. Connected TCP sockets
// come back with their state when the dump saved it, else closed (images of CRIU before 4.2).
StatusOr<pid_t> Restore(const Criu& criu, const std::string& dir, const RestoreOptions& options);

// A CRIU that keeps running after it said it is ready (--status-fd): a post-copy dump serving
// pages, or a lazy-pages daemon. Started in a process group of its own; waits up to `ready_s`
// for its word. Fails with its log's first error when it ends or stays silent. `pass_fd`: as
// RunBounded's (a streaming move's page server gets its socket so, --ps-socket).
StatusOr<pid_t> StartServing(const Criu& criu, std::vector<std::string> argv,
                             const std::string& log, double ready_s, int pass_fd = -1);

// The destination's page puller of a post-copy move: `criu lazy-pages` for the image in `dir`,
// fetching from the source's page server on `socket`, a connected socket (--ps-socket; the
// caller keeps its own); returns once it waits for the restore.
StatusOr<pid_t> StartLazyPages(const Criu& criu, const std::string& dir, int socket);

// Waits for a StartServing process (at most timeout_s, then kills it): OK when it exited 0,
// else its exit and its log's first error.
Status ServingResult(pid_t pid, const std::string& what, const std::string& log, double timeout_s);

}  // namespace paladin::ckpt

#endif  // PALADIN_CKPT_CRIU_H_
