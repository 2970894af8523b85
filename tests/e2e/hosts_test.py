#!/usr/bin/env python3
"""Exactly-once drills with the two agents as separate hosts (label e2e).

Each agent runs in a "host" of its own: its own network namespace (one end of a veth pair; the
other end is on a bridge in this namespace, where the server listens) and its own mount namespace,
in which a private tmpfs lies over the agent's data and workloads folders (one path, the same on
both hosts, as a fleet deployed from one configuration has), over /tmp, /dev/shm and /run/paladin.
So the two agents share no run directory, no records, no uid allocations and no emulated-driver
control files; an image moves between them only through Paladin (a migration's transfer, or the
server's checkpoint store). PID namespaces are not separated, so this test sees every copy of a
job in /proc, wherever it runs.

What the hosts do share, as machines of a fleet would:
  - the server's checkpoint store (DIR/server/checkpoints): it is where the agents write their
    periodic checkpoints and where another node restores a dead node's job from, so it is the
    fleet's shared file system (a network file system in a real fleet);
  - the programs (the build's paladin and libraries, and the demo workload), read only;
  - the kernel (cgroups, the clock the lease runs on).

The drills, each on a fresh server and two fresh hosts:
  1. The node's fence (fence_test.py's drill, run here across hosts): the job's agent SIGKILLed,
     SIGSTOPped, or its host cut off from the network (its link set down), for 3x the lease.
  2. Fleet migrations with a fault (PALADIN_MIGRATE_FAULT in one agent's environment, read by the
     migration code the agent runs in-process): the destination agent killed after RESTORE, the
     source agent killed once the server committed (before RESUME) and after RESUME, and each
     message of the move lost in turn. A killed agent stays away for 3x the lease, then comes back.
In each, every copy of the job is sampled every 100 ms: never two running at once, the job ends
running exactly once with its state verified (the demo workload checks its memory every step),
and no stopped copy is left behind (a killed agent's stopped copy is cleaned up by its lease and
by the restarted agent's re-adoption).

The drills are independent (each has its own server, hosts, job tag and ports), so they run
PALADIN_HOSTS_JOBS at a time (default 3), each in a child process of this script with a slot of
its own: slot N's hosts are on bridge pal-brN, subnet 10.213.(77+N).0/24, namespaces pal-N-*.
A child's output is printed whole when it ends. ctest runs the drills as three entries (the
fence drills, the migrations on separate hosts, the migrations on one host), each with slots of
its own (PALADIN_HOSTS_FIRST_SLOT), so that they overlap with each other and with other tests.

Usage: hosts_test.py PALADIN
Environment: PALADIN_HOSTS_ONLY=DRILL runs one drill (names as printed: fence-FAULT,
mig-NAME on separate hosts, mig-NAME-onehost on one host) in this process;
PALADIN_HOSTS_SET=fence|separate|onehost runs only the fence drills, only the migrations on
separate hosts or only those on one host (default: every drill);
PALADIN_HOSTS_SLOT=N picks its network names (default 0); PALADIN_HOSTS_JOBS=N drills at a
time, in slots PALADIN_HOSTS_FIRST_SLOT (default 0) and up. Slot 7 is gang_test.py's.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crash_test  # noqa: E402
import fence_test  # noqa: E402
from crash_test import (Fleet, fail, failures, ok, tagged_processes, verify_once,  # noqa: E402
                        wait_for)

LEASE_S = fence_test.LEASE_S
# A drill's slot; the premise check of a run of several drills takes the first of its slots.
SLOT = int(os.environ.get("PALADIN_HOSTS_SLOT", os.environ.get("PALADIN_HOSTS_FIRST_SLOT", "0")))
BRIDGE = f"pal-br{SLOT}"
SUBNET = f"10.213.{77 + SLOT}"
# node-c only where a drill asks for a third host (SeparateHosts' `nodes`).
ADDRESSES = {"node-a": SUBNET + ".2", "node-b": SUBNET + ".3", "node-c": SUBNET + ".4"}


def sh(*args, check=True):
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


def children(pid):
    """The pids whose parent is PID."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return found


