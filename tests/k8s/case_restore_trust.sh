#!/usr/bin/env bash
# Who may restore a checkpoint image through the RuntimeClass paladin (scripts/paladin-runc.sh):
# only the pod paladin k8s move made it for, in the namespace it was taken in, with the token the
# node's key made, once. Pod `src` is moved into `dst` (a genuine restore); then pods that name
# its image are created as a tenant could: from another namespace (with dst's token copied), under
# another name, with a forged token, with none, again after the restore (a replay), naming a path,
# naming no image, and with a newline in the image's name or the token. Each is refused with the
# reason in the pod's events, and its workload never runs. Prints "security: restore-from: tried N, refused N".
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, CLUSTER_DIR, PALADIN, K8S_NODE_FLAGS, MOVE_FLAGS.
set -euo pipefail
CASE=restore_trust
source "$(dirname "${BASH_SOURCE[0]}")/caselib.sh"
need_cluster 1 "needs the RuntimeClass paladin on the node (the test cluster only)"
OTHER=$NS-b
delete_other() { "$KUBECTL" delete namespace "$OTHER" --wait=false >/dev/null 2>&1 || true; }
on_exit=delete_other
"$KUBECTL" create namespace "$OTHER" >/dev/null
runtime_class
pod() { # NAMESPACE NAME ANNOTATIONS
  "$KUBECTL" -n "$1" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $2
  annotations: {${3:-}}
spec:
  runtimeClassName: paladin
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: demo
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: ["--mib", "8", "--host-mib", "1", "--every-ms", "100"]
YAML
}

# --- a genuine move -----------------------------------------------------------------------------
pod "$NS" src
"$KUBECTL" -n "$NS" wait --for=jsonpath='{.status.phase}'=Running pod/src --timeout=60s >/dev/null ||
  fail "pod src not Running"
sleep 1
read -ra flags <<<"$K8S_NODE_FLAGS $MOVE_FLAGS"
"$PALADIN" k8s move -n "$NS" src --name dst "${flags[@]}" >"$work/move.log" 2>&1 ||
  fail "paladin k8s move: $(tail -5 "$work/move.log")"
img=$("$KUBECTL" -n "$NS" get pod dst -o jsonpath='{.metadata.annotations.paladin\.io/restore-from}')
token=$("$KUBECTL" -n "$NS" get pod dst -o jsonpath='{.metadata.annotations.paladin\.io/restore-token}')
[[ -n $img && ${#token} == 64 ]] || fail "pod dst carries no image or token ('$img', '$token')"
echo "restore_trust: src moved into dst from image $img"

# --- the attempts ------------------------------------------------------------------------------
tried=0 refused=0
# attempt WHAT NAMESPACE POD ANNOTATIONS EXPECTED: the pod must be refused, its events saying
# EXPECTED, and never run its container.
attempt() {
  local what=$1 ns=$2 name=$3 annotations=$4 expected=$5 uid i events=''
  tried=$((tried + 1))
  pod "$ns" "$name" "$annotations"
  uid=$("$KUBECTL" -n "$ns" get pod "$name" -o jsonpath='{.metadata.uid}')
  for ((i = 0; i < 100; i++)); do
    events=$("$KUBECTL" -n "$ns" get events --field-selector "involvedObject.uid=$uid" \
      -o jsonpath='{range .items[*]}{.message}{"\n"}{end}')
    grep -qF -- "$expected" <<<"$events" && break
    sleep 0.2
  done
  local running
  running=$("$KUBECTL" -n "$ns" get pod "$name" -o jsonpath='{.status.containerStatuses[0].state.running}')
  if grep -qF -- "$expected" <<<"$events" && [[ -z $running ]]; then
    refused=$((refused + 1))
    echo "restore_trust: refused ($what): $(grep -F -m1 -- "$expected" <<<"$events" | grep -o 'paladin-runc: .*' | cut -c1-160)"
  else
    echo "restore_trust: NOT refused ($what): running='$running' events: $(tail -2 <<<"$events")"
  fi
  "$KUBECTL" -n "$ns" delete pod "$name" --wait=true --timeout=30s >/dev/null
}
attempt "another namespace, the token copied" "$OTHER" dst \
  "paladin.io/restore-from: $img, paladin.io/restore-token: $token" "it was taken in namespace '$NS'"
attempt "another pod of the namespace, the token copied" "$NS" other \
  "paladin.io/restore-from: $img, paladin.io/restore-token: $token" "it was made for pod $NS/dst"
"$KUBECTL" -n "$NS" delete pod dst --wait=true --timeout=30s >/dev/null
forged=$( [[ ${token:0:1} == 0 ]] && echo 1 || echo 0)${token:1}
attempt "a forged token" "$NS" dst \
  "paladin.io/restore-from: $img, paladin.io/restore-token: $forged" "is not the node's token"
attempt "no token" "$NS" dst "paladin.io/restore-from: $img" "carries no paladin.io/restore-token"
attempt "the genuine token again (a replay)" "$NS" dst \
  "paladin.io/restore-from: $img, paladin.io/restore-token: $token" "was restored already"
attempt "a path" "$NS" path "paladin.io/restore-from: ../../etc" "is not an image name"
attempt "no such image" "$OTHER" none "paladin.io/restore-from: move-0-none" "no checkpoint image"
# A newline in a value: the wrapper once read its annotations joined on one line, and a newline
# emptied the fields after it (the sandbox id among them), skipping the refusal of a pod
# checkpointed away. Each is read on its own now, and a control character is refused.
attempt "a newline in restore-from" "$NS" nl \
  "paladin.io/restore-from: \"$img\\nmove-0-x\", paladin.io/restore-token: $token" "holds a control character"
attempt "a newline in restore-token" "$NS" nltoken \
  "paladin.io/restore-from: $img, paladin.io/restore-token: \"$token\\n\"" "holds a control character"
pgrep -f -- '--mib 8 --host-mib 1 --every-ms 100' >/dev/null && fail "a copy of the workload runs"
echo "security: restore-from: tried $tried, refused $refused"
[[ $refused == "$tried" ]] || fail "$((tried - refused)) of $tried restores not refused"
