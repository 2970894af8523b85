#!/usr/bin/env python3
"""Crash safety of the fleet (label e2e), with real processes on loopback and emulated GPUs.

1. The server is killed (SIGKILL, through its seeded fault hook PALADIN_SERVER_FAULT=crash-at:STEP)
   at every step of the migration transaction, and at random moments during migrations, then
   restarted: the job ends running exactly once, with its state verified (its log shows no
   MISMATCH and one start: it was never restarted from zero).
2. An agent restarted: its running workload keeps running (same pid) and is re-adopted.
3. An agent cut off from the server (its connection goes through a proxy the test cuts): the job
   never runs in two places; the agent freezes its copy before the server restores it elsewhere.

Usage: crash_test.py PALADIN
"""
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import free_port as free_port_module  # noqa: E402

PALADIN = os.path.realpath(sys.argv[1])
STEPS = ["reserved", "migrate_in_sent", "migrate_out_sent", "before_commit", "after_commit", "done"]
failures = []


def fail(what):
    print("FAIL:", what, flush=True)
    failures.append(what)


def ok(what):
    print("ok:", what, flush=True)


def free_port(pair=False):
    """A TCP port free now (and the next one too with `pair`), for a listener of the test's, by
    the tests' one rule (tests/free_port.py)."""
    return free_port_module.free_port(2 if pair else 1)


def wait_for(what, predicate, timeout=90, interval=0.25):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # the server may be restarting
            last = e
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}" + (f" (last error: {last})" if last else ""))


def uid_of(pid):
    """The real uid of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


# Tags are this run's own: two drills on one machine (two sessions, say) never count each
# other's workloads as copies of their own.
RUN_ID = str(os.getpid())


def run_tag(tag):
    return f"{tag}.{RUN_ID}"


PF_EXITING = 0x4  # the kernel's task flag: the task is in exit()
SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def dying(pid, flags):
    """Whether PID can no longer run its own code: it is exiting, or a SIGKILL is pending. A
    killed copy tears down its memory in state R or D for a while on a busy machine (a stopped
    copy too: SIGKILL wakes it only to die), which is not a copy running."""
    if flags & PF_EXITING:
        return True
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("SigPnd:", "ShdPnd:")) and \
                        int(line.split()[1], 16) & SIGKILL_BIT:
                    return True
    except (OSError, ValueError, IndexError):
        return True  # gone meanwhile
    return False


def tagged_processes(tag):
    """pid -> state letter of this run's workload processes carrying --tag TAG; a dying one
    (see dying()) counts as a zombie, 'Z'."""
    tag = run_tag(tag)
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            if b"--tag" not in args or args[args.index(b"--tag") + 1] != tag.encode():
                continue
            # The demo workload, or tests/ckpt/lazy_mem.py under python3 (postcopy_test.py), or a
            # gang's rank (gang_test.py: gang_rank.py, or ddp_train.py's torch DDP rank).
            if not args[0].endswith(b"paladin-demo-workload") and \
                    not (len(args) > 1 and args[1].endswith((b"lazy_mem.py", b"gang_rank.py",
                                                             b"ddp_train.py"))):
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            state, flags = fields[0], int(fields[6])
            dead = state == "X" or (state not in "TtZ" and dying(pid, flags))
            found[int(pid)] = "Z" if dead else state
        except (OSError, IndexError, ValueError):
            continue
    return found


def describe_copies(tag):
    """Each copy of the job: its state, its parent and the PID namespace it runs in (for a
    failure's message)."""
    out = []
    for pid, state in tagged_processes(tag).items():
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
            pidns = os.readlink(f"/proc/{pid}/ns/pid")
            mntns = os.readlink(f"/proc/{pid}/ns/mnt")
        except OSError:
            continue
        out.append(f"pid {pid} {state} parent {ppid} {pidns} {mntns}")
    return "; ".join(out) or "none"


class Proxy:
    """A TCP proxy from a local port to the server; cut() drops every connection."""

    def __init__(self, target_port):
        self.target = target_port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.open = True
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a, b):
        try:
            while self.open:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass

    def cut(self):
        self.open = False
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
                c.close()
            except OSError:
                pass
        self.conns = []

    def restore(self):
        self.open = True


class OneHost:
    """Both agents on this host: one file system, one network (loopback)."""

    server_ip = "127.0.0.1"

    def popen(self, node, argv, log, env):
        """Starts NODE's agent, ARGV, as a child of the test, its output appended to LOG."""
        return subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env)

    def agent_args(self, fleet, node):
        return ["--data", os.path.join(fleet.dir, "agents", node),
                "--workloads", os.path.join(fleet.dir, "workloads")]


