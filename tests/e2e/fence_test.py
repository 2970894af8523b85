#!/usr/bin/env python3
"""The node's fence, end to end (label e2e): a real server, two agents on this host, emulated GPUs,
real CRIU, the demo workload (which verifies its own memory every step).

For each fault the job's node suffers (its agent SIGKILLed for 3x the lease, SIGSTOPped for 3x the
lease, cut off from the server through a proxy for 3x the lease), every job's copies are sampled
every 100 ms from the fault until the end:
  - never two copies running at once (the node's paladin-workload-init stops its copy when the
    lease runs out, before the server restores the job on the other node);
  - the job is restored on the other node and ends running exactly once, its state verified;
  - when the agent comes back (restarted, continued, reconnected) it kills its stale copy, found
    from its own records (the other agent, restoring the job into the same run directory,
    rewrote the job's record there), and no stopped copy is left behind.
It prints what it observed in each drill.

Both agents share this host's file system and network; hosts_test.py runs the same drill with the
agents as separate hosts.

Usage: fence_test.py PALADIN
"""
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crash_test  # noqa: E402  (shares its fleet, proxy and workload helpers)
from crash_test import Fleet, fail, ok, tagged_processes, verify_once, wait_for  # noqa

LEASE_S = 3  # crash_test.Fleet's server: --lease 3 --heartbeat 0.5


class Sampler:
    """Every 100 ms: how many copies of the job run, and how many are stopped."""

    def __init__(self, tag):
        self.tag = tag
        self.samples = 0
        self.max_running = 0
        self.max_stopped = 0
        self.zero_running = 0
        self.double = []  # times at which two copies ran
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        start = time.time()
        while not self.stop:
            states = list(tagged_processes(self.tag).values())
            running = len([s for s in states if s not in "TtZ"])
            stopped = len([s for s in states if s in "Tt"])
            self.samples += 1
            self.max_running = max(self.max_running, running)
            self.max_stopped = max(self.max_stopped, stopped)
            if running == 0:
                self.zero_running += 1
            if running > 1:
                self.double.append(round(time.time() - start, 1))
            time.sleep(0.1)

    def finish(self):
        self.stop = True
        self.thread.join()

    def describe(self):
        return (f"{self.samples} samples every 100 ms: at most {self.max_running} running "
                f"copy(ies) at once, at most {self.max_stopped} stopped, "
                f"{self.zero_running} sample(s) with none running (frozen or restoring)")


def job_on(fleet, job_id, node):
    job = fleet.job(job_id)
    return job["node"] == node and job["state"] == "running" and job.get("migration") is None


def drill(work, fault, hosts=None, prefix="fence-"):
    fleet = Fleet(work, prefix + fault, through_proxy=True, hosts=hosts)
    tag = prefix + fault
    try:
        job_id = fleet.submit(tag)
        wait_for("a checkpoint of the job", lambda: fleet.job(job_id)["state"] == "running" and
                 fleet.job(job_id).get("last_checkpoint"), 120)
        node = fleet.job(job_id)["node"]
        other = "node-b" if node == "node-a" else "node-a"
        agent = fleet.procs[node]
        sampler = Sampler(tag)
        began = time.time()
        if fault == "sigkill":
            agent.kill()
            agent.wait()
        elif fault == "sigstop":
            agent.send_signal(signal.SIGSTOP)
        else:
            fleet.cut(node)
        # The server restores the job elsewhere two leases after the last beat it saw.
        wait_for("the job restored on " + other, lambda: job_on(fleet, job_id, other), 120, 0.2)
        restored_after = time.time() - began
        time.sleep(max(0.0, 3 * LEASE_S - (time.time() - began)))
        away = time.time() - began
        stale = [p for p, s in tagged_processes(tag).items() if s in "Tt"]
        print(f"fence {fault}: copies after 3 leases: {crash_test.describe_copies(tag)}", flush=True)
        if fault == "sigkill":
            fleet.start_agent(node)
        elif fault == "sigstop":
            agent.send_signal(signal.SIGCONT)
        else:
            fleet.reconnect(node)
        # Its stale copy goes: one copy of the job is left, and it runs.
        try:
            wait_for("the stale copy to go", lambda: len(tagged_processes(tag)) == 1, 60, 0.2)
            came_back = True
        except TimeoutError as e:
            fail(f"{fault}: {e}: {crash_test.describe_copies(tag)}")
            came_back = False
        time.sleep(2)
        sampler.finish()
        print(f"fence {fault}: restored on {other} {restored_after:.1f} s after the fault, the "
              f"agent away {away:.1f} s ({away / LEASE_S:.1f} leases), stale copies stopped "
              f"then: {len(stale)}; {sampler.describe()}", flush=True)
        if sampler.double:
            fail(f"{fault}: two copies running at once at {sampler.double[:10]} s")
        elif sampler.max_running == 0:
            fail(f"{fault}: the job never ran while sampled")
        else:
            ok(f"{fault}: never two copies running at once")
        if not stale:
            fail(f"{fault}: no stopped stale copy on {node} while its agent was away")
        if came_back:
            left = tagged_processes(tag)
            if len(left) != 1:
                fail(f"{fault}: copies left after the agent came back: {left}")
            else:
                ok(f"{fault}: the agent came back and killed its stale copy; none left stopped")
        verify_once(fleet, job_id, tag, f"after {fault}")
        if fleet.job(job_id)["node"] != other:
            fail(f"{fault}: the job ended on {fleet.job(job_id)['node']}, not {other}")
        crash_test.cancel_and_check_gone(fleet, job_id, tag)
    except (TimeoutError, urllib.error.URLError, subprocess.TimeoutExpired) as e:
        fail(f"{fault}: {e}")
    finally:
        if fault == "sigstop" and fleet.procs.get("node-a") and fleet.procs.get("node-b"):
            for p in fleet.procs.values():
                try:
                    p.send_signal(signal.SIGCONT)
                except OSError:
                    pass
        fleet.stop()


def main():
    if os.geteuid() != 0:
        print("SKIP: the fence drill needs root (PID namespaces, cgroups, CRIU)")
        return 77
    if not os.path.exists("/opt/paladin/criu/criu") and not os.environ.get("PALADIN_CRIU"):
        print("SKIP: no CRIU (install it with scripts/criu.sh)")
        return 77
    work = crash_test.work_folder("fence")
    only = os.environ.get("PALADIN_FENCE_ONLY", "")
    try:
        for fault in ("sigkill", "sigstop", "cut-off"):
            if not only or only == fault:
                drill(work, fault)
    finally:
        crash_test.kill_tagged("fence-sigkill", "fence-sigstop", "fence-cut-off")
        crash_test.remove_work(work, "fence_test")
    return crash_test.summary("fence_test")


if __name__ == "__main__":
    sys.exit(main())
