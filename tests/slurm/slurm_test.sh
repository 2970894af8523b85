#!/usr/bin/env bash
# Paladin inside a real SLURM (munged, slurmctld and slurmd on 127.0.0.1, Debian's packages) with
# paladin_spank.so in the plugin stack, a Paladin server and agent with one emulated 4 GiB GPU,
# and real CRIU:
#   1. a batch job under --paladin-gpu-mem that counts and verifies its GPU and host memory is
#      checkpointed and requeued (`paladin slurm requeue`); its next start continues from the
#      checkpoint, not from zero, with its state verified; SLURM still manages it (it runs inside
#      the job's step, scontrol reports it running, scancel ends it);
#   2. two jobs share the GPU under quotas; the one that asks past its quota is refused, with a
#      clear error in its SLURM output, and the other is untouched;
#   3. with the agent down the step runs without Paladin and a warning (on_agent_down=run, the
#      default), or fails with a clear message (--paladin-on-agent-down=fail).
# Stops everything it started.
#
#   slurm_test.sh PALADIN PALADIN_SPANK_SO DEMO_WORKLOAD
set -u
PALADIN=$(realpath "$1")
SPANK=$(realpath "$2")
WORKLOAD=$(realpath "$3")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cli/testlib.sh"
source "$HERE/cluster.sh"
if ((EUID != 0)); then
  echo "SKIP: SLURM's daemons and CRIU need root"
  exit 77
fi
for tool in slurmctld slurmd munged sbatch scontrol; do
  if ! command -v "$tool" >/dev/null; then
    echo "FAIL: $tool is missing (scripts/deps.sh --tests installs SLURM and MUNGE)"
    exit 1
  fi
done
for fd in $(ls /proc/$$/fd); do ((fd > 2 && fd != 255)) && eval "exec $fd>&-"; done