class Fleet:
    """A server and two agents under one directory; the server can be killed and restarted.

    `hosts` says where the agents run (OneHost, or tests/e2e/hosts_test.py's separate hosts);
    `agent_env` adds to an agent's environment (PALADIN_MIGRATE_FAULT, say), per node;
    `server_args` to the server's command line (--move-mode pre-copy, say)."""

    def __init__(self, work, name, fault=None, through_proxy=None, hosts=None, agent_env=None,
                 server_args=None):
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)
        self.hosts = hosts or OneHost()
        self.agent_env = dict(agent_env or {})
        self.server_args = list(server_args or [])
        self.port = free_port()
        self.procs = {}
        self.start_server(fault)
        # One proxy per agent, so that one agent can be cut off while the other stays in touch
        # (separate hosts are cut off at their network link instead).
        self.proxies = ({n: Proxy(self.port) for n in ("node-a", "node-b")}
                        if through_proxy and isinstance(self.hosts, OneHost) else {})
        for node in ("node-a", "node-b"):
            self.start_agent(node)

    def cut(self, node):
        """Cuts the node off from the server."""
        if node in self.proxies:
            self.proxies[node].cut()
        else:
            self.hosts.cut(node)

    def reconnect(self, node):
        if node in self.proxies:
            self.proxies[node].restore()
        else:
            self.hosts.reconnect(node)

    def log(self, name):
        return open(os.path.join(self.dir, name + ".log"), "ab")

    def print_logs(self, jobs=(), lines=30):
        """After a failure: each of JOBS as the server has it with the last LINES lines of its
        own logs, and the last LINES lines of the server's and the agents' logs."""
        for job_id in jobs:
            try:
                print(f"--- job {job_id}: {json.dumps(self.job(job_id))}")
                # What the job itself said (its node's copy of its logs, through the server).
                for stream in ("stderr", "stdout"):
                    text = self.get(f"/v1/jobs/{job_id}/logs?stream={stream}&tail={lines}")
                    print(f"--- job {job_id}'s {stream} (last {lines} lines)\n" +
                          text.get("text", ""), flush=True)
            except (urllib.error.URLError, OSError) as e:
                print(f"--- job {job_id}: the server did not answer: {e}")
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    print(f"--- {self.dir}/{name} (last {lines} lines)\n" +
                          "".join(f.readlines()[-lines:]), flush=True)

    def start_server(self, fault=None):
        env = dict(os.environ)
        env.pop("PALADIN_SERVER_FAULT", None)
        if fault:
            env["PALADIN_SERVER_FAULT"] = fault
        os.makedirs(os.path.join(self.dir, "server"), exist_ok=True)
        url_file = os.path.join(self.dir, "server", "server.url")
        if os.path.exists(url_file):
            os.remove(url_file)
        self.procs["server"] = subprocess.Popen(
            [PALADIN, "server", "--listen", f"{self.hosts.server_ip}:{self.port}", "--data",
             os.path.join(self.dir, "server"), "--lease", "3", "--heartbeat", "0.5",
             "--checkpoint-every", "3", "--keep-checkpoints", "2"] + self.server_args,
            stdout=self.log("server"), stderr=subprocess.STDOUT, env=env)
        wait_for("the server", lambda: os.path.exists(url_file), 30)
        with open(os.path.join(self.dir, "server", "admin.token")) as f:
            self.token = f.read().strip()
        wait_for("the server to answer", lambda: self.get("/v1/summary") is not None, 30)

    def start_agent(self, node, env=None):
        """Starts (or restarts) NODE's agent; `env` adds to its environment for this run only."""
        port = self.proxies[node].port if node in self.proxies else self.port
        log = os.path.join(self.dir, "agent-" + node + ".log")
        registered_before = self.registrations(log)
        agent_env = dict(os.environ)
        agent_env.pop("PALADIN_MIGRATE_FAULT", None)
        agent_env.update(self.agent_env.get(node, {}) if env is None else env)
        self.procs[node] = self.hosts.popen(node, [PALADIN, "agent", "--server", f"http://{self.hosts.server_ip}:{port}", "--token-file",
             os.path.join(self.dir, "server", "agent.token"), "--name", node,
             "--emulated-gpus", "2x8GiB", "--migrate-port", str(free_port(pair=True)),
             # Workloads run as uids of their own (under a root paladin-workload-init, so that
             # CRIU can checkpoint them).
             "--kill-on-exit"] + self.hosts.agent_args(self, node),
            log, agent_env)
        # This agent's own registration: a node whose dead agent's lease has not run out yet
        # still reads alive, before its successor has even started (and cleaned up after it).
        wait_for(f"agent {node} registered", lambda: self.registrations(log) > registered_before)
        wait_for(f"agent {node}", lambda: any(
            n["name"] == node and n["state"] == "alive" for n in self.get("/v1/nodes")["nodes"]))

    @staticmethod
    def registrations(log):
        """How many times the agent writing LOG has said it registered with the server."""
        try:
            with open(log, errors="replace") as f:
                return sum(1 for line in f if "paladin agent: registered with" in line)
        except FileNotFoundError:
            return 0

    def request(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://{self.hosts.server_ip}:{self.port}{path}", data=data,
                                     method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read()
            return json.loads(text) if text else {}

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body):
        return self.request("POST", path, body)

    def job(self, job_id):
        return self.get("/v1/jobs/" + job_id)

    def submit(self, tag):
        # The demo workload is copied where the unprivileged workload user can run it.
        return self.post("/v1/jobs", {
            "name": tag, "team": "crash", "gpu_mem": "1GiB", "gpus": 1,
            "command": [WORKLOAD, "--mib", "64", "--host-mib", "4", "--every-ms", "100",
                        "--tag", run_tag(tag)]})["id"]

    def stop(self):
        # The agents first (node-c's too where a drill started one), the server last.
        for name in [n for n in self.procs if n != "server"] + ["server"]:
            p = self.procs.get(name)
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def verify_once(fleet, job_id, tag, what):
    """The job runs, exactly one copy of it, with verified state and one start."""
    def settled():
        job = fleet.job(job_id)
        return job["state"] == "running" and job.get("migration") is None
    wait_for(f"{what}: the job running with no migration under way", settled, 120)
    wait_for(f"{what}: one live copy", lambda: len(
        [s for s in tagged_processes(tag).values() if s not in "TtZ"]) == 1, 60)
    # Watch it for a few seconds: never two live copies, and the one copy seen running. A single
    # look can land inside a periodic checkpoint (every 3 s here), which stops the process for a
    # moment (for seconds on a busy machine): that is one copy, not none. So the watch goes on,
    # up to 20 s, until the copy has been seen running.
    counts = []
    began = time.time()
    while time.time() - began < 4 or (1 not in counts and time.time() - began < 20):
        time.sleep(0.5)
        counts.append(len([s for s in tagged_processes(tag).values() if s not in "TtZ"]))
    if max(counts) > 1 or 1 not in counts:
        fail(f"{what}: running copies of the job seen over {time.time() - began:.0f} s: {counts}")
        fleet.print_logs([job_id])
        return
    logs = fleet.get(f"/v1/jobs/{job_id}/logs?stream=stdout")["text"]
    job = fleet.job(job_id)
    # A move that went through took a fast path: the job (GPU state) streamed its memory, or,
    # where the destination refused a stream, the move says so and went by image.
    move = job.get("last_move") or {}
    fast = move.get("mode") in ("stream", "post-copy") or \
        "streaming refused" in (move.get("why") or "")
    starts = logs.count("started:")
    uids = {uid_of(pid) for pid in tagged_processes(tag)} - {None}
    if 0 in uids or not uids:
        fail(f"{what}: the workload runs as uid {sorted(uids)}, not as an unprivileged user")
    elif "MISMATCH" in logs:
        fail(f"{what}: state MISMATCH in the job's log")
    elif move.get("step") == "done" and not fast:
        fail(f"{what}: its last move went {move.get('mode')!r} ({move.get('why')}), "
             f"neither streamed nor post-copy")
    elif starts != 1 + job.get("restarts", 0):
        fail(f"{what}: the workload started {starts} times")
        print_job_story(fleet, job_id, logs)
    else:
        how = f", last move {move.get('mode')}" if move.get("step") == "done" else ""
        ok(f"{what}: one copy on {job['node']} as uid {min(uids)}, state verified, started once"
           f"{how}")


