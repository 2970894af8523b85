# Sourced by the cases that move or recover a running pod of the demo workload between the test
# cluster's nodes (case_move_node*.sh, case_recover_node*.sh): what they share. A case sets CASE
# (the name its lines start with) before sourcing, and MARK (a pgrep -f pattern of the workload's
# arguments, which no other process on the machine has, its first character bracketed so that it
# does not match another pgrep looking for it) and work (its folder) before it samples.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, PALADIN, EMUCUDA.
# shellcheck shell=bash

k() { "$KUBECTL" -n "$NS" "$@"; }
fail() {
  echo "$CASE: FAIL: $*"
  exit 1
}

# runtime_class: the RuntimeClass `paladin` (paladin-runc), under which a pod can be moved.
runtime_class() {
  "$KUBECTL" apply -f - >/dev/null <<YAML
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: paladin}
handler: paladin
YAML
}

# last_gen POD: the last generation POD's workload verified ('' before its first).
last_gen() { k logs "$1" 2>/dev/null | sed -n 's/^gen \([0-9]*\) ok .*/\1/p' | tail -1; }

# uuid_of G: the UUID of the emulated node's GPU G (PALADIN_EMU_GPUS and _STATE exported).
uuid_of() { "$PALADIN" k8s gpus --nvml "$EMUCUDA" | awk -v g="$1" '$1 == "gpu" && $2 == g && $4 == "used" { print $3 }'; }

# sampler: every 100 ms, how many copies of the workload run (the host's /proc sees both nodes);
# when more than one, the time and the copies go to $work/samples.seen.
sampler() {
  local n
  while :; do
    n=$(pgrep -c -f -- "$MARK" || true)
    echo "$n"
    ((n <= 1)) || { date +%T.%N; pgrep -a -f -- "$MARK"; } >>"$work/samples.seen"
    sleep 0.1
  done
}
