#!/usr/bin/env python3
"""Fleet moves post-copy (label e2e): a real server and two agents on one host, real CRIU.

When both agents have the patched CRIU (scripts/criu_lazy.sh) and a job holds no GPU state, the
server's default --move-mode auto moves it post-copy: the job resumes at the destination as soon
as it is restored without its memory, which follows from the stopped source; the server commits
once every page has arrived (docs/lazy_migration.md, "Fleet moves").

The workload is tests/ckpt/lazy_mem.py (a CPython process holding 128 MiB of distinct pages,
appending one line per generation with the CRC of the window it changed to a file it keeps
open); `lazy_mem.py check` replays every generation afterwards, so a page lost or misplaced by a
move, or a generation repeated or skipped, fails the drill. Every copy of the job is sampled every
100 ms (fence_test.Sampler): never two running at once, one left at the end.

The drills, each on a fresh server and two agents:
  1. move: the job moved by `POST /v1/jobs/ID/migrate`; the move's event says post-copy and the
     pause; the file verified. Then a GPU job (the demo workload, which holds device memory)
     moved in the same fleet goes pre-copy, streamed, and its event says why.
  2. dst-killed: the destination agent killed (PALADIN_MIGRATE_FAULT=crash:dst-during-pages)
     once the job runs there and while its pages are still coming, before the commit: the
     source resumes the job (the server decided against the move; the dead agent's copy was
     stopped by its lease) and the restarted agent kills its stale copy. The file is verified
     from the source's resumption on (what the destination did meanwhile is lost, as in a
     recovery). What the dead agent's move left on its host (the incoming image folder) is gone
     once its successor has started, and was there before (the drill would otherwise test
     nothing).
  3. src-killed: the source agent killed (PALADIN_MIGRATE_FAULT=crash:src-during-pages) once the
     job runs at the destination and while its pages are still coming, before the commit; it
     stays away for 3 leases. The destination, losing the source, stops its copy and the server
     decides against the move; the server gives the dead node up and recovers the job from its
     last checkpoint: counted as a recovery (the job's `recoveries`, a `recovered` event,
     paladin_recoveries_total), one copy, the file verified from the recovery's rewind on. The
     restarted agent's stale stopped copy is killed, and its move's outgoing folder is gone.

  4. relay-cut: the link between the two agents' page relays cut once while the pages are
     coming (PALADIN_MIGRATE_FAULT=cut:page-relay at the destination's agent): the destination's
     relay connects again, the stream goes on where it stopped, and the move completes; its
     event says post-copy and that the link was cut once and made again; one copy, the file
     verified.

Each agent has a temporary directory of its own (TMPDIR), so that the leftovers checked are its.

Usage: postcopy_test.py PALADIN
Environment: PALADIN_POSTCOPY_ONLY=move|dst-killed|src-killed|relay-cut runs one drill.
"""
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crash_test  # noqa: E402
import fence_test  # noqa: E402
from crash_test import Fleet, fail, ok, run_tag, tagged_processes, wait_for  # noqa: E402

LEASE_S = fence_test.LEASE_S
LAZY_MEM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ckpt", "lazy_mem.py")
MIB = 128
work_bin = ""


def submit_cpu_job(fleet, tag, out):
    return fleet.post("/v1/jobs", {
        "name": tag, "team": "crash", "gpu_mem": "1GiB", "gpus": 1,
        "command": ["python3", os.path.join(work_bin, "lazy_mem.py"), "run", str(MIB), out,
                    "0.05", "--tag", run_tag(tag)]})["id"]


def cpu_job_on_node_a(fleet, tag, out):
    """Submits the CPU job writing OUT and, once it runs, has it on node-a; its id."""
    job_id = submit_cpu_job(fleet, tag, out)
    wait_for("the CPU job running", lambda: fleet.job(job_id)["state"] == "running" and
             os.path.exists(out) and os.path.getsize(out) > 0, 120, 0.2)
    if fleet.job(job_id)["node"] != "node-a":
        fleet.post(f"/v1/jobs/{job_id}/migrate", {"to": "node-a"})
        wait_for("the job on node-a", lambda: fence_test.job_on(fleet, job_id, "node-a"),
                 180, 0.2)
    return job_id