def print_job_story(fleet, job_id, logs):
    """What a failed check needs to be traced: the job's log lines that start or restore it and
    the server's events about it."""
    lines = logs.splitlines()
    print(f"--- {job_id}: {len(lines)} lines of log; those around each start or mismatch ---")
    shown = -1
    for i, line in enumerate(lines):
        if line.startswith(("started:", "MISMATCH")):
            for k in range(max(i - 3, shown + 1), min(i + 4, len(lines))):
                print(f"{k}: {lines[k]}")
                shown = k
    print(f"last: {lines[-1] if lines else ''}")
    print(f"--- {job_id}: the server's events ---")
    try:
        for e in fleet.get(f"/v1/events?job={job_id}").get("events", []):
            print(f"{e.get('t', 0):.1f} {e.get('node') or ''} {e.get('kind', '')}: "
                  f"{e.get('message', '')}")
    except Exception as e:  # noqa: BLE001 - diagnostics only
        print(f"(events unavailable: {e})")


def cancel_and_check_gone(fleet, job_id, tag):
    fleet.post(f"/v1/jobs/{job_id}/cancel", {})
    try:
        wait_for("the cancelled job's processes to go", lambda: not tagged_processes(tag), 30)
    except TimeoutError as e:
        fail(str(e))


def server_crash_at(work, step):
    fleet = Fleet(work, "crash-" + step, fault=f"crash-at:{step}")
    tag = "crash-" + step
    try:
        job_id = fleet.submit(tag)
        wait_for("the job to run", lambda: fleet.job(job_id)["state"] == "running")
        node = fleet.job(job_id)["node"]
        # A move can fail before it reaches the step (on a loaded machine, e.g. a periodic
        # checkpoint under way outlasts it): ask again until the fault hook fires.
        deadline = time.time() + 300
        while fleet.procs["server"].poll() is None and time.time() < deadline:
            try:
                job = fleet.job(job_id)
                if job["state"] == "running" and job.get("migration") is None:
                    fleet.post(f"/v1/jobs/{job_id}/migrate",
                               {"to": "node-b" if job["node"] == "node-a" else "node-a"})
            except (urllib.error.URLError, OSError):
                pass  # at 'reserved' the server dies inside this very request
            time.sleep(1)
        code = fleet.procs["server"].wait(10)
        if code != 137:
            fail(f"crash at {step}: the server exited {code}, not 137 (did the fault hook fire?)")
        fleet.start_server()
        verify_once(fleet, job_id, tag, f"server killed at '{step}'")
        cancel_and_check_gone(fleet, job_id, tag)
    except (TimeoutError, urllib.error.URLError, subprocess.TimeoutExpired) as e:
        fail(f"crash at {step}: {e}")
    finally:
        fleet.stop()