class HostProcess:
    """An agent started on a host: nsenter's child there. Signals go to the agent itself;
    nsenter waits for it and exits when it does. nsenter stops itself when its child stops, so a
    SIGCONT goes to both."""

    def __init__(self, popen):
        self.popen = popen
        # nsenter's child, or nsenter's end: one that failed (its host gone) is said, not waited
        # out; a loaded machine may take seconds to fork.
        wait_for("the agent on its host",
                 lambda: children(popen.pid) or popen.poll() is not None, 30, 0.02)
        started = children(popen.pid)
        if not started:
            raise TimeoutError(f"nsenter exited with {popen.returncode} before the agent started "
                               "on its host")
        self.pid = started[0]

    def poll(self):
        return self.popen.poll()

    def wait(self, timeout=None):
        return self.popen.wait(timeout)

    def send_signal(self, sig):
        if self.popen.poll() is None:
            os.kill(self.pid, sig)
            if sig == signal.SIGCONT:
                os.kill(self.popen.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)


class SeparateHosts:
    """Two hosts, node-a and node-b (or the `nodes` given: node-c as a third), each a network
    namespace and a mount namespace.

    A mount namespace lives as long as a process in it: each host's is held by a `sleep` (its
    "machine"), so that a restarted agent enters the same one and finds its records."""

    server_ip = SUBNET + ".1"

    def __init__(self, work, name, nodes=("node-a", "node-b")):
        self.nodes = tuple(nodes)
        self.mount = os.path.join(work, name + ".host")  # the same path on every host
        os.makedirs(self.mount)
        self.holders = {}
        os.makedirs("/run/paladin", exist_ok=True)
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", self.server_ip + "/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        for node in self.nodes:
            address = ADDRESSES[node]
            ns = self.netns(node)
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", self.link(node), "type", "veth", "peer", "name", "eth0",
               "netns", ns)
            sh("ip", "link", "set", self.link(node), "master", BRIDGE, "up")
            sh("ip", "-n", ns, "addr", "add", address + "/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            # The host's init: pid 1 of its PID namespace, reaping what is orphaned there.
            init = ("import os, time\n"
                    "while True:\n"
                    "    try:\n"
                    "        os.wait()\n"
                    "    except ChildProcessError:\n"
                    "        time.sleep(0.2)\n")
            setup = ("set -e; "
                     f"mount -t tmpfs -o mode=0755 {node} {self.mount}; "
                     "mount -t tmpfs -o mode=1777 tmp /tmp; "
                     "mount -t tmpfs -o mode=1777 shm /dev/shm; "
                     "mount -t tmpfs -o mode=0755 run /run/paladin; "
                     f"echo ready; exec python3 -c '{init}'")
            holder = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{ns}", "--", "unshare", "--mount", "--pid",
                 "--fork", "--kill-child", "--mount-proc", "--propagation", "private", "--", "sh",
                 "-c", setup],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            line = holder.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"host {node}: {line} {holder.stdout.read()}")
            self.holders[node] = holder

    @staticmethod
    def netns(node):
        return f"pal-{SLOT}-{node}"

    @staticmethod
    def link(node):
        return f"pal-{SLOT}{node[-1]}0"

    def init_pid(self, node):
        """The host's pid 1, as this namespace numbers it."""
        return wait_for(f"host {node}'s init", lambda: children(self.holders[node].pid), 10,
                        0.05)[0]

    def prefix(self, node):
        init = self.init_pid(node)
        return ["nsenter", f"--mount=/proc/{init}/ns/mnt", f"--pid=/proc/{init}/ns/pid",
                f"--net=/run/netns/{self.netns(node)}", "--"]

    def popen(self, node, argv, log, env):
        # Everything the agent holds is opened on its host: its working directory and its output
        # (a descriptor opened here would name a mount of this namespace, which CRIU, dumping the
        # agent's children there, cannot find).
        return HostProcess(subprocess.Popen(
            self.prefix(node) + ["sh", "-c", 'cd / && exec "$@" </dev/null >>"$LOG" 2>&1', "sh"] +
            argv, env=dict(env, LOG=log), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))

    def agent_args(self, fleet, node):
        return ["--data", os.path.join(self.mount, "agent"),
                "--workloads", os.path.join(self.mount, "workloads"),
                "--address", ADDRESSES[node]]

    def cut(self, node):
        sh("ip", "link", "set", self.link(node), "down")

    def reconnect(self, node):
        sh("ip", "link", "set", self.link(node), "up")

    def sees(self, node, path):
        """Whether PATH exists on NODE's host."""
        return subprocess.run(self.prefix(node) + ["test", "-e", path]).returncode == 0

    def close(self):
        """Powers the hosts off: the end of a host's init ends every process on it."""
        for node, holder in self.holders.items():
            for init in children(holder.pid):
                os.kill(init, signal.SIGKILL)
            holder.kill()
            holder.wait()
        for node in self.nodes:
            sh("ip", "link", "del", self.link(node), check=False)
            sh("ip", "netns", "del", self.netns(node), check=False)
        sh("ip", "link", "del", BRIDGE, check=False)
        shutil.rmtree(self.mount, ignore_errors=True)


