#!/usr/bin/env bash
# Namespaces are teams (docs/kubernetes.md, design 6): Paladin's scheduler, given Paladin's server,
# checks each team's max_gpu_mem over the pods of all its namespaces. Namespaces NS and NS-b carry
# the label paladin.io/team=research (quota 3 GiB on a Paladin server started here); NS-c has no
# label (its own team, no quota). research's pods of 2Gi (NS) and then 2Gi (NS-b) : the second
# stays Pending with the team's reason; NS-c's 2Gi is placed; 1Gi more in NS-b fits exactly; once
# NS's pod is deleted, the Pending one is placed. Meanwhile Paladin's server, to which the
# scheduler reports its pods, shows each team's token its own pods where kubectl shows them, and
# never another team's; and a job research submits to that server waits for the quota its pods
# hold.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, CLUSTER_DIR, PALADIN, EMUCUDA, NODE,
# K8S_NODE_FLAGS.
set -euo pipefail
CASE=team_quota
# shellcheck source=tests/k8s/caselib.sh
source "$(dirname "${BASH_SOURCE[0]}")/caselib.sh"
if [[ -z ${CLUSTER_DIR:-} ]]; then
  echo "team_quota: SKIP: runs Paladin's server and scheduler on the test cluster's machine"
  exit 77
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
work=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  stop_server
  "$KUBECTL" delete namespace "$NS-b" "$NS-c" --wait=false >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
read -ra api <<<"$K8S_NODE_FLAGS"

# A server of its own on this machine, with a quota set here, not the one case_installed installs.
start_server "$work/server" || fail "no server"
url=$SERVER_URL
"$PALADIN" quota research --gpu-mem 3GiB --server "$url" --token "$(cat "$SERVER_TOKEN_FILE")" \
  >/dev/null || fail "paladin quota research --gpu-mem 3GiB"
PALADIN_EMU_GPUS=2x8GiB PALADIN_EMU_STATE=$work/emu-state \
  "$PALADIN" k8s node --node "$NODE" --nvml "$EMUCUDA" "${api[@]}" >/dev/null
"$PALADIN" k8s scheduler --interval 0.3 --paladin-server "$url" \
  --paladin-token-file "$SERVER_TOKEN_FILE" "${api[@]}" >"$work/scheduler.log" 2>&1 &
pids+=($!)

"$KUBECTL" create namespace "$NS-b" >/dev/null
"$KUBECTL" create namespace "$NS-c" >/dev/null
"$KUBECTL" label namespace "$NS" "$NS-b" paladin.io/team=research >/dev/null

pod() { # NAMESPACE NAME GPU_MEMORY
  "$KUBECTL" -n "$1" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $2}
spec:
  schedulerName: paladin
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: demo
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: ["--mib", "8", "--host-mib", "1", "--every-ms", "500"]
    resources:
      limits: {paladin.io/gpu-memory: $3}