def server_killed_randomly(work, rounds, seed):
    rng = random.Random(seed)
    fleet = Fleet(work, "random")
    tag = "crash-random"
    try:
        job_id = fleet.submit(tag)
        wait_for("the job to run", lambda: fleet.job(job_id)["state"] == "running")
        for i in range(rounds):
            wait_for("the job to settle", lambda: fleet.job(job_id)["state"] == "running" and
                     fleet.job(job_id).get("migration") is None, 120)
            node = fleet.job(job_id)["node"]
            fleet.post(f"/v1/jobs/{job_id}/migrate", {"to": "node-b" if node == "node-a" else "node-a"})
            delay = rng.uniform(0, 4)
            time.sleep(delay)
            fleet.procs["server"].kill()
            fleet.procs["server"].wait()
            fleet.start_server()
            verify_once(fleet, job_id, tag, f"server killed {delay:.2f} s into migration {i + 1}")
        cancel_and_check_gone(fleet, job_id, tag)
    except (TimeoutError, urllib.error.URLError, subprocess.TimeoutExpired) as e:
        fail(f"random server kills: {e}")
    finally:
        fleet.stop()


def agent_restart(work):
    fleet = Fleet(work, "agent-restart")
    tag = "agent-restart"
    try:
        job_id = fleet.submit(tag)
        wait_for("the job to run", lambda: fleet.job(job_id)["state"] == "running")
        node = fleet.job(job_id)["node"]
        before = set(tagged_processes(tag))
        fleet.procs[node].kill()
        fleet.procs[node].wait()
        time.sleep(1)
        fleet.start_agent(node)
        time.sleep(3)
        after = set(tagged_processes(tag))
        job = fleet.job(job_id)
        if before != after:
            fail(f"agent restart: the workload's processes changed ({before} -> {after})")
        elif job["state"] != "running" or job["node"] != node or job.get("restarts", 0) != 0:
            fail(f"agent restart: the job is {job['state']} on {job['node']}, not re-adopted")
        else:
            ok("agent restarted: its workload kept running (same pid) and was re-adopted")
        verify_once(fleet, job_id, tag, "after the agent restart")
        cancel_and_check_gone(fleet, job_id, tag)
    except (TimeoutError, urllib.error.URLError, subprocess.TimeoutExpired) as e:
        fail(f"agent restart: {e}")
    finally:
        fleet.stop()