def clean_network(slot):
    """What an earlier run of SLOT that was killed left behind."""
    for node in ADDRESSES:
        sh("ip", "netns", "del", f"pal-{slot}-{node}", check=False)
        sh("ip", "link", "del", f"pal-{slot}{node[-1]}0", check=False)
    sh("ip", "link", "del", f"pal-br{slot}", check=False)


def hosts_are_separate(work):
    """The premise of every drill here: a file one host writes is not seen by the other, and the
    hosts reach each other and the server only by their addresses."""
    hosts = SeparateHosts(work, "premise")
    try:
        probe = os.path.join(hosts.mount, "probe")
        subprocess.run(hosts.prefix("node-a") + ["touch", probe], check=True)
        if not hosts.sees("node-a", probe) or hosts.sees("node-b", probe) or os.path.exists(probe):
            fail("hosts: a file made on node-a is seen elsewhere, or not on node-a")
            return False
        reach = subprocess.run(hosts.prefix("node-a") + ["ping", "-c1", "-W2", ADDRESSES["node-b"]],
                               capture_output=True)
        if shutil.which("ping") and reach.returncode != 0:
            fail(f"hosts: node-a cannot reach node-b: {reach.stdout!r}")
            return False
        ok("hosts: node-a and node-b share no folder and reach each other by address")
        return True
    finally:
        hosts.close()


def fence_drill(work, fault):
    hosts = SeparateHosts(work, "hosts-fence-" + fault)
    try:
        fence_test.drill(work, fault, hosts=hosts, prefix="hosts-fence-")
    finally:
        hosts.close()


class Migration:
    """One fleet move of the job with a fault in one agent, sampled every 100 ms from the move's
    start to the end of the drill."""

    def __init__(self, name, faulty, fault, killed=False, away=3, evidence=None):
        self.name = name
        self.faulty = faulty  # "source" or "destination"
        self.fault = fault  # PALADIN_MIGRATE_FAULT
        self.killed = killed  # the fault kills the faulty side's agent
        self.away = away  # leases the killed agent stays away before it is restarted
        # (node, text): what an agent's log says once a message was lost (the fault fired).
        self.evidence = evidence


MIGRATIONS = [
    Migration("dst-killed-after-restore", "destination", "crash:dst-after-restore", True),
    # Back before the server gives the node up: the copy it received is settled with the server.
    Migration("dst-killed-after-restore-back-at-once", "destination", "crash:dst-after-restore",
              True, away=0),
    Migration("dst-killed-after-image", "destination", "crash:dst-after-image", True),
    Migration("src-killed-after-restore", "source", "crash:src-after-restore", True),
    # Back at once: its stopped copy is the job's only one (the move was not committed).
    Migration("src-killed-after-restore-back-at-once", "source", "crash:src-after-restore", True,
              away=0),
    Migration("src-killed-after-commit", "source", "crash:src-before-resume", True),
    Migration("src-killed-after-commit-back-at-once", "source", "crash:src-before-resume", True,
              away=0),
    Migration("src-killed-after-resume", "source", "crash:src-after-resume", True),
    Migration("lost-RESTORE", "source", "drop:RESTORE",
              evidence=("node-a", "fault injected: RESTORE lost")),
    Migration("lost-RESTORE-answer", "destination", "drop:RESTORE-answer",
              evidence=("node-b", "fault injected: RESTORE-answer lost")),
    Migration("lost-RESUME", "source", "drop:RESUME",
              evidence=("node-a", "fault injected: RESUME lost")),
    # The destination drops the answer silently; the source says so.
    Migration("lost-RESUME-answer", "destination", "drop:RESUME-answer",
              evidence=("node-a", "; committed anyway")),
    # In the fleet form nobody waits for BYE (the server's row settles the move): its loss shows
    # nowhere, and the drill checks that nothing goes wrong.
    Migration("lost-BYE", "source", "drop:BYE"),
]