YAML
}
bound() { # NAMESPACE NAME: waits until Paladin bound it
  local i
  for ((i = 0; i < 50; i++)); do
    [[ -n $("$KUBECTL" -n "$1" get pod "$2" -o jsonpath='{.spec.nodeName}') ]] && return 0
    sleep 0.2
  done
  return 1
}
pending_with() { # NAMESPACE NAME TEXT: waits for the PodScheduled condition to say TEXT
  local i got=''
  for ((i = 0; i < 50; i++)); do
    got=$("$KUBECTL" -n "$1" get pod "$2" \
      -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
    [[ $got == *"$3"* ]] && return 0
    sleep 0.2
  done
  echo "team_quota: $1/$2 says '$got'"
  return 1
}

pod "$NS" a 2Gi
bound "$NS" a || fail "pod $NS/a (research, 2 of 3 GiB) not placed: $(tail -3 "$work/scheduler.log")"
pod "$NS-b" b 2Gi
pending_with "$NS-b" b "team research: 2 GiB of its 3 GiB of GPU memory (max_gpu_mem) in use, this pod asks 2 GiB" ||
  fail "pod $NS-b/b is not held back by research's quota"
[[ -z $("$KUBECTL" -n "$NS-b" get pod b -o jsonpath='{.spec.nodeName}') ]] || fail "pod $NS-b/b placed past the quota"
pod "$NS-c" c 2Gi
bound "$NS-c" c || fail "pod $NS-c/c (its own team, no quota) not placed"
pod "$NS-b" d 1Gi
bound "$NS-b" d || fail "pod $NS-b/d (research, 3 of 3 GiB) not placed"

# Paladin's server has the pods as its scheduler reports them after each pass: research's token
# sees research's three pods (a and d where kubectl says they run, b with its reason),
# the token of NS-c's team sees c only; neither sees the other's pods, even by name (404).
admin=$(cat "$SERVER_TOKEN_FILE")
token() { "$PALADIN" tokens create --scope "team:$1" --server "$url" --token "$admin"; }
research=$(token research) || fail "paladin tokens create --scope team:research"
other=$(token "k8s-$NS-c") || fail "paladin tokens create --scope team:k8s-$NS-c"
pods_of() { "$PALADIN" pods --json --server "$url" --token "$1" | jq -r '.pods[] |
  "\(.namespace)/\(.name) \(.team) \(.node)/\(.gpu // "-") \(.reason // "-" | .[0:14])"' | sort; }
kube_of() { # NAMESPACE NAME: namespace/name node/gpu as kubectl shows them
  "$KUBECTL" -n "$1" get pod "$2" \
    -o jsonpath='{.metadata.namespace}/{.metadata.name} {.spec.nodeName}/{.metadata.annotations.paladin\.io/gpu}'
}
want_research=$(printf '%s\n' "$(kube_of "$NS" a | sed 's/ / research /') -" \
  "$NS-b/b research /- team research:" \
  "$(kube_of "$NS-b" d | sed 's/ / research /') -" | sort)
for ((i = 0; i < 30; i++)); do
  [[ $(pods_of "$research") == "$want_research" ]] && break
  sleep 0.2
done
[[ $(pods_of "$research") == "$want_research" ]] ||
  fail "research's token sees in Paladin:"$'\n'"$(pods_of "$research")"$'\n'"kubectl shows:"$'\n'"$want_research"
[[ $(pods_of "$other") == "$(kube_of "$NS-c" c | sed "s/ / k8s-$NS-c /") -" ]] ||
  fail "the token of team k8s-$NS-c sees in Paladin: $(pods_of "$other")"
for who in "$research:$NS-c/c" "$other:$NS/a"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer ${who%%:*}" "$url/v1/pods/${who#*:}")
  [[ $code == 404 ]] || fail "a team's token got HTTP $code for another team's pod ${who#*:}"
done
[[ $(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $admin" "$url/v1/pods/$NS-c/c") == 200 ]] ||
  fail "the admin token does not see pod $NS-c/c"
echo "team_quota: Paladin's server shows research's token its 3 pods where kubectl shows them" \
  "(b with its team's reason), team k8s-$NS-c's token its 1; each team's pods are 404 to the other"

# `paladin explain pod/NS/NAME` through the server: a placed pod's node, GPU and placement are its
# Scheduled event's; a Pending pod's reason is its PodScheduled condition's.
explain_row() { # POD KEY: the row KEY of `paladin explain pod/POD`, research's token
  "$PALADIN" explain "pod/$1" --server "$url" --token "$research" | sed -n "s/^$2: *//p"
}
placed=$("$KUBECTL" -n "$NS" get events --field-selector involvedObject.name=a,reason=Scheduled \
  -o jsonpath='{.items[-1:].message}')
[[ $placed == "placed on $(explain_row "$NS/a" placement): "* ]] ||
  fail "explain pod/$NS/a: placement '$(explain_row "$NS/a" placement)'; event '$placed'"
[[ $(explain_row "$NS/a" node) == "$(kube_of "$NS" a | sed 's|.* \(.*\)/\(.*\)|\1 GPU \2|')" ]] ||
  fail "explain pod/$NS/a: node '$(explain_row "$NS/a" node)', kubectl: $(kube_of "$NS" a)"
waiting=$("$KUBECTL" -n "$NS-b" get pod b \
  -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
[[ -n $waiting && $(explain_row "$NS-b/b" reason) == "$waiting" ]] ||
  fail "explain pod/$NS-b/b: reason '$(explain_row "$NS-b/b" reason)'; condition '$waiting'"
"$PALADIN" explain "pod/$NS-c/c" --server "$url" --token "$research" >/dev/null 2>&1 &&
  fail "research's token explained another team's pod $NS-c/c"
echo "team_quota: paladin explain pod/... gives a's placement as its event does, b's reason as its" \
  "condition does; another team's pod is not found"

# One quota over pods and jobs: with research's pods holding its 3 GiB, a job research submits to
# Paladin's server waits, the server saying the pods hold it (docs/kubernetes.md, "Teams").
job=$("$PALADIN" submit --team research --gpu-mem 1GiB --server "$url" --token "$research" \
  -- /bin/true) || fail "paladin submit --team research"
want="team research quota: 3 GiB of its 3 GiB GPU memory in use (3 GiB by its Kubernetes pods), this job needs 1 GiB"
for ((i = 0; i < 30; i++)); do
  reason=$("$PALADIN" show "$job" --json --server "$url" --token "$research" | jq -r '.reason // ""')
  [[ $reason == "$want" ]] && break
  sleep 0.2
done
[[ $reason == "$want" ]] || fail "research's job $job (its pods hold its quota) says '$reason'"
"$PALADIN" cancel "$job" --server "$url" --token "$research" >/dev/null || fail "paladin cancel $job"
echo "team_quota: research's job waits for its team's quota, held by its 3 GiB of pods"

"$KUBECTL" -n "$NS" delete pod a --wait=true --timeout=30s >/dev/null
bound "$NS-b" b || fail "pod $NS-b/b not placed once research's pod a was deleted"
echo "team_quota: research (namespaces $NS, $NS-b; 3 GiB): 2Gi placed, 2Gi more Pending with the" \
  "team's reason, 1Gi placed (3 of 3 GiB), the Pending one placed once 2Gi were freed;" \
  "$NS-c (its own team) placed"