def agent_cut_off(work):
    fleet = Fleet(work, "cut-off", through_proxy=True)
    tag = "cut-off"
    try:
        job_id = fleet.submit(tag)
        wait_for("a checkpoint of the job", lambda: fleet.job(job_id)["state"] == "running" and
                 fleet.job(job_id).get("last_checkpoint"))
        node = fleet.job(job_id)["node"]
        fleet.cut(node)
        # From now on, never two live copies: sample until the job runs elsewhere.
        deadline = time.time() + 120
        moved = False
        while time.time() < deadline:
            live = [s for s in tagged_processes(tag).values() if s not in "TtZ"]
            if len(live) > 1:
                fail(f"agent cut off: {len(live)} live copies at once")
                break
            try:
                job = fleet.job(job_id)
                if job["node"] != node and job["state"] == "running" and len(live) == 1:
                    moved = True
                    break
            except urllib.error.URLError:
                pass
            time.sleep(0.1)
        if not moved:
            fail("agent cut off: the job was not restored on another node")
        else:
            ok("agent cut off: its copy froze, the job was restored elsewhere, never two live copies")
        fleet.reconnect(node)
        # The agent comes back: it is told to drop its stale, frozen copy.
        wait_for("the stale copy to go", lambda: len(tagged_processes(tag)) == 1, 60)
        ok("the reconnected agent dropped its stale copy")
        verify_once(fleet, job_id, tag, "after the cut-off")
        cancel_and_check_gone(fleet, job_id, tag)
    except (TimeoutError, urllib.error.URLError, subprocess.TimeoutExpired) as e:
        fail(f"agent cut off: {e}")
    finally:
        fleet.stop()


def work_folder(name, under=None):
    """A scratch folder for one test run (readable by the jobs' uids) with a copy of the demo
    workload in its bin/, which WORKLOAD then names."""
    global WORKLOAD
    work = tempfile.mkdtemp(prefix=f"paladin-e2e-{name}.", dir=under)
    os.chmod(work, 0o755)
    bin_dir = os.path.join(work, "bin")
    os.makedirs(bin_dir)
    WORKLOAD = os.path.join(bin_dir, "paladin-demo-workload")
    subprocess.run(["cp", os.path.join(os.path.dirname(PALADIN), "paladin-demo-workload"),
                    WORKLOAD], check=True)
    os.chmod(bin_dir, 0o755)
    return work


def kill_tagged(*tags):
    """Kills whatever copies of jobs tagged `tags` a failed drill left running."""
    for tag in tags:
        for pid in tagged_processes(tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def remove_work(work, name):
    """Removes the run's scratch folder, unless KEEP_WORK is set."""
    if os.environ.get("KEEP_WORK"):
        print(f"{name}: kept", work)
    else:
        subprocess.run(["rm", "-rf", work])


def summary(name):
    """Prints the run's verdict; the test's exit code."""
    if failures:
        print(f"{name}: {len(failures)} failure(s)")
        return 1
    print(f"{name}: all checks passed")
    return 0


def check_one_copy(sampler, what):
    """Fails `what` when its copy sampler saw two copies running at once."""
    if sampler.double:
        fail(f"{what}: two copies running at once at {sampler.double[:10]} s")
    else:
        ok(f"{what}: never two copies running at once")


def main():
    if os.geteuid() != 0:
        print("SKIP: the fleet end to end needs root (PID namespaces, cgroups, CRIU)")
        return 77
    if not os.path.exists("/opt/paladin/criu/criu") and not os.environ.get("PALADIN_CRIU"):
        print("SKIP: no CRIU (install it with scripts/criu.sh)")
        return 77
    work = work_folder("crash")
    only = os.environ.get("PALADIN_CRASH_ONLY", "")
    try:
        for step in STEPS:
            if not only or only == step:
                server_crash_at(work, step)
        if not only or only == "random":
            server_killed_randomly(work, rounds=3, seed=int(os.environ.get("PALADIN_SEED", "7")))
        if not only or only == "agent-restart":
            agent_restart(work)
        if not only or only == "cut-off":
            agent_cut_off(work)
    finally:
        subprocess.run(["pkill", "-KILL", "-f", WORKLOAD])
        remove_work(work, "crash_test")
    return summary("crash_test")


WORKLOAD = ""
if __name__ == "__main__":
    sys.exit(main())
