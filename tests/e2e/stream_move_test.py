#!/usr/bin/env python3
"""Fleet moves streamed (label e2e): a real server (--move-mode pre-copy) and two agents on one
host, real CRIU.

A pre-copy fleet move between agents that both stream (every checkpointable agent registers
`stream`) dumps the job's memory straight into a page server the destination's agent starts for
the move, through the page relays (every frame sealed), kept on tmpfs there; the rest of the
image goes by the transfer, and the transaction is a pre-copy move's: the source stays stopped
until the server commits (docs/lazy_migration.md, "Fleet moves", "Streaming pre-copy").

The workload and the checks are postcopy_test.py's: tests/ckpt/lazy_mem.py holding 128 MiB of
distinct pages, every copy sampled every 100 ms (never two running at once, one at the end), the
file replayed by `lazy_mem.py check`.

The drills, each on a fresh server and two agents:
  1. move: the job moved by `POST /v1/jobs/ID/migrate`; the move's event and the job's last_move
     say `stream`; the destination's agent kept the pages in memory; the file verified with no
     rewind. Then a GPU job (the demo workload, holding device memory) moves streamed too.
  2. dst-killed: the destination agent killed (PALADIN_MIGRATE_FAULT=crash:dst-during-stream)
     once half the job's memory has reached its page server: nothing was restored there, the
     move fails and the job resumes at its source (one copy, the file verified with no rewind:
     the job went on from where it stopped). What the dead agent's move left on its host (the
     incoming folder, the pages on /dev/shm) is gone once its successor
     has started.
  3. refused: the destination's page port (its migrate port + 2) taken by another program, so
     its agent cannot start its page relay and answers PAGE-SERVER with ERR: the
     source, nothing stopped yet, moves by image instead; the job runs at the destination, its
     file verified with no rewind, one copy throughout, and the event and last_move say
     `pre-copy` with "streaming refused".

Usage: stream_move_test.py PALADIN
Environment: PALADIN_STREAM_ONLY=move|dst-killed|refused runs one drill.
"""
import glob
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crash_test  # noqa: E402
import fence_test  # noqa: E402
import postcopy_test as pc  # noqa: E402
from crash_test import Fleet, fail, ok, tagged_processes, wait_for  # noqa: E402

PRE_COPY = ["--move-mode", "pre-copy"]


def shm_pages():
    """The streamed page folders on this host's /dev/shm."""
    return set(glob.glob("/dev/shm/paladin-pages.*"))


def streamed_event(fleet, job_id, what):
    """The move's cost event; fails unless it says stream. Returns the pause it says."""
    said = [m for m in pc.move_events(fleet, job_id) if "paused" in m]
    if not said or "; stream (" not in said[-1]:
        fail(f"{what}: the move's event does not say stream: {pc.move_events(fleet, job_id)}")
        return None
    pause = float(re.search(r"paused ([0-9.]+) s", said[-1]).group(1))
    ok(f"{what}: the event says stream, pause {pause:.2f} s")
    return pause


def move_drill(work):
    what = "streamed move"
    fleet = Fleet(work, "st-move", server_args=PRE_COPY)
    tag = "stmove"
    out = os.path.join(work, "out", tag + ".log")
    sampler = None
    try:
        nodes = {n["name"]: n.get("stream") for n in fleet.get("/v1/nodes")["nodes"]}
        if not all(nodes.values()):
            fail(f"{what}: the agents did not register as streaming: {nodes}")
            return
        job_id = pc.submit_cpu_job(fleet, tag, out)
        wait_for("the CPU job running", lambda: fleet.job(job_id)["state"] == "running" and
                 os.path.exists(out) and os.path.getsize(out) > 0, 120, 0.2)
        time.sleep(2)
        to = pc.other_node(fleet, job_id)
        sampler = fence_test.Sampler(tag)
        began = time.time()
        fleet.post(f"/v1/jobs/{job_id}/migrate", {"to": to})
        wait_for(f"{what}: the job on {to}", lambda: fence_test.job_on(fleet, job_id, to), 180,
                 0.2)
        wait_for(f"{what}: the move's cost reported",
                 lambda: any("paused" in m for m in pc.move_events(fleet, job_id)), 30, 0.2)
        pc.one_copy_left(tag, what)
        time.sleep(3)  # it runs on at the destination
        sampler.finish()
        print(f"{what}: {time.time() - began:.1f} s; events: {pc.move_events(fleet, job_id)}; "
              f"{sampler.describe()}", flush=True)
        streamed_event(fleet, job_id, what)
        last = fleet.job(job_id).get("last_move") or {}
        if last.get("mode") != "stream" or last.get("pause_s") is None:
            fail(f"{what}: the job's last_move does not say stream and its pause: {last}")
        log = open(os.path.join(fleet.dir, f"agent-{to}.log"), errors="replace").read()
        if "(sealed)" not in log or "kept in memory" not in log:
            fail(f"{what}: the destination's agent did not keep the pages in memory, sealed")
        else:
            ok(f"{what}: the destination kept the streamed pages in memory, sealed")
        crash_test.check_one_copy(sampler, what)
        pc.check_file(out, False, what)
        crash_test.cancel_and_check_gone(fleet, job_id, tag)

        # A job holding GPU state streams as well: the driver's checkpoint puts its device
        # memory in its host memory, which the dump streams with the rest.
        gpu_tag = "stgpu"
        gpu_job = fleet.submit(gpu_tag)
        wait_for("the GPU job running", lambda: fleet.job(gpu_job)["state"] == "running", 120)
        time.sleep(2)
        to = pc.other_node(fleet, gpu_job)
        fleet.post(f"/v1/jobs/{gpu_job}/migrate", {"to": to})
        wait_for("the GPU job moved", lambda: fence_test.job_on(fleet, gpu_job, to), 180, 0.2)
        wait_for("the GPU job's move reported",
                 lambda: any("paused" in m for m in pc.move_events(fleet, gpu_job)), 30, 0.2)
        streamed_event(fleet, gpu_job, "GPU job")
        crash_test.verify_once(fleet, gpu_job, gpu_tag, "after the GPU job's streamed move")
        crash_test.cancel_and_check_gone(fleet, gpu_job, gpu_tag)
    except (TimeoutError, urllib.error.URLError, subprocess.TimeoutExpired) as e:
        fail(f"{what}: {e}; copies {tagged_processes(tag)}")
    finally:
        if sampler is not None and not sampler.stop:
            sampler.finish()
        fleet.stop()