def check_leftovers_removed(what, left, still):
    """LEFT: what a killed agent's move left behind before its restart; STILL: after."""
    if not left:
        fail(f"{what}: the killed agent left nothing behind to clean up (the drill tests "
             "nothing: did the agent die mid-move?)")
    elif still:
        fail(f"{what}: left behind after the agent's restart: {still} (before: {left})")
    else:
        ok(f"{what}: the restarted agent removed what its dead predecessor's move left: "
           f"{[os.path.basename(p) for p in left]}")


def other_node(fleet, job_id):
    return "node-b" if fleet.job(job_id)["node"] == "node-a" else "node-a"


def move_events(fleet, job_id):
    """The messages of the job's migration events (migrated, migration_cost, migration_failed)."""
    events = fleet.get(f"/v1/events?job={job_id}")["events"]
    return [e["message"] for e in events
            if e["kind"] in ("migrated", "migration_cost", "migration_failed",
                             "migration_started")]


def move_to_node_b(fleet, job_id, what, reported=lambda m: "paused" in m):
    """Asks the server to move the job to node-b and waits until it runs there and the move's
    event matching `reported` is in."""
    fleet.post(f"/v1/jobs/{job_id}/migrate", {"to": "node-b"})
    wait_for(f"{what}: the job on node-b",
             lambda: fence_test.job_on(fleet, job_id, "node-b"), 180, 0.2)
    wait_for(f"{what}: the move's cost reported",
             lambda: any(reported(m) for m in move_events(fleet, job_id)), 30, 0.2)


def check_file(out, after_rewind, what):
    args = ["python3", LAZY_MEM, "check", str(MIB), out] + (["--after-rewind"] if after_rewind
                                                            else [])
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{what}: the job's file does not verify: {r.stdout.strip()} {r.stderr.strip()}")
    else:
        ok(f"{what}: {r.stdout.strip()}")


def one_copy_left(tag, what):
    """One copy of the job left, running (not stopped throughout 2 s)."""
    try:
        wait_for(f"{what}: one copy left", lambda: len(tagged_processes(tag)) == 1, 60, 0.2)
        wait_for(f"{what}: that copy running",
                 lambda: any(s not in "TtZ" for s in tagged_processes(tag).values()), 20, 0.2)
    except TimeoutError as e:
        fail(f"{e}: {tagged_processes(tag)}")
        return
    ok(f"{what}: one copy left, running")


def fleet_with_own_tmp(work, name, faults, server_args=None):
    """A Fleet whose agents each have a TMPDIR of their own (work/tmp-NAME-NODE), with
    PALADIN_MIGRATE_FAULT per node from `faults` (and `server_args` on the server's command
    line). Returns (fleet, {node: env})."""
    envs = {}
    for node in ("node-a", "node-b"):
        tmp = os.path.join(work, f"tmp-{name}-{node}")
        os.makedirs(tmp)
        envs[node] = {"TMPDIR": tmp}
    agent_env = {n: dict(envs[n], **({"PALADIN_MIGRATE_FAULT": faults[n]} if n in faults
                                     else {})) for n in envs}
    return Fleet(work, name, agent_env=agent_env, server_args=server_args), envs


def move_leftovers(fleet, node, env):
    """What moves left on NODE's host: its agent's incoming and outgoing folders and anything of
    Paladin's in its TMPDIR."""
    left = []
    for kind in ("incoming", "outgoing"):
        folder = os.path.join(fleet.dir, "agents", node, kind)
        left += [os.path.join(folder, n) for n in (os.listdir(folder)
                                                   if os.path.isdir(folder) else [])]
    left += [os.path.join(env["TMPDIR"], n) for n in os.listdir(env["TMPDIR"])
             if n.startswith("paladin-")]
    return sorted(left)


def metric(fleet, name):
    """The value of a metric in the server's /metrics text."""
    req = urllib.request.Request(f"http://127.0.0.1:{fleet.port}/metrics")
    req.add_header("Authorization", "Bearer " + fleet.token)
    with urllib.request.urlopen(req, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.split()[-1])
    return None


