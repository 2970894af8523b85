#!/usr/bin/env python3
"""A gang over two hosts (labels e2e): the agents as separate hosts (tests/e2e/hosts_test.py's
SeparateHosts: network and mount namespaces of their own on a bridge), a gang of two ranks
submitted with one rank per node. Checked, end to end through the real server and agents:
  - the ranks are placed on different nodes, at once;
  - each rank runs in a network namespace of its own with the stable address the server gave it
    (its packets leave from that address, on the interface GLOO_SOCKET_IFNAME names);
  - rank 1 reaches rank 0 at MASTER_ADDR:MASTER_PORT across the hosts, through the host routes
    the agents keep from the server's rank_routes (seen in each host's routing table while the
    gang runs), and rank 0 sees the connection come from rank 1's address;
  - when the gang has ended, its routes and the ranks' namespaces are gone from both hosts.
The workload is tests/e2e/gang_rank.py (the env:// rendezvous over plain TCP, no torch).

Not here yet (docs/distributed.md, "Gangs over several nodes"): the coordinated checkpoint on the
agents, a rank's move and a lost node's recovery of a running DDP gang.

Usage: gang_test.py PALADIN
"""
import os
import shutil
import subprocess
import sys
import time

os.environ.setdefault("PALADIN_HOSTS_SLOT", "7")  # names of its own beside hosts_test's drills
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crash_test  # noqa: E402
import hosts_test  # noqa: E402
from crash_test import Fleet, fail, failures, ok, wait_for  # noqa: E402


def host_routes(hosts, node):
    out = subprocess.run(hosts.prefix(node) + ["ip", "-4", "route", "show"], capture_output=True,
                         text=True).stdout
    return out


def host_netns(hosts, node):
    return subprocess.run(hosts.prefix(node) + ["ip", "netns", "list"], capture_output=True,
                          text=True).stdout


def log(fleet, job):
    return fleet.get(f"/v1/jobs/{job}/logs?stream=stdout")["text"]


def drill(work):
    hosts = hosts_test.SeparateHosts(work, "gang")
    fleet = None
    try:
        fleet = Fleet(work, "gang", hosts=hosts)
        script = os.path.join(work, "bin", "gang_rank.py")
        answer = fleet.post("/v1/jobs", {
            "name": "gang", "team": "crash", "gpu_mem": "1GiB", "gpus": 1,
            "command": ["python3", script], "ranks": 2, "ranks_per_node": 1,
            "env": {"GANG_RANK_LINGER_S": "6"}})
        ranks = answer["gang_jobs"]
        if len(ranks) != 2 or answer["id"] != ranks[0]:
            fail(f"gang: the answer names ranks {ranks}, id {answer['id']}")
            return
        wait_for("both ranks running", lambda: all(
            fleet.job(r)["state"] in ("running", "succeeded") for r in ranks), 60, 0.2)
        jobs = [fleet.job(r) for r in ranks]
        nodes = [j["node"] for j in jobs]
        addresses = [j["gang"]["address"] for j in jobs]
        if nodes[0] == nodes[1]:
            fail(f"gang: both ranks on {nodes[0]} with one rank per node")
        else:
            ok(f"gang: rank 0 on {nodes[0]} ({addresses[0]}), rank 1 on {nodes[1]} "
               f"({addresses[1]}), placed together")
        # Each node routes the other node's rank to that node's address.
        for mine, other in ((0, 1), (1, 0)):
            want = f"{addresses[other]} via {hosts_test.ADDRESSES[nodes[other]]}"
            try:
                wait_for(f"{nodes[mine]}'s route to rank {other}",
                         lambda: want in host_routes(hosts, nodes[mine]), 15, 0.2)
                ok(f"gang: {nodes[mine]} routes {want}")
            except TimeoutError:
                fail(f"gang: {nodes[mine]} has no route '{want}':\n"
                     f"{host_routes(hosts, nodes[mine])}")
        wait_for("both ranks to end", lambda: all(
            crash_test_ended(fleet.job(r)["state"]) for r in ranks), 120, 0.5)
        states = [fleet.job(r)["state"] for r in ranks]
        out = [log(fleet, r) for r in ranks]
        if states != ["succeeded", "succeeded"]:
            fail(f"gang: the ranks ended {states}; logs: {out}")
            return
        expect = [f"rank 0 of 2 src {addresses[0]} ifname pal0",
                  f"rank 0 saw rank 1 from {addresses[1]}"]
        if all(e in out[0] for e in expect):
            ok(f"gang: rank 0 left from {addresses[0]} and saw rank 1 come from {addresses[1]}")
        else:
            fail(f"gang: rank 0's log lacks {expect}: {out[0]!r}")
        expect = [f"rank 1 of 2 src {addresses[1]} ifname pal0",
                  f"rank 1 was seen from {addresses[1]}"]
        if all(e in out[1] for e in expect):
            ok(f"gang: rank 1 reached MASTER_ADDR {addresses[0]} across the hosts")
        else:
            fail(f"gang: rank 1's log lacks {expect}: {out[1]!r}")
        # The gang has ended: its routes and the ranks' namespaces go.
        for node in set(nodes):
            try:
                wait_for(f"{node} without the gang's routes", lambda: not any(
                    a + " via" in host_routes(hosts, node) for a in addresses), 15, 0.2)
                wait_for(f"{node} without the ranks' namespaces", lambda: not any(
                    r in host_netns(hosts, node) for r in ranks), 15, 0.2)
                ok(f"gang: {node} kept no route and no namespace of the ended gang")
            except TimeoutError:
                fail(f"gang: {node} still has routes\n{host_routes(hosts, node)}\n"
                     f"or namespaces\n{host_netns(hosts, node)}")
    except TimeoutError as e:
        fail(f"gang: {e}")
    finally:
        if fleet:
            if failures:
                for name in ("server", "agent-node-a", "agent-node-b"):
                    path = os.path.join(fleet.dir, name + ".log")
                    if os.path.exists(path):
                        with open(path, errors="replace") as f:
                            print(f"--- {name} (last 40 lines)\n" + "".join(f.readlines()[-40:]))
            fleet.stop()
        hosts.close()


def crash_test_ended(state):
    return state in ("succeeded", "failed", "cancelled")


def main():
    if os.geteuid() != 0:
        print("SKIP: separate hosts need root (network and mount namespaces)")
        return 77
    for tool in ("ip", "nsenter", "unshare"):
        if not shutil.which(tool):
            print(f"SKIP: no '{tool}' on this machine (needed to make the hosts)")
            return 77
    hosts_test.clean_network(hosts_test.SLOT)
    work = crash_test.work_folder("gang", under="/var/tmp")
    hosts_test.stage_programs(work)
    shutil.copy2(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gang_rank.py"),
                 os.path.join(work, "bin", "gang_rank.py"))
    os.chmod(os.path.join(work, "bin", "gang_rank.py"), 0o644)
    began = time.time()
    try:
        try:
            drill(work)
        except TimeoutError as e:
            fail(f"gang: {e}")
    finally:
        hosts_test.clean_network(hosts_test.SLOT)
    print(f"gang_test: {len(failures)} failure(s) in {time.time() - began:.0f} s")
    if not failures:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
