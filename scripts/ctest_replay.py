#!/usr/bin/env python3
"""Replays ctest's parallel scheduling over the per-test times of an earlier run, to weigh a -j
level, COST values or resource layout without running the suite.

  ctest --preset debug --show-only=json-v1 > tests.json
  scripts/ctest_replay.py tests.json CTEST_LOG 3,4,5

CTEST_LOG is ctest's output of a whole run ("Test #N: NAME ....   Passed   T sec" lines). The
rules are ctest's (CMake 3.25): tests start in order of COST, highest first, then in order of
definition; at each start or end every waiting test that fits starts: its PROCESSORS (at most
-j) within the free ones, its DEPENDS finished, none of its RESOURCE_LOCKs held, its
RESOURCE_GROUPS slots free (tests/resources.json: `mounts`, 16 slots). Each test takes the time
it took in the log, so a -j level other than the log's is an estimate: it ignores that tests run
slower when more of them share the cores.
"""
import heapq
import json
import re
import sys

MOUNTS_SLOTS = 16


def load(tests_json, log):
    times = {}
    with open(log) as f:
        for line in f:
            m = re.search(r"Test +#\d+: (.+?) \.{3,}.*?([0-9.]+) sec", line)
            if m:
                times[m.group(1).strip()] = float(m.group(2))
    tests = []
    with open(tests_json) as f:
        listed = json.load(f)["tests"]
    for i, t in enumerate(listed):
        p = {q["name"]: q["value"] for q in t.get("properties", [])}
        slots = sum(r["slots"] for g in p.get("RESOURCE_GROUPS", []) for r in g["requirements"])
        tests.append({"name": t["name"], "index": i, "time": times.get(t["name"], 0.0),
                      "cost": p.get("COST", 0.0), "procs": int(p.get("PROCESSORS", 1)),
                      "locks": set(p.get("RESOURCE_LOCK", [])), "slots": slots,
                      "deps": set(p.get("DEPENDS", []))})
    return tests


def replay(tests, jobs):
    """The run's end in seconds, and each test's start."""
    waiting = sorted(tests, key=lambda t: (-t["cost"], t["index"]))
    running, done, start = [], set(), {}
    now, free, slots, locks = 0.0, jobs, MOUNTS_SLOTS, set()
    while waiting or running:
        for t in list(waiting):
            procs = min(t["procs"], jobs)
            if free <= 0:
                break
            if (procs > free or not t["deps"] <= done or t["locks"] & locks
                    or t["slots"] > slots):
                continue
            waiting.remove(t)
            free, slots, locks = free - procs, slots - t["slots"], locks | t["locks"]
            start[t["name"]] = now
            heapq.heappush(running, (now + t["time"], t["index"], t))
        now, _, t = heapq.heappop(running)
        done.add(t["name"])
        free, slots, locks = free + min(t["procs"], jobs), slots + t["slots"], locks - t["locks"]
    return now, start


def main():
    tests = load(sys.argv[1], sys.argv[2])
    total = sum(t["time"] for t in tests)
    for jobs in (int(j) for j in sys.argv[3].split(",")):
        end, start = replay([dict(t) for t in tests], jobs)
        writers = [t for t in tests if t["slots"] >= MOUNTS_SLOTS]
        writers_end = max((start[t["name"]] + t["time"] for t in writers), default=0.0)
        print(f"-j{jobs}: {end:.0f} s (tests' times add up to {total:.0f} s; the tests that "
              f"take all of `mounts` end at {writers_end:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