def move_drill(work):
    what = "post-copy move"
    fleet = Fleet(work, "pc-move")
    tag = "pcmove"
    out = os.path.join(work, "out", tag + ".log")
    sampler = None
    job_id = gpu_job = None
    gpu_tag = "pcgpu"
    try:
        nodes = {n["name"]: n.get("post_copy") for n in fleet.get("/v1/nodes")["nodes"]}
        if not all(nodes.values()):
            fail(f"{what}: the agents did not register as post-copy capable: {nodes}")
            return
        job_id = submit_cpu_job(fleet, tag, out)
        wait_for("the CPU job running", lambda: fleet.job(job_id)["state"] == "running" and
                 os.path.exists(out) and os.path.getsize(out) > 0, 120, 0.2)
        time.sleep(2)
        to = other_node(fleet, job_id)
        sampler = fence_test.Sampler(tag)
        began = time.time()
        fleet.post(f"/v1/jobs/{job_id}/migrate", {"to": to})
        wait_for(f"{what}: the job on {to}",
                 lambda: fence_test.job_on(fleet, job_id, to), 180, 0.2)
        wait_for(f"{what}: the move's cost reported",
                 lambda: any("paused" in m for m in move_events(fleet, job_id)), 30, 0.2)
        one_copy_left(tag, what)
        time.sleep(3)  # it runs on at the destination
        sampler.finish()
        messages = move_events(fleet, job_id)
        said = [m for m in messages if "paused" in m]
        print(f"{what}: {time.time() - began:.1f} s; events: {messages}; {sampler.describe()}",
              flush=True)
        if not said or "; post-copy (" not in said[-1]:
            fail(f"{what}: the move's event does not say post-copy: {messages}")
        else:
            pause = float(re.search(r"paused ([0-9.]+) s", said[-1]).group(1))
            ok(f"{what}: the event says post-copy, pause {pause:.2f} s")
        last = fleet.job(job_id).get("last_move") or {}
        if last.get("mode") != "post-copy" or last.get("pause_s") is None:
            fail(f"{what}: the job's last_move does not say post-copy and its pause: {last}")
        crash_test.check_one_copy(sampler, what)
        check_file(out, False, what)
        crash_test.cancel_and_check_gone(fleet, job_id, tag)

        # A job holding GPU state moves pre-copy, streamed (its device memory is in its host
        # memory once the driver's checkpoint took it), and says why.
        gpu_job = fleet.submit(gpu_tag)
        wait_for("the GPU job running", lambda: fleet.job(gpu_job)["state"] == "running", 120)
        time.sleep(2)
        to = other_node(fleet, gpu_job)
        fleet.post(f"/v1/jobs/{gpu_job}/migrate", {"to": to})
        wait_for("the GPU job moved", lambda: fence_test.job_on(fleet, gpu_job, to), 180, 0.2)
        wait_for("the GPU job's move reported",
                 lambda: any("paused" in m for m in move_events(fleet, gpu_job)), 30, 0.2)
        said = [m for m in move_events(fleet, gpu_job) if "paused" in m]
        if "; stream (the job holds GPU state" not in said[-1]:
            fail(f"GPU job: the move's event does not say stream for its GPU state: {said}")
        else:
            ok(f"GPU job: {said[-1]}")
        crash_test.verify_once(fleet, gpu_job, gpu_tag, "after the GPU job's move")
        crash_test.cancel_and_check_gone(fleet, gpu_job, gpu_tag)
    except (TimeoutError, urllib.error.URLError, subprocess.TimeoutExpired) as e:
        fail(f"{what}: {e}; copies {tagged_processes(gpu_tag if gpu_job else tag)}")
        fleet.print_logs([j for j in (job_id, gpu_job) if j])
    finally:
        if sampler is not None and not sampler.stop:
            sampler.finish()
        fleet.stop()


def relay_cut_drill(work):
    what = "post-copy, the page relays' link cut once"
    tag = "pccut"
    out = os.path.join(work, "out", tag + ".log")
    fleet, _ = fleet_with_own_tmp(work, "pc-cut", {"node-b": "cut:page-relay"})
    sampler = None
    job_id = None
    try:
        job_id = cpu_job_on_node_a(fleet, tag, out)
        time.sleep(2)
        sampler = fence_test.Sampler(tag)
        move_to_node_b(fleet, job_id, what, lambda m: "paused" in m and "page stream" in m)
        one_copy_left(tag, what)
        time.sleep(2)
        sampler.finish()
        said = [m for m in move_events(fleet, job_id) if "paused" in m and "page stream" in m]
        if "; post-copy (" not in said[-1] or \
                "page stream's link was cut 1 time(s) and made again" not in said[-1]:
            fail(f"{what}: the event does not say post-copy with the link made again: {said}")
        else:
            ok(f"{what}: {said[-1]}")
        crash_test.check_one_copy(sampler, what)
        check_file(out, False, what)
        crash_test.cancel_and_check_gone(fleet, job_id, tag)
    except (TimeoutError, urllib.error.URLError, subprocess.TimeoutExpired) as e:
        fail(f"{what}: {e}; copies {tagged_processes(tag)}")
        fleet.print_logs([job_id] if job_id else [])
    finally:
        if sampler is not None and not sampler.stop:
            sampler.finish()
        fleet.stop()


