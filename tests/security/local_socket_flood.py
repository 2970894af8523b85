"""Idle connections against the agent's local socket (run as root by local_socket_flood_test.sh
with the socket, the server's URL and an admin token): one uid's idle connections past its cap
are refused at once; nine uids together fill the cap of all non-root callers; meanwhile root and
other uids are served and the agent keeps heartbeating; once the idle ones close, all is served
again. Before the cap, each connection held a thread of the agent for 10 s, without bound."""
import json
import socket
import subprocess
import sys
import time
import urllib.request

import agent_socket

MODE, SOCK = sys.argv[1], sys.argv[2]
tried = refused = failures = 0


def fail(why):
    global failures
    failures += 1
    print("FAIL: " + why, file=sys.stderr, flush=True)


call = agent_socket.caller(SOCK, __file__, timeout=30, as_timeout=60)


def flood(count):
    """(As the caller's uid) opens `count` idle connections; prints how many were held open and
    the refusals; keeps them open until stdin closes."""
    held, refusals = [], []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(SOCK)  # blocking: waits while the agent's backlog is full, as CallLocal does
        held.append(s)
    time.sleep(0.5)  # every refusal is sent at accept
    kept = []
    for s in held:
        s.setblocking(False)
        try:
            data = s.recv(65536)
        except BlockingIOError:
            kept.append(s)
            continue
        refusals.append(json.loads(data.decode()) if data else {"closed": True})
        s.close()
    print(json.dumps({"held": len(kept), "refusals": refusals}), flush=True)
    sys.stdin.read()


def spawn_flood(uid, count):
    return subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                             "/usr/bin/python3", __file__, "flood", SOCK, str(count)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def start_flood(uid, count):
    p = spawn_flood(uid, count)
    return p, json.loads(p.stdout.readline())


def last_heartbeat(url, token):
    """node-a's last heartbeat as the server saw it; waits up to 30 s for the agent's first one
    (its local socket opens before it has registered with the server)."""
    req = urllib.request.Request(url + "/v1/nodes", headers={"Authorization": "Bearer " + token})
    for _ in range(300):
        nodes = json.loads(urllib.request.urlopen(req, timeout=10).read())["nodes"]
        beats = [n.get("last_heartbeat") for n in nodes if n["name"] == "node-a"]
        if beats:
            return beats[0]
        time.sleep(0.1)
    raise SystemExit("FAIL: node-a never registered with the server")


def served(what, answer):
    if answer.get("ok") is not True:
        fail(f"{what}: not served: {answer}")
    else:
        print(f"served: {what}", flush=True)


def count_refusals(what, result, expect_held, expect_refused, words):
    global tried, refused
    tried += expect_refused
    good = [r for r in result["refusals"]
            if r.get("ok") is False and all(w in r.get("error", "") for w in words)]
    refused += min(len(good), expect_refused)
    if result["held"] != expect_held or len(good) != expect_refused:
        fail(f"{what}: {result['held']} held open (expected {expect_held}), {len(good)} refused "
             f"with {words} (expected {expect_refused}): {result['refusals'][:3]}")
    else:
        print(f"{what}: {expect_held} held, {expect_refused} refused at once: "
              f"{good[0]['error'] if good else ''}", flush=True)


def main(url, token):
    global tried, refused
    beat0 = last_heartbeat(url, token)
    started = time.monotonic()
    # One uid: 4 held, the rest refused at once (before: 500 threads, each for 10 s).
    one, result = start_flood(65534, 500)
    count_refusals("500 idle connections of uid 65534", result, 4, 496, ("at most 4",))
    served("root's steps during the flood", call({"op": "steps"}))
    served("uid 40200's steps during the flood", call({"op": "steps"}, uid=40200))
    # Eight more uids, four each: 32 calls of non-root uids at most; root still served.
    spawned = [spawn_flood(40300 + i, 4) for i in range(8)]
    others = [(p, json.loads(p.stdout.readline())) for p in spawned]
    held = sum(r["held"] for _, r in others)
    extra = [x for _, r in others for x in r["refusals"]]
    tried += 4
    good = [x for x in extra if x.get("ok") is False and "at most 32" in x.get("error", "")]
    refused += min(len(good), 4)
    if held != 28 or len(good) != 4:
        fail(f"eight more uids: {held} held (expected 28), {len(good)} refused by the cap of "
             f"all (expected 4): {extra[:3]}")
    else:
        print(f"eight more uids: 28 held, 4 refused at once: {good[0]['error']}", flush=True)
    served("root's steps with every non-root slot taken", call({"op": "steps"}))
    elapsed = time.monotonic() - started
    if elapsed > 9:
        fail(f"the checks took {elapsed:.1f} s: the idle connections may have timed out already")
    # The idle ones close; all is served again, and the agent kept heartbeating.
    for p, _ in [(one, None)] + others:
        p.stdin.close()
        p.wait()
    time.sleep(0.5)
    served("uid 65534's steps after its idle connections closed", call({"op": "steps"}, uid=65534))
    served("uid 40300's steps after", call({"op": "steps"}, uid=40300))
    time.sleep(2)
    beat1 = last_heartbeat(url, token)
    if beat1 == beat0:
        fail(f"the agent's heartbeat stopped: last_heartbeat still {beat1}")
    else:
        print(f"the agent kept heartbeating: {beat0} -> {beat1}", flush=True)


if __name__ == "__main__":
    if MODE == "call":
        print(json.dumps(call(json.loads(sys.argv[3]))), flush=True)
    elif MODE == "flood":
        flood(int(sys.argv[3]))
    elif MODE == "main":
        main(sys.argv[3], sys.argv[4])
        print(f"security: local socket flood: tried {tried}, refused {refused}", flush=True)
        sys.exit(1 if failures else 0)