work=$(mktemp -d /tmp/paladin-slurm.XXXXXX)
chmod 755 "$work"
server_pid=""
agent_pid=""
stop_agent() {
  if [[ -n $agent_pid ]]; then
    kill -TERM "$agent_pid" 2>/dev/null
    wait "$agent_pid" 2>/dev/null
    agent_pid=""
  fi
}
cleanup() {
  scancel --quiet --full "--user=root" 2>/dev/null
  slurm_stop
  stop_agent
  [[ -n $server_pid ]] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  pkill -KILL -f "$WORKLOAD --tag slurm-test" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

summary() {
  ((failures == 0)) || exit 1
  echo "slurm_test: all checks passed"
}

job_field() { scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
last_gen() { grep -o '^gen [0-9]* ok' "$1" 2>/dev/null | awk '{g = $2} END {print g + 0}'; }
show() {
  echo "--- $1"
  cat "$1" 2>/dev/null | tail -n "${2:-40}"
}

# --- Paladin: a server and an agent with one emulated GPU ---
"$PALADIN" server --listen 127.0.0.1:0 --data "$work/server" >"$work/server.log" 2>&1 &
server_pid=$!
wait_for 30 '[[ -s $work/server/server.url ]]' || {
  show "$work/server.log"
  exit 1
}
start_agent() {
  "$PALADIN" agent --server "$(cat "$work/server/server.url")" \
    --token-file "$work/server/agent.token" --name node1 --data "$work/agent" \
    --emulated-gpus 1x4GiB --migrate-port $((20000 + RANDOM % 12000)) \
    --local-socket "$work/agent.sock" --slurm-checkpoints "$work/checkpoints" \
    >>"$work/agent.log" 2>&1 &
  agent_pid=$!
  wait_for 30 '[[ -S $work/agent.sock ]]'
}
start_agent || {
  show "$work/agent.log"
  exit 1
}

# --- SLURM, with the plugin ---
if ! slurm_start "$work/slurm" \
  "required $SPANK paladin=$PALADIN socket=$work/agent.sock on_agent_down=run"; then
  fail "a single-node SLURM did not start"
  exit 1
fi
pass "SLURM runs on 127.0.0.1 with paladin_spank.so in its plugin stack"
cd "$work" || exit 1

# --- 1. checkpoint, requeue, continue ---
out1="$work/job1.out"
job1=$(sbatch --parsable --paladin-gpu-mem=1GiB -o "$out1" \
  --wrap "exec $WORKLOAD --tag slurm-test --mib 256 --host-mib 16 --every-ms 150")
if wait_for 60 '(( $(last_gen "$out1" || echo 0) >= 10 ))'; then
  pass "job $job1 runs under Paladin and verifies its memory (gen $(last_gen "$out1"))"
else
  fail "job $job1 did not reach generation 10"
  show "$out1"
  show "$work/agent.log"
fi
check_sh "grep -q 'quota 1 GiB' '$out1'" "the step got its 1 GiB GPU-memory quota"
"$PALADIN" slurm steps --socket "$work/agent.sock" | tee "$work/steps.txt"
check_sh "grep -q '^$job1.batch .* running' '$work/steps.txt'" "the agent lists the step running"

if "$PALADIN" slurm requeue "$job1" --socket "$work/agent.sock" >"$work/requeue.log" 2>&1; then
  pass "paladin slurm requeue $job1 checkpointed and requeued it"
else
  fail "paladin slurm requeue $job1 failed"
fi
cat "$work/requeue.log"
sleep 0.5
before=$(last_gen "$out1")
before=${before:-0}
echo "last generation shown before the requeue: $before"
# The requeued job starts again (SLURM holds a requeued job back briefly), restores its step.
if wait_for 240 "grep -q 'continuing step batch from its checkpoint' '$out1' && \
  grep -A100000 'its output continues below' '$out1' | grep -q '^gen [0-9]* ok'"; then
  pass "the job started again and its step was restored from the checkpoint"
else
  fail "the requeued job was not restored"
  show "$out1"
  show "$work/agent.log"
  scontrol show job "$job1"
fi
first_after=$(grep -A100000 'its output continues below' "$out1" | grep -o '^gen [0-9]* ok' |
  head -1 | awk '{print $2}')
first_after=${first_after:-0}
echo "first generation after the restore: $first_after"
check_sh "((first_after > before && first_after <= before + 3 && first_after > 10))" \
  "it continued from the checkpoint (gen $first_after after gen $before), not from zero"
check_sh "[[ '$(job_field "$job1" Restarts)' == 1 ]]" "SLURM counts one restart"
check_sh "grep -q 'SLURM restart 1 of job $job1' '$out1'" "the shim saw SLURM_RESTART_COUNT=1"
wait_for 30 '(( $(last_gen "$out1" || echo 0) >= first_after + 5 ))'
check_sh "(( $(last_gen "$out1") >= first_after + 5 ))" "the restored job runs on, verifying each generation"
check_sh "! grep -q MISMATCH '$out1'" "no memory mismatch before or after the move"
check_sh "[[ '$(job_field "$job1" JobState)' == RUNNING ]]" "scontrol show job reports it RUNNING"
# The restored workload is a descendant of the job's slurmstepd: SLURM tracks it.
wpid=$(pgrep -f "$WORKLOAD --tag slurm-test --mib 256" | head -1)
lineage=""
p=$wpid
while [[ -n $p && $p != 1 && $p != 0 ]]; do
  lineage+="$(cat /proc/"$p"/comm 2>/dev/null) "
  p=$(awk '{print $4}' /proc/"$p"/stat 2>/dev/null)
done
echo "restored workload $wpid: $lineage"
check_sh "[[ '$lineage' == *slurmstepd* ]]" "the restored workload runs inside the job's step"
scancel "$job1"
wait_for 30 "[[ \$(job_field $job1 JobState) == CANCELLED ]] && ! pgrep -f '$WORKLOAD --tag slurm-test --mib 256' >/dev/null"
check_sh "[[ '$(job_field "$job1" JobState)' == CANCELLED ]]" "scancel ends it"
check_sh "! pgrep -f '$WORKLOAD --tag slurm-test --mib 256' >/dev/null" "its workload is gone"

# --- 1b. the same for a job of an unprivileged user (sbatch --uid=nobody) ---
mkdir -p "$work/out"
chmod 1777 "$work/out"
out6="$work/out/job6.out"
job6=$(sbatch --parsable --uid=nobody --paladin-gpu-mem=1GiB -o "$out6" \
  --wrap "exec $WORKLOAD --tag slurm-test --mib 128 --host-mib 8 --every-ms 150")
wait_for 60 '(( $(last_gen "$out6" || echo 0) >= 8 ))'
check_sh "(( \$(last_gen '$out6' || echo 0) >= 8 ))" "job $job6 of user nobody runs under Paladin"
uid_of() { awk '/^Uid:/ {print $2}' /proc/"$1"/status 2>/dev/null; }
wpid=$(pgrep -f "^$WORKLOAD --tag slurm-test --mib 128" | head -1)
check_sh "[[ '$(uid_of "$wpid")' == 65534 ]]" "its workload runs as nobody"
if "$PALADIN" slurm requeue "$job6" --socket "$work/agent.sock" >"$work/requeue6.log" 2>&1; then
  pass "paladin slurm requeue $job6 checkpointed nobody's step and requeued it"
else
  fail "paladin slurm requeue $job6 failed"
fi
cat "$work/requeue6.log"
sleep 0.5
before6=$(last_gen "$out6")
before6=${before6:-0}
wait_for 240 "grep -A100000 'its output continues below' '$out6' | grep -q '^gen [0-9]* ok'"
first6=$(grep -A100000 'its output continues below' "$out6" | grep -o '^gen [0-9]* ok' |
  head -1 | awk '{print $2}')
first6=${first6:-0}
check_sh "((first6 > before6 && first6 <= before6 + 3 && first6 > 8))" \
  "nobody's job continued from the checkpoint (gen $first6 after gen $before6)" || {
  show "$out6"
  show "$work/agent.log" 20
}
wpid=$(pgrep -f "^$WORKLOAD --tag slurm-test --mib 128" | head -1)
check_sh "[[ '$(uid_of "$wpid")' == 65534 ]]" "restored, it still runs as nobody"
check_sh "[[ '$(job_field "$job6" JobState)' == RUNNING ]]" "scontrol reports it RUNNING"
scancel "$job6"
wait_for 30 "! pgrep -f '^$WORKLOAD --tag slurm-test --mib 128' >/dev/null"
check_sh "! pgrep -f '^$WORKLOAD --tag slurm-test --mib 128' >/dev/null" "scancel ends it" ||
  ps -eo pid,ppid,uid,stat,args | grep -E 'paladin|slurmstepd' | grep -v grep
check_sh "! grep -q MISMATCH '$out6'" "no memory mismatch"

# --- 2. two jobs share the GPU under quotas ---
out2="$work/job2.out"
out3="$work/job3.out"
job2=$(sbatch --parsable --paladin-gpu-mem=1GiB -o "$out2" \
  --wrap "exec $WORKLOAD --tag slurm-test --mib 512 --gens 40 --every-ms 100")
job3=$(sbatch --parsable --paladin-gpu-mem=1GiB -o "$out3" \
  --wrap "exec $WORKLOAD --tag slurm-test --mib 1536 --gens 5")
wait_for 120 "[[ \$(job_field $job2 JobState) == COMPLETED && \$(job_field $job3 JobState) == FAILED ]]"
show "$out2" 5
show "$out3" 10
check_sh "[[ '$(job_field "$job2" JobState)' == COMPLETED ]] && grep -q 'DONE gen 40' '$out2'" \
  "the job within its quota completed, every generation verified"
check_sh "[[ '$(job_field "$job3" JobState)' == FAILED ]]" "the job past its quota failed"
check_sh "grep -q 'refused: the workload uses .* of its 1 GiB GPU-memory quota' '$out3'" \
  "its SLURM output says the allocation was refused past its 1 GiB quota"
check_sh "grep -q 'GPU 0, quota 1 GiB' '$out2' && grep -q 'GPU 0, quota 1 GiB' '$out3'" \
  "both ran on the same GPU"
overlap=$(grep -c "SLURM step .* registered" "$work/agent.log")
check_sh "((overlap >= 3))" "the agent registered every step"

# --- 3. the agent down ---
stop_agent
out4="$work/job4.out"
out5="$work/job5.out"
# (No GPU here without Paladin's emulated one: these steps only say that they ran.)
job4=$(sbatch --parsable --paladin-gpu-mem=1GiB -o "$out4" --wrap "echo the step ran")
job5=$(sbatch --parsable --paladin-gpu-mem=1GiB --paladin-on-agent-down=fail -o "$out5" \
  --wrap "echo the step ran")
wait_for 60 "[[ \$(job_field $job4 JobState) =~ COMPLETED|FAILED && \$(job_field $job5 JobState) =~ COMPLETED|FAILED ]]"
show "$out4" 5
show "$out5" 5
check_sh "grep -q 'running this step WITHOUT Paladin' '$out4'" \
  "agent down, on_agent_down=run: the output warns that the step runs without Paladin"
check_sh "[[ '$(job_field "$job4" JobState)' == COMPLETED ]] && grep -q 'the step ran' '$out4'" \
  "...and the step still ran"
check_sh "[[ '$(job_field "$job5" JobState)' == FAILED ]] && ! grep -q 'the step ran' '$out5' && grep -q 'the step fails (--paladin-on-agent-down=fail)' '$out5'" \
  "agent down, --paladin-on-agent-down=fail: the job fails with a clear message"

summary