def dst_killed_drill(work):
    what = "post-copy, destination agent killed before the commit"
    tag = "pckill"
    out = os.path.join(work, "out", tag + ".log")
    fleet, envs = fleet_with_own_tmp(work, "pc-kill", {"node-b": "crash:dst-during-pages"})
    sampler = None
    try:
        job_id = cpu_job_on_node_a(fleet, tag, out)
        time.sleep(2)
        sampler = fence_test.Sampler(tag)
        began = time.time()
        died = move_losing_destination(fleet, job_id, tag, what)
        if died is None:
            return
        # The dead agent's copy stays stopped by its lease until the agent is back and kills it.
        time.sleep(2 * LEASE_S)
        left = move_leftovers(fleet, "node-b", envs["node-b"])
        fleet.start_agent("node-b", env=envs["node-b"])
        one_copy_left(tag, what)
        still = move_leftovers(fleet, "node-b", envs["node-b"])
        check_leftovers_removed(what, left, still)
        time.sleep(3)
        sampler.finish()
        messages = move_events(fleet, job_id)
        print(f"{what}: the agent died {died:.1f} s into the move; "
              f"{time.time() - began:.1f} s in all; events: {messages}; {sampler.describe()}",
              flush=True)
        crash_test.check_one_copy(sampler, what)
        log = open(os.path.join(fleet.dir, "agent-node-a.log"), errors="replace").read()
        if "post-copy (no GPU state" not in log:
            fail(f"{what}: the source did not move the job post-copy")
        check_file(out, True, what)
        crash_test.cancel_and_check_gone(fleet, job_id, tag)
    except (TimeoutError, urllib.error.URLError, subprocess.TimeoutExpired) as e:
        fail(f"{what}: {e}; copies {tagged_processes(tag)}")
    finally:
        if sampler is not None and not sampler.stop:
            sampler.finish()
        fleet.stop()


def lazy_mem_work(name):
    """The drills' work folder NAME: lazy_mem.py in its bin/ (which cpu_job_on_node_a's jobs
    run) and out/, where the jobs, each a uid of its own, write. Returns its path."""
    global work_bin
    work = crash_test.work_folder(name)
    work_bin = os.path.join(work, "bin")
    shutil.copy(LAZY_MEM, os.path.join(work_bin, "lazy_mem.py"))
    os.chmod(os.path.join(work_bin, "lazy_mem.py"), 0o755)
    os.makedirs(os.path.join(work, "out"))
    os.chmod(os.path.join(work, "out"), 0o1777)
    return work


def move_losing_destination(fleet, job_id, tag, what):
    """Moves job_id from node-a to node-b, whose agent a fault kills during the move; waits for
    the move to fail with the job running on node-a again, its copy there resumed. Returns the
    seconds from the move's start until the destination's agent died, None (said) when the fault
    never killed it."""
    began = time.time()
    fleet.post(f"/v1/jobs/{job_id}/migrate", {"to": "node-b"})
    try:
        fleet.procs["node-b"].wait(120)
    except subprocess.TimeoutExpired:
        fail(f"{what}: the fault did not kill the destination's agent")
        return None
    died = time.time() - began
    wait_for(f"{what}: the move failed", lambda: fleet.job(job_id).get("migration") is None
             and fleet.job(job_id)["state"] == "running", 180, 0.2)
    job = fleet.job(job_id)
    if job["node"] != "node-a":
        fail(f"{what}: the job is on {job['node']}, not back on its source node-a")
    wait_for(f"{what}: a copy running", lambda: any(
        s not in "TtZ" for s in tagged_processes(tag).values()), 60, 0.2)
    return died


