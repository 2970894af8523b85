#!/usr/bin/env python3
"""Gangs over separate hosts (labels e2e, ckpt): the agents as separate hosts (hosts_test.py's
SeparateHosts: network and mount namespaces of their own on a bridge), through the real server
and agents, with tests/e2e/gang_rank.py as the gang: two ranks doing the env:// rendezvous
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) over plain TCP, then STEPS exchanges over their one
connection, each depending on all earlier ones (a step lost, repeated or from another run shows
in the final value, which each rank checks against an uninterrupted run's).

Drills, each on a fresh server and two fresh hosts:
  net   one rank per node: placed together on different nodes; each rank's packets leave from the
        stable address the server gave it, on pal0; rank 1 reaches MASTER_ADDR across the hosts
        through the routes the agents keep (seen in each host's table while the gang runs), and
        rank 0 sees it come from rank 1's address; after the end no route and no namespace is left.
  cut   one rank per node, periodic coordinated checkpoints (every 3 s: freeze both, dump each,
        thaw both) while it runs, then `checkpoint` of the gang (it ends checkpointed, every rank
        of one generation) and `resume` (each rank restored in its own network, the connection
        between them carried): the final value is the uninterrupted run's, each step printed once.
  lost  up to two ranks per node: rank 1's node's agent SIGKILLed and kept away for three leases;
        the whole gang comes back from its last coordinated checkpoint on the surviving node, the
        survivor stopped first; it finishes with the uninterrupted run's value.
  ddp   the same gang with two torch DDP ranks (gloo; tests/ckpt/ddp_train.py, one rank per
        process from the rendezvous variables, as torchrun starts them), one per node: a
        coordinated checkpoint stopping the gang at about step 8, then `resume`: every step's
        all-reduced loss and the final one bit-identical to an uninterrupted run's (both ranks in
        one tree on this machine). Skipped, saying so, without python3-torch.
  ddp-lost  lost's drill with the torch DDP ranks: every loss the uninterrupted run's (the steps
        run on the lost node after its last checkpoint run again after the rollback: printed
        twice, the same bits).
  ddp-move  move's drill with the torch DDP ranks: every loss the uninterrupted run's.
  move  one rank per node; a third host (node-c) joins while the gang runs and `migrate` moves
        rank 1 there (the gang frozen, rank 0 dumped, rank 1 dumped and killed, restored on
        node-c with its address, the routes switched, rank 0 thawed): rank 0's node routes
        rank 1's address via node-c, no network of rank 1 is left on its old node, and the final
        value is the uninterrupted run's, each step printed once.
In cut, lost, ddp and move every rank's processes are sampled in /proc every 100 ms (this test
sees every host's processes: PID namespaces are not separated): never two running copies of one
rank.

Usage: gang_test.py PALADIN      PALADIN_GANG_ONLY=net|cut|lost|ddp|ddp-lost|move|ddp-move runs one drill.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

os.environ.setdefault("PALADIN_HOSTS_SLOT", "7")  # names of its own beside hosts_test's drills
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crash_test  # noqa: E402
import hosts_test  # noqa: E402
from crash_test import Fleet, fail, failures, ok, wait_for  # noqa: E402
import gang_rank  # noqa: E402

LEASE_S = 3  # crash_test.Fleet's server: --lease 3 --heartbeat 0.5
PYTHON = "/usr/bin/python3"  # the system's, with Debian's python3-torch (the ddp drill)
DDP_TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ckpt", "ddp_train.py")


def has_torch():
    return subprocess.run([PYTHON, "-c", "import torch.distributed as d; "
                           "assert d.is_gloo_available()"], capture_output=True).returncode == 0


def host_routes(hosts, node):
    return subprocess.run(hosts.prefix(node) + ["ip", "-4", "route", "show"], capture_output=True,
                          text=True).stdout


def host_netns(hosts, node):
    return subprocess.run(hosts.prefix(node) + ["ip", "netns", "list"], capture_output=True,
                          text=True).stdout


def log(fleet, job):
    return fleet.get(f"/v1/jobs/{job}/logs?stream=stdout")["text"]


def ended(state):
    return state in ("succeeded", "failed", "cancelled")


class RankSampler:
    """Every 100 ms: how many running copies each rank of the tagged gang has (by the RANK in
    each process's environment)."""

    def __init__(self, tag):
        self.tag = tag
        self.samples = 0
        self.double = []
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        start = time.time()
        while not self.stop:
            running = {}
            for pid, state in crash_test.tagged_processes(self.tag).items():
                if state in "TtZ":
                    continue
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
                except OSError:
                    continue
                rank = env.get(b"RANK", b"?").decode()
                running[rank] = running.get(rank, 0) + 1
            self.samples += 1
            if any(n > 1 for n in running.values()):
                self.double.append((round(time.time() - start, 1), running))
            time.sleep(0.1)

    def finish(self, what):
        self.stop = True
        self.thread.join()
        if self.double:
            fail(f"{what}: two running copies of a rank at once: {self.double[:5]}")
        else:
            ok(f"{what}: {self.samples} samples every 100 ms, never two running copies of a rank")


def submit(fleet, work, tag, steps, sleep_s, per_node, env=None, program="gang_rank.py"):
    script = os.path.join(work, "bin", program)
    answer = fleet.post("/v1/jobs", {
        "name": "gang", "team": "crash", "gpus": 0,
        "command": [PYTHON, script, str(steps), str(sleep_s), "--tag", crash_test.run_tag(tag)],
        "ranks": 2, "ranks_per_node": per_node, "env": env or {}})
    return answer["gang_jobs"]


def stop_cut(fleet, ranks, timeout_s):
    """Asks for the gang's checkpoint that stops it (again while a periodic cut is under way)
    and waits until every rank is checkpointed."""
    def asked():
        try:
            fleet.post(f"/v1/jobs/{ranks[0]}/checkpoint", {})
            return True
        except Exception:  # a periodic cut under way: ask again
            return False
    wait_for("the gang's checkpoint to be accepted", asked, 60, 0.3)
    wait_for("both ranks checkpointed", lambda: all(
        fleet.job(r)["state"] == "checkpointed" for r in ranks), timeout_s, 0.3)


def steps_seen(fleet, rank0):
    return [line.split()[1] for line in log(fleet, rank0).splitlines() if line.startswith("step ")]


def check_finished(fleet, ranks, steps, what):
    wait_for(f"{what}: both ranks to end", lambda: all(
        ended(fleet.job(r)["state"]) for r in ranks), 240, 0.5)
    states = [fleet.job(r)["state"] for r in ranks]
    out = [log(fleet, r) for r in ranks]
    want = f"final {gang_rank.expected(steps)}"
    if states != ["succeeded", "succeeded"] or not all(want in o for o in out):
        fail(f"{what}: ended {states}, want '{want}' from both; logs: {[o[-600:] for o in out]}")
        return
    seen = steps_seen(fleet, ranks[0])
    if seen != [str(s) for s in range(1, steps + 1)]:
        fail(f"{what}: rank 0's steps are not 1..{steps} once each: {seen}")
        return
    ok(f"{what}: both ranks succeeded with the uninterrupted run's final value "
       f"{gang_rank.expected(steps)}, each of the {steps} steps printed once")


def net_drill(work):
    hosts = hosts_test.SeparateHosts(work, "gang-net")
    fleet = None
    ranks = []
    try:
        fleet = Fleet(work, "gang-net", hosts=hosts)
        ranks = submit(fleet, work, "gang-net", 0, 0, 1, {"GANG_RANK_LINGER_S": "6"})
        wait_for("both ranks running", lambda: all(
            fleet.job(r)["state"] in ("running", "succeeded") for r in ranks), 60, 0.2)
        jobs = [fleet.job(r) for r in ranks]
        nodes = [j["node"] for j in jobs]
        addresses = [j["gang"]["address"] for j in jobs]
        if nodes[0] == nodes[1]:
            fail(f"net: both ranks on {nodes[0]} with one rank per node")
        else:
            ok(f"net: rank 0 on {nodes[0]} ({addresses[0]}), rank 1 on {nodes[1]} "
               f"({addresses[1]}), placed together")
        for mine, other in ((0, 1), (1, 0)):
            want = f"{addresses[other]} via {hosts_test.ADDRESSES[nodes[other]]}"
            try:
                wait_for(f"{nodes[mine]}'s route to rank {other}",
                         lambda: want in host_routes(hosts, nodes[mine]), 15, 0.2)
                ok(f"net: {nodes[mine]} routes {want}")
            except TimeoutError:
                fail(f"net: {nodes[mine]} has no route '{want}':\n"
                     f"{host_routes(hosts, nodes[mine])}")
        wait_for("both ranks to end", lambda: all(ended(fleet.job(r)["state"]) for r in ranks),
                 120, 0.5)
        states = [fleet.job(r)["state"] for r in ranks]
        out = [log(fleet, r) for r in ranks]
        if states != ["succeeded", "succeeded"]:
            fail(f"net: the ranks ended {states}; logs: {out}")
            return fleet
        expect = [f"rank 0 of 2 src {addresses[0]} ifname pal0",
                  f"rank 0 saw rank 1 from {addresses[1]}"]
        if all(e in out[0] for e in expect):
            ok(f"net: rank 0 left from {addresses[0]} and saw rank 1 come from {addresses[1]}")
        else:
            fail(f"net: rank 0's log lacks {expect}: {out[0]!r}")
        expect = [f"rank 1 of 2 src {addresses[1]} ifname pal0",
                  f"rank 1 was seen from {addresses[1]}"]
        if all(e in out[1] for e in expect):
            ok(f"net: rank 1 reached MASTER_ADDR {addresses[0]} across the hosts")
        else:
            fail(f"net: rank 1's log lacks {expect}: {out[1]!r}")
        for node in set(nodes):
            try:
                wait_for(f"{node} without the gang's routes", lambda: not any(
                    a + " via" in host_routes(hosts, node) for a in addresses), 15, 0.2)
                wait_for(f"{node} without the ranks' namespaces", lambda: not any(
                    r in host_netns(hosts, node) for r in ranks), 15, 0.2)
                ok(f"net: {node} kept no route and no namespace of the ended gang")
            except TimeoutError:
                fail(f"net: {node} still has routes\n{host_routes(hosts, node)}\n"
                     f"or namespaces\n{host_netns(hosts, node)}")
        return fleet
    finally:
        finish(fleet, hosts, ranks)


def cut_drill(work):
    hosts = hosts_test.SeparateHosts(work, "gang-cut")
    fleet = None
    sampler = None
    ranks = []
    steps = 60
    try:
        fleet = Fleet(work, "gang-cut", hosts=hosts)
        sampler = RankSampler("gang-cut")
        ranks = submit(fleet, work, "gang-cut", steps, 0.25, 1)
        wait_for("a periodic gang checkpoint", lambda: all(
            fleet.job(r)["gang"]["generation"] >= 1 for r in ranks), 120, 0.5)
        generation = fleet.job(ranks[0])["gang"]["generation"]
        ok(f"cut: periodic coordinated checkpoints while it runs (generation {generation})")
        wait_for("step 10", lambda: len(steps_seen(fleet, ranks[0])) >= 10, 120, 0.3)
        stop_cut(fleet, ranks, 120)
        gens = {fleet.job(r)["gang"]["generation"] for r in ranks}
        at = len(steps_seen(fleet, ranks[0]))
        ok(f"cut: the gang checkpointed as one cut (generation {gens}) at step {at}")
        time.sleep(2)
        if len(steps_seen(fleet, ranks[0])) != at:
            fail("cut: steps went on after the gang was checkpointed")
        fleet.post(f"/v1/jobs/{ranks[1]}/resume", {})
        wait_for("both ranks running again", lambda: all(
            fleet.job(r)["state"] in ("running", "succeeded") for r in ranks), 120, 0.3)
        ok("cut: the gang resumed, every rank restored from the same generation")
        check_finished(fleet, ranks, steps, "cut")
        return fleet
    except TimeoutError as e:
        fail(f"cut: {e}")
    finally:
        if sampler:
            sampler.finish("cut")
        finish(fleet, hosts, ranks)


def lost_drill(work, tag="gang-lost", program="gang_rank.py", steps=80, check=None):
    hosts = hosts_test.SeparateHosts(work, tag)
    fleet = None
    sampler = None
    what = "lost" if tag == "gang-lost" else tag.replace("gang-", "")
    ranks = []
    try:
        fleet = Fleet(work, tag, hosts=hosts)
        sampler = RankSampler(tag)
        ranks = submit(fleet, work, tag, steps, 0.25, 2, program=program)
        wait_for("a coordinated checkpoint after step 10", lambda: len(
            steps_seen(fleet, ranks[0])) >= 10 and all(
            fleet.job(r)["gang"]["generation"] >= 2 for r in ranks), 180, 0.3)
        lost = fleet.job(ranks[1])["node"]
        other = "node-b" if lost == "node-a" else "node-a"
        agent = fleet.procs[lost]
        agent.kill()
        agent.wait()
        ok(f"{what}: {lost}'s agent killed at step {len(steps_seen(fleet, ranks[0]))}")
        killed = time.time()
        wait_for("the gang recovered on " + other, lambda: all(
            fleet.job(r)["node"] == other and fleet.job(r)["state"] in ("running", "succeeded")
            and fleet.job(r)["recoveries"] >= 1 for r in ranks), 120, 0.3)
        ok(f"{what}: every rank of the gang restored on {other} from one generation "
           f"({ {fleet.job(r)['gang']['generation'] for r in ranks} }), "
           f"{time.time() - killed:.0f} s after the loss")
        time.sleep(2 * LEASE_S)
        fleet.start_agent(lost)  # back after three leases: its fenced copies are killed
        (check or check_finished)(fleet, ranks, steps, what)
        return fleet
    except TimeoutError as e:
        fail(f"{what}: {e}")
    finally:
        if sampler:
            sampler.finish(what)
        finish(fleet, hosts, ranks)


def move_drill(work, tag="gang-move", program="gang_rank.py", steps=60, check=None):
    """Rank 1 of a running gang moved to a third host that joined after the gang was placed."""
    hosts = hosts_test.SeparateHosts(work, tag, nodes=("node-a", "node-b", "node-c"))
    fleet = None
    sampler = None
    ranks = []
    what = tag.replace("gang-", "")
    try:
        fleet = Fleet(work, tag, hosts=hosts)
        sampler = RankSampler(tag)
        ranks = submit(fleet, work, tag, steps, 0.25, 1, program=program)
        wait_for("step 10", lambda: len(steps_seen(fleet, ranks[0])) >= 10, 120, 0.3)
        fleet.start_agent("node-c")
        stay, moving = (fleet.job(r)["node"] for r in ranks)
        address = fleet.job(ranks[1])["gang"]["address"]

        # `paladin job migrate RANK --to node-c`, followed until the rank runs there.
        moved = {}

        def asked():
            cli = subprocess.run(
                [crash_test.PALADIN, "job", "migrate", ranks[1], "--to", "node-c", "--timeout",
                 "120", "--server", f"http://{hosts.server_ip}:{fleet.port}", "--token",
                 fleet.token], capture_output=True, text=True, timeout=180)
            if cli.returncode != 0 and "already under way" in cli.stderr:
                return False  # a periodic cut under way: ask again
            moved.update(rc=cli.returncode, out=cli.stdout + cli.stderr)
            return True
        at = len(steps_seen(fleet, ranks[0]))
        wait_for("the move to be accepted", asked, 60, 0.3)
        if moved["rc"] == 0 and f"{ranks[1]} moved to node-c" in moved["out"]:
            ok(f"{what}: `paladin job migrate {ranks[1]} --to node-c` followed it there")
        else:
            fail(f"{what}: paladin job migrate: exit {moved['rc']}: {moved['out'][-600:]}")
        wait_for("rank 1 running on node-c", lambda: (lambda j: j["node"] == "node-c" and j[
            "state"] in ("running", "succeeded") and j["gang"]["moving_to"] is None)(
            fleet.job(ranks[1])), 120, 0.3)
        events = json.dumps(fleet.get(f"/v1/events?job={ranks[1]}"))
        if f"moved from {moving} to node-c" in events:
            ok(f"{what}: rank 1 moved from {moving} to node-c at step {at} (rank 0 stays on {stay})")
        else:
            fail(f"{what}: no gang_rank_moved event from {moving} to node-c: {events[-800:]}")
        want = f"{address} via {hosts_test.ADDRESSES['node-c']}"
        try:
            wait_for(f"{stay}'s route to rank 1 via node-c",
                     lambda: want in host_routes(hosts, stay), 15, 0.2)
            wait_for(f"{moving} without rank 1's network",
                     lambda: f"{moving}-{ranks[1]}" not in host_netns(hosts, moving), 15, 0.2)
            ok(f"{what}: {stay} routes {want}; {moving} kept no network of rank 1")
        except TimeoutError:
            fail(f"{what}: {stay}'s routes\n{host_routes(hosts, stay)}\n{moving}'s namespaces\n"
                 f"{host_netns(hosts, moving)}")
        (check or check_finished)(fleet, ranks, steps, what)
        return fleet
    except TimeoutError as e:
        fail(f"{what}: {e}")
    finally:
        if sampler:
            sampler.finish(what)
        finish(fleet, hosts, ranks)


def finish(fleet, hosts, ranks=()):
    if fleet:
        if failures:
            fleet.print_logs(ranks)
        fleet.stop()
    hosts.close()


def ddp_steps(text):
    """rank 0's `step N LOSS_HEX` lines as (N, LOSS_HEX), and its final loss (or None)."""
    steps = [tuple(line.split()[1:3]) for line in text.splitlines() if line.startswith("step ")]
    final = [line.split()[1] for line in text.splitlines() if line.startswith("final ")]
    return steps, final[0] if final else None


def ddp_reference(steps):
    """An uninterrupted run's (step, loss) lines and final loss, both ranks in one tree here
    (torch.multiprocessing.spawn); None when it failed (said) or torch is missing (said)."""
    if not has_torch():
        print("SKIP: ddp: no torch with gloo for /usr/bin/python3 (scripts/deps.sh --tests "
              "installs python3-torch)")
        return None
    reference = subprocess.run([PYTHON, DDP_TRAIN, str(steps), "0"], capture_output=True,
                               text=True, timeout=300)
    want_steps, want_final = ddp_steps(reference.stdout)
    if reference.returncode != 0 or len(want_steps) != steps or want_final is None:
        fail(f"ddp: the uninterrupted run failed: {reference.stdout[-300:]} "
             f"{reference.stderr[-600:]}")
        return None
    ok(f"ddp: uninterrupted run (one tree), {steps} steps, final loss {want_final}")
    return want_steps, want_final


def rerun_steps(got, want):
    """GOT, rank 0's (step, loss) lines of a run rolled back once to a checkpoint: WANT's first
    m lines, then WANT's from step k+1 to the end again, with k <= m (the steps after the
    checkpoint ran on the lost node and again after the rollback). The steps run twice, [] for
    WANT itself, or None when GOT is neither."""
    if got == want:
        return []
    back = next((i for i in range(1, len(got)) if int(got[i][0]) <= int(got[i - 1][0])), None)
    if back is None:
        return None
    k = int(got[back][0]) - 1
    if got[:back] != want[:back] or got[back:] != want[k:]:
        return None
    return [int(step) for step, _ in want[k:back]]


def ddp_check(want, rollback=False):
    """check_finished for ddp_train.py: both ranks succeeded; each step's loss and the final one
    the bits of `want` (ddp_reference's); every step printed once, or with ROLLBACK (a node lost
    after its last checkpoint) the steps since then printed twice, the same bits both times."""
    want_steps, want_final = want

    def check(fleet, ranks, steps, what):
        wait_for(f"{what}: both ranks to end", lambda: all(
            ended(fleet.job(r)["state"]) for r in ranks), 300, 0.5)
        states = [fleet.job(r)["state"] for r in ranks]
        got_steps, got_final = ddp_steps(log(fleet, ranks[0]))
        twice = rerun_steps(got_steps, want_steps)
        if states != ["succeeded", "succeeded"]:
            fail(f"{what}: ranks ended {states}: {log(fleet, ranks[0])[-400:]}")
        elif twice is None or (twice and not rollback) or got_final != want_final:
            diff = [(a, b) for a, b in zip(got_steps, want_steps) if a != b][:3]
            fail(f"{what}: losses differ from the uninterrupted run's ({len(got_steps)} steps, "
                 f"first differences {diff}, final {got_final} against {want_final})")
        elif twice:
            ok(f"{what}: each of the {steps} steps' all-reduced losses and the final {got_final} "
               f"are the uninterrupted run's bits; steps {twice[0]}-{twice[-1]} ran on the lost "
               f"node after its last checkpoint and again after the rollback, the same bits")
        else:
            ok(f"{what}: each of the {steps} steps' all-reduced losses, printed once, and the "
               f"final {got_final} are the uninterrupted run's bits")
    return check


def ddp_lost_drill(work):
    """lost's drill with the torch DDP ranks: a node lost mid-training, the gang back from its
    last coordinated checkpoint on the other node, every loss the uninterrupted run's."""
    want = ddp_reference(40)
    if want:
        lost_drill(work, "gang-ddp-lost", "ddp_train.py", 40, ddp_check(want, rollback=True))


def ddp_move_drill(work):
    """move's drill with the torch DDP ranks: rank 1 moved to a third host mid-training, every
    loss the uninterrupted run's."""
    want = ddp_reference(40)
    if want:
        move_drill(work, "gang-ddp-move", "ddp_train.py", 40, ddp_check(want))


def ddp_drill(work):
    """Two torch DDP ranks (gloo, tests/ckpt/ddp_train.py started alone per rank from the
    rendezvous variables, as torchrun starts them) as a gang over the two hosts: a coordinated
    checkpoint that stops the gang, then a resume, every step's all-reduced loss the bits of an
    uninterrupted run's."""
    steps = 40
    want = ddp_reference(steps)
    if not want:
        return None
    hosts = hosts_test.SeparateHosts(work, "gang-ddp")
    fleet = None
    sampler = None
    ranks = []
    try:
        fleet = Fleet(work, "gang-ddp", hosts=hosts)
        sampler = RankSampler("gang-ddp")
        ranks = submit(fleet, work, "gang-ddp", steps, 0.25, 1, program="ddp_train.py")
        wait_for("step 8", lambda: len(ddp_steps(log(fleet, ranks[0]))[0]) >= 8, 180, 0.3)
        # Read once it runs: right after the submit the gang may not be placed yet (no node).
        nodes = {fleet.job(r)["node"] for r in ranks}
        stop_cut(fleet, ranks, 180)
        at = len(ddp_steps(log(fleet, ranks[0]))[0])
        ok(f"ddp: the gang on {sorted(nodes)} checkpointed as one cut at step {at}")
        fleet.post(f"/v1/jobs/{ranks[1]}/resume", {})
        ddp_check(want)(fleet, ranks, steps, "ddp")
        return fleet
    except TimeoutError as e:
        fail(f"ddp: {e}")
    finally:
        if sampler:
            sampler.finish("ddp")
        finish(fleet, hosts, ranks)
    return None


DRILLS = {"net": net_drill, "cut": cut_drill, "lost": lost_drill, "ddp": ddp_drill,
          "ddp-lost": ddp_lost_drill, "move": move_drill, "ddp-move": ddp_move_drill}


def clean_rank_nets():
    """The ranks' namespaces a drill's hosts left in /run/netns (an agent killed and not back
    never removes them; with its mount namespace gone the name is a plain empty file)."""
    netns = "/run/netns"
    if not os.path.isdir(netns):
        return
    for name in os.listdir(netns):
        if re.fullmatch(r"node-[abc]-j-[0-9]{6,}", name):
            if subprocess.run(["ip", "netns", "del", name], capture_output=True).returncode != 0:
                try:
                    os.unlink(os.path.join(netns, name))
                except OSError:
                    pass


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
    only = os.environ.get("PALADIN_GANG_ONLY", "")
    hosts_test.clean_network(hosts_test.SLOT)
    clean_rank_nets()
    work = crash_test.work_folder("gang", under="/var/tmp")
    hosts_test.stage_programs(work)
    shutil.copy2(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gang_rank.py"),
                 os.path.join(work, "bin", "gang_rank.py"))
    os.chmod(os.path.join(work, "bin", "gang_rank.py"), 0o644)
    shutil.copy2(DDP_TRAIN, os.path.join(work, "bin", "ddp_train.py"))
    os.chmod(os.path.join(work, "bin", "ddp_train.py"), 0o644)
    began = time.time()
    try:
        for name, drill in DRILLS.items():
            if only and name != only:
                continue
            print(f"--- drill {name}", flush=True)
            try:
                drill(work)
            except TimeoutError as e:
                fail(f"{name}: {e}")
            hosts_test.clean_network(hosts_test.SLOT)
            clean_rank_nets()
    finally:
        hosts_test.clean_network(hosts_test.SLOT)
        clean_rank_nets()
    print(f"gang_test: {len(failures)} failure(s) in {time.time() - began:.0f} s")
    if not failures:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