def migration_drill(work, hosts, m):
    """Moves the job from node-a to node-b with M's fault, then checks the end state."""
    global fault_missed
    # Short: the agents' local sockets live below the fleet's folder (108 bytes at most).
    name = f"m{MIGRATIONS.index(m):02d}" + ("h" if hosts else "1")
    faulty_node = "node-a" if m.faulty == "source" else "node-b"
    tag = name
    what = f"{m.name} ({'separate hosts' if hosts else 'one host'})"
    sampler = None
    fleet = None
    try:
        fleet = Fleet(work, name, hosts=hosts,
                      agent_env={faulty_node: {"PALADIN_MIGRATE_FAULT": m.fault}})
        job_id = fleet.submit(tag)
        wait_for("a checkpoint of the job", lambda: fleet.job(job_id)["state"] == "running" and
                 fleet.job(job_id).get("last_checkpoint"), 120)
        # The job starts where the packer puts it: move it so that node-a is the source.
        if fleet.job(job_id)["node"] != "node-a":
            fleet.post(f"/v1/jobs/{job_id}/migrate", {"to": "node-a"})
            wait_for("the job on node-a", lambda: fence_test.job_on(fleet, job_id, "node-a"),
                     120, 0.2)
        sampler = fence_test.Sampler(tag)
        began = time.time()
        fleet.post(f"/v1/jobs/{job_id}/migrate", {"to": "node-b"})
        outcome = ""
        if m.killed:
            agent = fleet.procs[faulty_node]
            try:
                agent.wait(120)
            except subprocess.TimeoutExpired:
                # The move ended before the step the fault is at (refused, or failed under
                # load): the drill tested nothing, and is run again. Either way it ends here,
                # its agent still up: starting another for the node would leave this one behind.
                if fleet.job(job_id).get("migration") is None:
                    fault_missed = True
                fail(f"{what}: the fault did not kill the {m.faulty}'s agent")
                return
            died = time.time() - began
            # Away for 3x the lease: the server gives the dead node's jobs up meanwhile.
            time.sleep(m.away * LEASE_S)
            stopped = [p for p, s in tagged_processes(tag).items() if s in "Tt"]
            outcome = (f"the {m.faulty}'s agent died {died:.1f} s into the move; after "
                       f"{m.away} leases {len(stopped)} stopped copy(ies); ")
            fleet.start_agent(faulty_node, env={})
        elif m.evidence:
            log = os.path.join(fleet.dir, f"agent-{m.evidence[0]}.log")
            try:
                wait_for(f"{what}: the fault to fire", lambda: m.evidence[1].encode() in open(
                    log, "rb").read(), 120, 0.2)
            except TimeoutError as e:
                # The move ended before the step the fault is at: the drill tested nothing.
                fault_missed = True
                fail(str(e))
        # The move settles one way or another, and one copy is left.
        wait_for(f"{what}: the job settled", lambda: fleet.job(job_id)["state"] == "running" and
                 fleet.job(job_id).get("migration") is None, 180, 0.2)
        try:
            wait_for(f"{what}: one copy left", lambda: len(tagged_processes(tag)) == 1, 60, 0.2)
        except TimeoutError as e:
            fail(f"{e}: {tagged_processes(tag)}")
        time.sleep(2)
        sampler.finish()
        job = fleet.job(job_id)
        print(f"migration {what}: {outcome}ended on {job['node']} (restarts "
              f"{job.get('restarts', 0)}, recoveries {job.get('recoveries', 0)}) "
              f"{time.time() - began:.1f} s after the move began; {sampler.describe()}",
              flush=True)
        crash_test.check_one_copy(sampler, what)
        # A copy stopped in one look may be under a periodic checkpoint (CRIU stops it for a
        # moment, for seconds on a busy machine); one left behind is stopped in every look, for
        # 2 s and on for up to 20 s while any copy has not been seen running.
        looks = []
        stuck = set()
        began_looking = time.time()
        while True:
            looks.append(tagged_processes(tag))
            stuck = set.intersection(*[{p for p, s in look.items() if s in "Tt"}
                                       for look in looks])
            waited = time.time() - began_looking
            if waited >= 20 or (waited >= 2 and not stuck):
                break
            time.sleep(0.2)
        left = looks[-1]
        if len(left) != 1 or stuck:
            fail(f"{what}: copies left: {left}, stopped throughout: {sorted(stuck)}")
        else:
            ok(f"{what}: one copy left, none stopped")
        verify_once(fleet, job_id, tag, f"after {what}")
        crash_test.cancel_and_check_gone(fleet, job_id, tag)
    except (TimeoutError, urllib.error.URLError, subprocess.TimeoutExpired) as e:
        fail(f"{what}: {e}; copies {tagged_processes(tag)}")
    finally:
        if sampler is not None and not sampler.stop:
            sampler.finish()
        if fleet is not None:
            fleet.stop()
        for pid in tagged_processes(tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


SETS = ("fence", "separate", "onehost")


def drill_names(which=""):
    """Every drill's name, or those of the set WHICH (one of SETS)."""
    names = ["fence-" + fault for fault in ("sigkill", "sigstop", "cut-off")]
    for m in MIGRATIONS:
        names += ["mig-" + m.name, "mig-" + m.name + "-onehost"]
    if which == "fence":
        return [n for n in names if n.startswith("fence-")]
    if which == "separate":
        return [n for n in names if n.startswith("mig-") and not n.endswith("-onehost")]
    if which == "onehost":
        return [n for n in names if n.endswith("-onehost")]
    return names


def run_one(work, only):
    """Runs the drill named ONLY in this process."""
    for fault in ("sigkill", "sigstop", "cut-off"):
        if only == "fence-" + fault:
            fence_drill(work, fault)
            return
    for m in MIGRATIONS:
        if only == "mig-" + m.name:
            hosts = SeparateHosts(work, f"m{MIGRATIONS.index(m):02d}")
            try:
                migration_drill(work, hosts, m)
            finally:
                hosts.close()
            return
        if only == "mig-" + m.name + "-onehost":
            migration_drill(work, None, m)
            return
    fail(f"no drill named {only!r}; the drills: {', '.join(drill_names())}")


# Set when a drill's fault never fired (the move ended before its step, e.g. refused or failed
# under load): the child exits with NOT_FIRED and run_all runs the drill once more.
fault_missed = False
NOT_FIRED = 3


def print_logs(work):
    """The last lines of every fleet log under WORK: what a failed drill's agents and server said."""
    for root, _, names in sorted(os.walk(work)):
        for n in sorted(names):
            if not n.endswith(".log") or not (n.startswith("agent-") or n.startswith("server")):
                continue
            path = os.path.join(root, n)
            with open(path, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()[-25:]
            print(f"--- last lines of {os.path.relpath(path, work)} ---")
            print("\n".join(lines), flush=True)


def run_all(names, slots):
    """Runs the drills NAMES, one in each of SLOTS at a time, each in a child process with a slot
    of its own; prints each child's output when it ends. Returns the names of the drills that
    failed."""
    pending = list(names)
    running = {}  # slot -> (name, Popen, began)
    failed = []
    rerun = set()
    free = list(slots)
    while pending or running:
        while pending and free:
            slot = free.pop(0)
            name = pending.pop(0)
            env = dict(os.environ, PALADIN_HOSTS_ONLY=name, PALADIN_HOSTS_SLOT=str(slot))
            child = subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                      crash_test.PALADIN], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            running[slot] = (name, child, time.time(), tempfile.TemporaryFile())
            threading.Thread(target=shutil.copyfileobj, args=(child.stdout, running[slot][3]),
                             daemon=True).start()
        time.sleep(0.5)
        for slot, (name, child, began, out) in list(running.items()):
            if child.poll() is None:
                continue
            time.sleep(0.2)  # the copying thread reaches the end of the pipe
            out.seek(0)
            text = out.read().decode(errors="replace")
            print(f"--- drill {name} (slot {slot}, {time.time() - began:.0f} s, "
                  f"exit {child.returncode}) ---\n{text}", end="", flush=True)
            if child.returncode == NOT_FIRED and name not in rerun:
                print(f"hosts_test: {name}: its fault never fired; once more", flush=True)
                rerun.add(name)
                pending.append(name)
            elif child.returncode != 0:
                failed.append(name)
            del running[slot]
            free.append(slot)
    return failed


def stage_programs(work):
    """Copies paladin and what it loads beside itself (the preloaded libraries, the workloads'
    init, CRIU's rlimit library, the GPU checkpoint calls' program) into WORK/bin and runs the drills with that copy: the build tree
    may lie under /tmp (a clone there), which each host covers with a /tmp of its own."""
    build = os.path.dirname(crash_test.PALADIN)
    bin_dir = os.path.join(work, "bin")
    names = ["paladin", "paladin-workload-init", "paladin-gpu-call"] + sorted(
        f for f in os.listdir(build) if f.startswith("libpaladin-") and f.endswith(".so"))
    for name in names:
        shutil.copy2(os.path.join(build, name), os.path.join(bin_dir, name))
    crash_test.PALADIN = os.path.join(bin_dir, "paladin")


def main():
    if os.geteuid() != 0:
        print("SKIP: separate hosts need root (network and mount namespaces, CRIU)")
        return 77
    for tool in ("ip", "nsenter", "unshare"):
        if not shutil.which(tool):
            print(f"SKIP: no '{tool}' on this machine (needed to make the hosts)")
            return 77
    if not os.path.exists("/opt/paladin/criu/criu") and not os.environ.get("PALADIN_CRIU"):
        print("SKIP: no CRIU (install it with scripts/criu.sh)")
        return 77
    only = os.environ.get("PALADIN_HOSTS_ONLY", "")
    which = os.environ.get("PALADIN_HOSTS_SET", "")
    if which and which not in SETS:
        print(f"hosts_test: PALADIN_HOSTS_SET={which!r} is none of {', '.join(SETS)}")
        return 2
    names = drill_names(which)
    jobs = max(1, int(os.environ.get("PALADIN_HOSTS_JOBS", "3")))
    first = int(os.environ.get("PALADIN_HOSTS_FIRST_SLOT", "0"))
    slots = range(first, first + jobs)
    if not only:
        for slot in slots:
            clean_network(slot)
    else:
        clean_network(SLOT)
    probe = sh("ip", "netns", "add", f"pal-{SLOT}-probe", check=False)
    sh("ip", "netns", "del", f"pal-{SLOT}-probe", check=False)
    if probe.returncode != 0:
        print(f"SKIP: cannot make a network namespace here: {probe.stderr.strip()}")
        return 77
    # Not under /tmp: each host has a /tmp of its own over it.
    work = crash_test.work_folder("hosts", under="/var/tmp")
    stage_programs(work)
    failed = []
    began = time.time()
    try:
        if only:
            run_one(work, only)
        elif hosts_are_separate(work):
            failed = run_all(names, slots)
    finally:
        if only and failures:
            print_logs(work)
        if only:
            clean_network(SLOT)
        else:
            for slot in slots:
                clean_network(slot)
        crash_test.remove_work(work, "hosts_test")
    if only:
        if failures and fault_missed and len(failures) == 1:
            return NOT_FIRED
        return 1 if failures else 0
    if failures or failed:
        print(f"hosts_test: {len(failures) + len(failed)} failure(s)"
              f"{': ' + ', '.join(failed) if failed else ''} ({time.time() - began:.0f} s)")
        return 1
    print(f"hosts_test: all checks passed ({len(names)} drills, {jobs} at a time, "
          f"{time.time() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