def src_killed_drill(work):
    what = "post-copy, source agent killed before the commit"
    tag = "pcsrc"
    out = os.path.join(work, "out", tag + ".log")
    fleet, envs = fleet_with_own_tmp(work, "pc-src", {"node-a": "crash:src-during-pages"})
    sampler = None
    try:
        job_id = cpu_job_on_node_a(fleet, tag, out)
        # A checkpoint taken on node-a: what the job is recovered from.
        first = (fleet.job(job_id).get("last_checkpoint") or {}).get("path")
        wait_for("a checkpoint of the job on node-a", lambda: (fleet.job(job_id).get(
            "last_checkpoint") or {}).get("path") not in (None, first), 120, 0.2)
        before = fleet.job(job_id)
        recoveries = before.get("recoveries", 0)
        metric_before = metric(fleet, "paladin_recoveries_total") or 0
        sampler = fence_test.Sampler(tag)
        began = time.time()
        fleet.post(f"/v1/jobs/{job_id}/migrate", {"to": "node-b"})
        try:
            fleet.procs["node-a"].wait(120)
        except subprocess.TimeoutExpired:
            fail(f"{what}: the fault did not kill the source's agent")
            return
        died = time.time() - began
        # Away for 3 leases: the server gives node-a up and recovers the job from its checkpoint.
        wait_for(f"{what}: the job recovered", lambda: fleet.job(job_id).get(
            "recoveries", 0) > recoveries and fleet.job(job_id)["state"] == "running", 180, 0.2)
        time.sleep(max(0.0, 3 * LEASE_S - (time.time() - began - died)))
        stopped = [p for p, st in tagged_processes(tag).items() if st in "Tt"]
        left = move_leftovers(fleet, "node-a", envs["node-a"])
        fleet.start_agent("node-a", env=envs["node-a"])
        one_copy_left(tag, what)
        time.sleep(3)
        sampler.finish()
        job = fleet.job(job_id)
        messages = move_events(fleet, job_id)
        events = fleet.get(f"/v1/events?job={job_id}")["events"]
        recovered = [e["message"] for e in events if e["kind"] == "recovered"]
        print(f"{what}: the agent died {died:.1f} s into the move; stopped copies while it was "
              f"away: {len(stopped)}; {time.time() - began:.1f} s in all; on {job['node']}; "
              f"events: {messages}; recovered: {recovered}; {sampler.describe()}", flush=True)
        crash_test.check_one_copy(sampler, what)
        log = open(os.path.join(fleet.dir, "agent-node-a.log"), errors="replace").read()
        if "post-copy (no GPU state" not in log:
            fail(f"{what}: the source did not move the job post-copy")
        if job.get("recoveries", 0) != recoveries + 1 or job.get("migrations", 0) != before.get(
                "migrations", 0):
            fail(f"{what}: recoveries {job.get('recoveries')} (was {recoveries}), migrations "
                 f"{job.get('migrations')} (was {before.get('migrations')}): want one recovery "
                 "and no move")
        elif not recovered or recovered[-1].endswith(" from ?"):
            fail(f"{what}: no 'recovered' event naming the checkpoint: {recovered}")
        elif (metric(fleet, "paladin_recoveries_total") or 0) != metric_before + 1:
            fail(f"{what}: paladin_recoveries_total is {metric(fleet, 'paladin_recoveries_total')}"
                 f", was {metric_before}")
        else:
            ok(f"{what}: recovered from its checkpoint on {job['node']}, counted as a recovery "
               "(job, event, metric), not as a move")
        check_file(out, True, what)
        still = move_leftovers(fleet, "node-a", envs["node-a"])
        check_leftovers_removed(what, left, still)
        crash_test.cancel_and_check_gone(fleet, job_id, tag)
    except (TimeoutError, urllib.error.URLError, subprocess.TimeoutExpired) as e:
        fail(f"{what}: {e}; copies {tagged_processes(tag)}")
    finally:
        if sampler is not None and not sampler.stop:
            sampler.finish()
        fleet.stop()


def main():
    if os.geteuid() != 0:
        print("SKIP: the fleet end to end needs root (PID namespaces, cgroups, CRIU)")
        return 77
    lazy = os.environ.get("PALADIN_CRIU_LAZY", "/opt/paladin/criu-lazy/criu")
    if not os.path.exists(lazy):
        print(f"SKIP: no post-copy CRIU at {lazy} (scripts/criu_lazy.sh)")
        return 77
    work = lazy_mem_work("postcopy")
    only = os.environ.get("PALADIN_POSTCOPY_ONLY", "")
    try:
        if only in ("", "move"):
            move_drill(work)
        if only in ("", "dst-killed"):
            dst_killed_drill(work)
        if only in ("", "src-killed"):
            src_killed_drill(work)
        if only in ("", "relay-cut"):
            relay_cut_drill(work)
    finally:
        crash_test.kill_tagged("pcmove", "pcgpu", "pckill", "pcsrc", "pccut")
        crash_test.remove_work(work, "postcopy_test")
    return crash_test.summary("postcopy_test")


if __name__ == "__main__":
    sys.exit(main())