def dst_killed_drill(work):
    what = "streamed move, destination agent killed mid-stream"
    tag = "stkill"
    out = os.path.join(work, "out", tag + ".log")
    fleet, envs = pc.fleet_with_own_tmp(work, "st-kill", {"node-b": "crash:dst-during-stream"},
                                        PRE_COPY)
    sampler = None
    try:
        shm_before = shm_pages()
        job_id = pc.cpu_job_on_node_a(fleet, tag, out)
        time.sleep(2)
        sampler = fence_test.Sampler(tag)
        began = time.time()
        died = pc.move_losing_destination(fleet, job_id, tag, what)
        if died is None:
            return
        pc.one_copy_left(tag, what)
        left = pc.move_leftovers(fleet, "node-b", envs["node-b"]) + sorted(
            shm_pages() - shm_before)
        fleet.start_agent("node-b", env=envs["node-b"])
        pc.one_copy_left(tag, what)
        still = pc.move_leftovers(fleet, "node-b", envs["node-b"]) + sorted(
            shm_pages() - shm_before)
        pc.check_leftovers_removed(what, left, still)
        time.sleep(3)
        sampler.finish()
        messages = pc.move_events(fleet, job_id)
        print(f"{what}: the agent died {died:.1f} s into the move; "
              f"{time.time() - began:.1f} s in all; events: {messages}; {sampler.describe()}",
              flush=True)
        crash_test.check_one_copy(sampler, what)
        log = open(os.path.join(fleet.dir, "agent-node-a.log"), errors="replace").read()
        if "migrate_out" not in log or ": stream (" not in log:
            fail(f"{what}: the source did not stream the move")
        dst_log = open(os.path.join(fleet.dir, "agent-node-b.log"), errors="replace").read()
        if "fault injected: half the memory has arrived" not in dst_log:
            fail(f"{what}: the destination's agent did not die mid-stream (no fault injected)")
        if not any("migration_failed" in e["kind"] for e in fleet.get(
                f"/v1/events?job={job_id}")["events"]):
            fail(f"{what}: no migration_failed event: {messages}")
        pc.check_file(out, False, what)
        crash_test.cancel_and_check_gone(fleet, job_id, tag)
    except (TimeoutError, urllib.error.URLError, subprocess.TimeoutExpired) as e:
        fail(f"{what}: {e}; copies {tagged_processes(tag)}")
    finally:
        if sampler is not None and not sampler.stop:
            sampler.finish()
        fleet.stop()


def refused_drill(work):
    what = "streaming refused by the destination"
    fleet = Fleet(work, "st-refused", server_args=PRE_COPY)
    tag = "stref"
    out = os.path.join(work, "out", tag + ".log")
    sampler = None
    squatter = socket.socket()
    try:
        job_id = pc.cpu_job_on_node_a(fleet, tag, out)
        port = [n for n in fleet.get("/v1/nodes")["nodes"] if n["name"] == "node-b"][0][
            "migrate_port"]
        squatter.bind(("0.0.0.0", port + 2))
        squatter.listen(1)
        time.sleep(2)
        sampler = fence_test.Sampler(tag)
        pc.move_to_node_b(fleet, job_id, what)
        pc.one_copy_left(tag, what)
        time.sleep(2)
        sampler.finish()
        said = [m for m in pc.move_events(fleet, job_id) if "paused" in m]
        print(f"{what}: events: {pc.move_events(fleet, job_id)}; {sampler.describe()}",
              flush=True)
        if not said or "; pre-copy (" not in said[-1] or "streaming refused" not in said[-1]:
            fail(f"{what}: the event does not say it moved by image, streaming refused: {said}")
        else:
            ok(f"{what}: {said[-1]}")
        last = fleet.job(job_id).get("last_move") or {}
        if last.get("mode") != "pre-copy":
            fail(f"{what}: the job's last_move does not say pre-copy: {last}")
        crash_test.check_one_copy(sampler, what)
        pc.check_file(out, False, what)
        crash_test.cancel_and_check_gone(fleet, job_id, tag)
    except (TimeoutError, urllib.error.URLError, subprocess.TimeoutExpired, OSError) as e:
        fail(f"{what}: {e}; copies {tagged_processes(tag)}")
    finally:
        squatter.close()
        if sampler is not None and not sampler.stop:
            sampler.finish()
        fleet.stop()


def main():
    if os.geteuid() != 0:
        print("SKIP: the fleet end to end needs root (PID namespaces, cgroups, CRIU)")
        return 77
    work = pc.lazy_mem_work("stream")
    only = os.environ.get("PALADIN_STREAM_ONLY", "")
    try:
        if only in ("", "move"):
            move_drill(work)
        if only in ("", "dst-killed"):
            dst_killed_drill(work)
        if only in ("", "refused"):
            refused_drill(work)
    finally:
        crash_test.kill_tagged("stmove", "stgpu", "stkill", "stref")
        crash_test.remove_work(work, "stream_move_test")
    return crash_test.summary("stream_move_test")


if __name__ == "__main__":
    sys.exit(main())
