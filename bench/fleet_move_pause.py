#!/usr/bin/env python3
"""The pause of a fleet move streamed against one by image, and a plain copy, in one run: a real
server and two agents on this machine (tests/e2e's Fleet), a tests/ckpt/lazy_mem.py job of SIZE
MiB moved node-a -> node-b by `POST /v1/jobs/ID/migrate`, once with the server's --move-mode
pre-copy (streamed: both agents stream) and once with --move-mode image, each a fresh fleet. The
pause is the source agent's (from stopping the job to its resuming at the destination, the
server's commit included), read from the move's `migrated` event; each moved job's file is
verified (`lazy_mem.py check`). The plain copy is bench/plain_copy.py (SIZE MiB between two
processes' memory over loopback TCP). Root; CRIU from scripts/criu.sh.

  python3 bench/fleet_move_pause.py PALADIN [SIZE_MIB...]     (default sizes: 256 1024)
"""
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
import crash_test  # noqa: E402  (reads PALADIN from sys.argv[1])
import fence_test  # noqa: E402
import postcopy_test as pc  # noqa: E402
from crash_test import Fleet, run_tag, wait_for  # noqa: E402


def move_once(work, mode, mib):
    """Moves a SIZE MiB job node-a -> node-b on a fresh fleet with --move-mode MODE; returns
    (pause_s, the event, what lazy_mem.py check said)."""
    name = f"{mode}-{mib}"
    tag = f"fm{mode[:3]}{mib}"
    out = os.path.join(work, "out", tag + ".log")
    fleet = Fleet(work, name, server_args=["--move-mode", mode])
    try:
        job_id = fleet.post("/v1/jobs", {
            "name": tag, "team": "crash", "gpu_mem": "1GiB", "gpus": 1,
            "command": ["python3", os.path.join(pc.work_bin, "lazy_mem.py"), "run", str(mib), out,
                        "0.05", "--tag", run_tag(tag)]})["id"]
        wait_for("the job running", lambda: fleet.job(job_id)["state"] == "running" and
                 os.path.exists(out) and os.path.getsize(out) > 0, 300, 0.2)
        if fleet.job(job_id)["node"] != "node-a":
            fleet.post(f"/v1/jobs/{job_id}/migrate", {"to": "node-a"})
            wait_for("the job on node-a", lambda: fence_test.job_on(fleet, job_id, "node-a")
                     and any("paused" in m for m in pc.move_events(fleet, job_id)), 300, 0.2)
        moves = len([m for m in pc.move_events(fleet, job_id) if "paused" in m])
        time.sleep(2)
        fleet.post(f"/v1/jobs/{job_id}/migrate", {"to": "node-b"})
        wait_for("the move reported", lambda: len(
            [m for m in pc.move_events(fleet, job_id) if "paused" in m]) > moves, 300, 0.2)
        said = [m for m in pc.move_events(fleet, job_id) if "paused" in m][-1]
        time.sleep(2)
        check = subprocess.run(["python3", pc.LAZY_MEM, "check", str(mib), out],
                               capture_output=True, text=True)
        fleet.post(f"/v1/jobs/{job_id}/cancel", {})
        pause = float(re.search(r"paused ([0-9.]+) s", said).group(1))
        verdict = check.stdout.strip() if check.returncode == 0 else "NOT VERIFIED: " + (
            check.stdout + check.stderr).strip()
        return pause, said, verdict
    finally:
        fleet.stop()
        crash_test.kill_tagged(tag)


def main():
    if os.geteuid() != 0:
        print("needs root (the fleet's agents run CRIU)")
        return 2
    sizes = [int(s) for s in sys.argv[2:]] or [256, 1024]
    work = crash_test.work_folder("fleet-move-pause")
    pc.work_bin = os.path.join(work, "bin")
    shutil.copy(pc.LAZY_MEM, os.path.join(pc.work_bin, "lazy_mem.py"))
    os.chmod(os.path.join(pc.work_bin, "lazy_mem.py"), 0o755)
    os.makedirs(os.path.join(work, "out"))
    os.chmod(os.path.join(work, "out"), 0o1777)
    print(f"load average before: {os.getloadavg()}", flush=True)
    try:
        for mib in sizes:
            copy = float(subprocess.run(["python3", os.path.join(HERE, "plain_copy.py"),
                                         str(mib)], capture_output=True, text=True,
                                        check=True).stdout.split()[0])
            print(f"{mib:>5} MiB  plain copy   {copy:6.2f} s", flush=True)
            pauses = {}
            for mode in ("pre-copy", "image"):
                pause, said, verdict = move_once(work, mode, mib)
                pauses[mode] = pause
                print(f"{mib:>5} MiB  {mode:<11} {pause:6.2f} s  {said}; {verdict}", flush=True)
            print(f"{mib:>5} MiB  ratios: stream pause / image pause "
                  f"{pauses['pre-copy'] / pauses['image']:.2f}x, stream pause / plain copy "
                  f"{pauses['pre-copy'] / copy:.1f}x, image pause / plain copy "
                  f"{pauses['image'] / copy:.1f}x", flush=True)
    finally:
        crash_test.remove_work(work, "fleet_move_pause")
    print(f"load average after: {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
