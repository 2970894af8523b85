"""SLURM checkpoint and resume against a step whose workload is gone and whose pid another
process (another user's) now has, and restores of an image of another uid; run as root by
slurm_stale_pid_test.sh with the agent's socket and a scratch folder.

The attack: a user's step registers and starts; the user checkpoints it left stopped (legitimate),
then SIGSTOPs their own shim so that it never says `done`, lets the workload die, and the
workload's pid goes to another user's process; `checkpoint` and `resume` of the step must not
touch that process. A step's shim runs as nobody under a fake `slurmstepd: [JOB.STEP]` (a root
process of that name: what the agent looks for among the caller's ancestors)."""
import json
import os
import signal
import subprocess
import sys
import time

import agent_socket

SOCK = sys.argv[2]
TMP = sys.argv[3] if sys.argv[1] == "main" else ""
tried = refused = failures = 0


def fail(why):
    global failures
    failures += 1
    print("FAIL: " + why, file=sys.stderr, flush=True)


# One request on the socket; as `uid` through a setpriv'd python when given.
call = agent_socket.caller(SOCK, __file__, timeout=120, as_timeout=180)


def state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "-"


class Shim:
    """A step's shim as nobody under a fake slurmstepd of JOB.STEP; speaks over stdin/stdout."""

    def __init__(self, job, step, restarts=0):
        self.key = f"{job}.{step}"
        inner = (f"setpriv --reuid=nobody --regid=nogroup --clear-groups /usr/bin/python3 "
                 f"{__file__} shim {SOCK} {job} {step} {restarts}; true")
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec -a "slurmstepd: [{self.key}]" bash -c "{inner}"'],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def line(self):
        return json.loads(self.proc.stdout.readline())

    def tell(self, what):
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return self.line()

    def pid(self):
        """The shim's own pid (the fake slurmstepd's child)."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
        return int(out.stdout.split()[0])


def shim_main(job, step, restarts):
    """The shim itself (as nobody): register, run the workload, report it, obey stdin."""
    answer = call({"op": "register", "job": int(job), "step": step, "gpu_mem": 1 << 20,
                   "restart_count": int(restarts)})
    print(json.dumps(answer), flush=True)
    if restarts != "0":  # only the registration matters
        time.sleep(600)
    workload = subprocess.Popen(["sleep", "600"], start_new_session=True)
    print(json.dumps({"pid": workload.pid}), flush=True)
    for cmd in sys.stdin:
        verb, _, arg = cmd.strip().partition(" ")
        if verb == "started":
            print(json.dumps(call({"op": "started", "key": f"{job}.{step}", "run_dir": arg})),
                  flush=True)
        elif verb == "kill":
            workload.kill()
            workload.wait()
            print(json.dumps({"reaped": workload.pid}), flush=True)


def take_pid(pid, argv):
    """Starts argv with exactly `pid` (the host's last pid set just below it), or None."""
    for _ in range(200):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        p = subprocess.Popen(argv)
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
    return None


def expect_refused(what, answer, victim=None, victim_state=None, words=()):
    global tried, refused
    tried += 1
    err = answer.get("error", "")
    ok = answer.get("ok") is False and err and all(w in err for w in words)
    if victim is not None and state(victim.pid) != victim_state:
        ok = False
        fail(f"{what}: the other user's process is in state {state(victim.pid)}, "
             f"not {victim_state}")
    if ok:
        refused += 1
        print(f"refused: {what}: {err[:200]}", flush=True)
    else:
        fail(f"{what}: not refused as expected: {json.dumps(answer)[:400]}")


def main():
    # Step 901.0 of nobody: registered, started, checkpointed left stopped by its own user.
    shim = Shim(901, "0")
    reg = shim.line()
    if not reg.get("ok"):
        fail(f"nobody's register of 901.0: {reg}")
        return
    workload = shim.line()["pid"]
    run_dir = os.path.join(TMP, "run901")
    os.makedirs(run_dir, mode=0o755)
    record = {"name": "slurm-901.0", "command": ["sleep", "600"], "cwd": "/", "run_dir": run_dir,
              "pid": workload, "pid_namespace": False, "cgroup": "", "stdout_log": "",
              "stderr_log": "", "state": "running", "image": "", "gpu": "", "region": "",
              "emu_state": "", "emu_gpus": ""}
    with open(os.path.join(run_dir, "job.json"), "w") as f:
        json.dump(record, f)
    answer = shim.tell("started " + run_dir)
    if not answer.get("ok"):
        fail(f"started of 901.0: {answer}")
        return
    answer = call({"op": "checkpoint", "job": 901, "leave": "stopped"}, uid=65534)
    if not answer.get("ok") or state(workload) != "T":
        fail(f"the step's own checkpoint (left stopped) failed: {json.dumps(answer)[:600]}")
        return
    image = answer["steps"][0]["image"]
    print(f"901.0 checkpointed into {image}, pid {workload} left stopped", flush=True)

    # The user stops the shim (no `done` ever), the workload dies, another user's process gets
    # its pid.
    shim.tell("kill")
    shim_pid = shim.pid()
    os.kill(shim_pid, signal.SIGSTOP)
    victim = take_pid(workload, ["setpriv", "--reuid=40123", "--regid=40123", "--clear-groups",
                                 "setsid", "sleep", "600"])
    if victim is None:
        fail(f"could not give pid {workload} to another process")
        return
    time.sleep(0.3)  # setpriv has exec'd sleep
    print(f"pid {workload} now belongs to uid 40123's sleep (state {state(victim.pid)})",
          flush=True)

    expect_refused("checkpoint --leave stopped of a step whose pid another user's process has",
                   call({"op": "checkpoint", "job": 901, "leave": "stopped"}, uid=65534),
                   victim, "S", ("901.0", "gone"))
    expect_refused("checkpoint (left running) of that step, as root",
                   call({"op": "checkpoint", "job": 901, "leave": "running"}),
                   victim, "S", ("901.0", "gone"))
    os.kill(victim.pid, signal.SIGSTOP)  # its owner stops it: a resume must not continue it
    time.sleep(0.1)
    expect_refused("resume of that step (would SIGCONT the other user's process)",
                   call({"op": "resume", "job": 901}, uid=65534), victim, "T", ("901.0", "gone"))
    expect_refused("resume of that step, as root", call({"op": "resume", "job": 901}),
                   victim, "T", ("901.0", "gone"))
    images = sorted(os.listdir(os.path.dirname(image)))
    if images != [os.path.basename(image)]:
        fail(f"the step's checkpoints changed: {images}")

    # The shim goes: nothing of the step may be touched any more, whatever has its pid.
    os.kill(shim_pid, signal.SIGKILL)
    shim.proc.wait()
    expect_refused("checkpoint of a step whose shim is gone",
                   call({"op": "checkpoint", "job": 901, "leave": "stopped"}, uid=65534),
                   victim, "T")
    victim.kill()
    victim.wait()

    # Restores: the image holds nobody's processes. Root's step 902.0 offered it is refused; the
    # same image for nobody's own step 901.0 (requeued) is offered.
    dir902 = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(image))), "902", "0")
    os.makedirs(dir902)
    subprocess.run(["cp", "-a", image, dir902], check=True)
    holder = subprocess.Popen(["/usr/bin/python3", __file__, "hold", SOCK, "902", "0"],
                              stdout=subprocess.PIPE, text=True)
    answer = json.loads(holder.stdout.readline())
    expect_refused("root's step restoring an image of uid 65534", answer, words=("uid 65534",))
    holder.kill()
    holder.wait()
    again = Shim(901, "0", restarts=1)
    answer = again.line()
    if not answer.get("ok") or answer.get("image") != image:
        fail(f"nobody's requeued 901.0 was not offered its own image: {answer}")
    else:
        print("nobody's requeued 901.0 is offered its own image", flush=True)
    subprocess.run(["pkill", "-KILL", "-P", str(again.proc.pid)])
    again.proc.kill()
    again.proc.wait()


if __name__ == "__main__":
    if sys.argv[1] == "call":
        print(json.dumps(call(json.loads(sys.argv[3]))), flush=True)
    elif sys.argv[1] == "shim":
        shim_main(*sys.argv[3:6])
    elif sys.argv[1] == "hold":  # root's shim: registers as a restart and stays
        print(json.dumps(call({"op": "register", "job": int(sys.argv[3]), "step": sys.argv[4],
                               "gpu_mem": 1 << 20, "restart_count": 1})), flush=True)
        time.sleep(600)
    elif sys.argv[1] == "main":
        main()
        print(f"security: slurm stale pid: tried {tried}, refused {refused}", flush=True)
        sys.exit(1 if failures else 0)
