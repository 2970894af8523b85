#!/usr/bin/env bash
# Paladin's Helm chart (deploy/helm/paladin) against its plain manifests (deploy/k8s), without a
# cluster and without helm: the chart rendered by tests/k8s/chart_render (a stand-in for `helm
# template`, not helm) and the manifests by `kubectl kustomize`, compared object by object as
# parsed YAML. A change to either that the other does not follow fails here, naming the object
# and the field.
#
#   chart_test.sh CHART_RENDER|-
#
# - defaults, release namespace paladin: deploy/k8s but its Namespace (helm's --create-namespace
#   makes that); with namespace.create=true: deploy/k8s, Namespace too;
# - emulatedGPUs.enabled=true: deploy/k8s/emulated;
# - values given with -f and --set: the same objects as an overlay making the same changes;
# - server.enabled=false: deploy/k8s less the server, the mover, their flags and the token; the
#   server's storage, token and arguments as values;
# - checkpoint.enabled=false, recover.enabled=false, mover.enabled=false: deploy/k8s less the
#   checkpointer's and the mover's DaemonSets, the recovery's Deployment, their identities and the
#   recovery's and mover's --paladin-user; their settings (period, folders, the node's runc) as
#   values in the overlay above;
# - another release namespace: the same objects with every reference to the namespace following
#   it (the ServiceAccounts' bindings, the webhook's Service and excluded namespaces, its
#   --paladin-user, the server's URL) and none left naming `paladin`;
# - NOTES.txt renders; a missing required value is refused naming it.
# kubectl: $PALADIN_K8S_PREFIX/bin/kubectl (scripts/k8s.sh installs it), else the toolkit's
# (../shared/k8s, unpacked here), else the PATH's. Without the renderer (Go and Debian's sprig and
# yaml.v3 packages: scripts/deps.sh --tests) or any kubectl it exits 77 (skipped).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$(dirname "$here")")
render=${1:--}
chart=$repo/deploy/helm/paladin
if [[ $render == - || ! -x $render ]]; then
  echo "chart: SKIP: no chart_render: it needs Go and Debian's golang-github-masterminds-sprig-dev" \
    "and golang-gopkg-yaml.v3-dev when CMake configures (scripts/deps.sh --tests)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

PREFIX=${PALADIN_K8S_PREFIX:-/opt/paladin/k8s}
TOOLKIT=${PALADIN_K8S_TOOLKIT:-$(dirname "$repo")/shared/k8s}
if [[ -x $PREFIX/bin/kubectl ]]; then
  kubectl=$PREFIX/bin/kubectl
elif [[ -f $TOOLKIT/bin/kubectl.xz ]]; then
  xz -dc "$TOOLKIT/bin/kubectl.xz" >"$work/kubectl"
  (cd "$work" && grep ' kubectl$' "$TOOLKIT/bin/SHA256SUMS" | sha256sum --quiet -c) ||
    { echo "chart: FAIL: $TOOLKIT/bin/kubectl.xz does not match its SHA256SUMS"; exit 1; }
  chmod +x "$work/kubectl"
  kubectl=$work/kubectl
elif command -v kubectl >/dev/null; then
  kubectl=$(command -v kubectl)
else
  echo "chart: SKIP: no kubectl to render deploy/k8s with (none in $PREFIX, $TOOLKIT or the PATH)"
  exit 77
fi
echo "chart: kubectl $kubectl ($("$kubectl" version --client 2>/dev/null | grep -m1 -o 'Kustomize Version: .*' || echo 'kustomize version unknown'))"

failed=0
indent() { sed 's/^/chart:   /'; }
# check NAME WANT GOT [--ignore-kind KIND]: GOT is WANT, object by object.
check() {
  local name=$1 want=$2 got=$3
  shift 3
  if out=$("$render" compare "$want" "$got" "$@"); then
    echo "chart: ok: $name: $out"
  else
    echo "chart: FAIL: $name: the chart's objects differ from the manifests':"
    indent <<<"$out"
    failed=1
  fi
}

"$kubectl" kustomize "$repo/deploy/k8s" >"$work/k8s.yaml"
"$kubectl" kustomize "$repo/deploy/k8s/emulated" >"$work/emulated.yaml"

"$render" template paladin "$chart" -n paladin >"$work/default.yaml"
check "defaults (but the Namespace) = deploy/k8s" "$work/k8s.yaml" "$work/default.yaml" \
  --ignore-kind Namespace
if grep -q '^kind: Namespace' "$work/default.yaml"; then
  echo "chart: FAIL: defaults: a Namespace rendered (helm install --create-namespace would refuse it)"
  failed=1
fi
"$render" template paladin "$chart" -n paladin --set namespace.create=true >"$work/ns.yaml"
check "namespace.create=true = deploy/k8s" "$work/k8s.yaml" "$work/ns.yaml"
"$render" template paladin "$chart" -n paladin \
  --set namespace.create=true,emulatedGPUs.enabled=true >"$work/emu.yaml"
check "emulatedGPUs.enabled=true = deploy/k8s/emulated" "$work/emulated.yaml" "$work/emu.yaml"

# Values reach the objects where the manifests would be patched: the same changes made once as
# values (-f and --set) and once as a kustomize overlay of deploy/k8s/emulated.
mkdir "$work/overlay"
cat >"$work/overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath --relative-to="$work/overlay" "$repo/deploy/k8s/emulated")
images:
  - {name: paladin.local/paladin, newTag: "1.2"}
patches:
  - target: {kind: Deployment, name: paladin-webhook}
    patch: |-
      - {op: replace, path: /spec/template/spec/containers/0/command/26, value: 4x80GiB}
      - {op: add, path: /spec/template/spec/containers/0/command/17, value: --paladin-user}
      - {op: add, path: /spec/template/spec/containers/0/command/18, value: "system:serviceaccount:paladin:paladin-operator"}
  - target: {kind: DaemonSet, name: paladin-node}
    patch: |-
      - {op: replace, path: /spec/template/spec/nodeSelector, value: {gpu: "yes"}}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: EXTRA, value: "1"}}
      - {op: replace, path: /spec/template/spec/containers/0/env/3/value, value: 4x80GiB}
      - {op: replace, path: /spec/template/spec/containers/0/resources/limits/memory, value: 1Gi}
  - target: {kind: DaemonSet, name: paladin-checkpoint}
    patch: |-
      - {op: replace, path: /spec/template/spec/nodeSelector, value: {gpu: "yes"}}
      - {op: replace, path: /spec/template/spec/containers/0/command/6, value: "30"}
      - {op: replace, path: /spec/template/spec/containers/0/command/9, value: /mnt/shared/paladin}
      - {op: replace, path: /spec/template/spec/containers/0/command/13, value: /usr/local/sbin/runc}
      - {op: replace, path: /spec/template/spec/containers/0/env/2/value, value: 4x80GiB}
  - target: {kind: Deployment, name: paladin-recover}
    patch: |-
      - {op: replace, path: /spec/template/spec/nodeSelector, value: {gpu: "yes"}}
      - {op: replace, path: /spec/template/spec/containers/0/command/8, value: "60"}
      - {op: replace, path: /spec/template/spec/containers/0/command/13, value: /mnt/shared/paladin}
      - {op: replace, path: /spec/template/spec/containers/0/command/15, value: /usr/local/sbin/runc}
      - {op: replace, path: /spec/template/spec/containers/0/env/2/value, value: 4x80GiB}
  - target: {kind: DaemonSet, name: paladin-mover}
    patch: |-
      - {op: replace, path: /spec/template/spec/nodeSelector, value: {gpu: "yes"}}
      - {op: replace, path: /spec/template/spec/containers/0/command/8, value: "[::]:7446"}
      - {op: replace, path: /spec/template/spec/containers/0/command/25, value: /usr/local/sbin/runc}
      - {op: replace, path: /spec/template/spec/containers/0/env/2/value, value: 4x80GiB}
  - target: {kind: RuntimeClass, name: paladin}
    patch: |-
      - {op: replace, path: /scheduling/nodeSelector, value: {gpu: "yes"}}
  - target: {kind: MutatingWebhookConfiguration, name: paladin}
    patch: |-
      - {op: replace, path: /webhooks/0/namespaceSelector/matchExpressions/0/values, value: [kube-system, monitoring, paladin]}
YAML
cat >"$work/values.yaml" <<'YAML'
emulatedGPUs: {enabled: true, gpus: 4x80GiB}
gpuNodeLabel: {key: gpu, value: "yes"}
node:
  extraEnv: [{name: EXTRA, value: "1"}]
  resources: {limits: {memory: 1Gi}}
webhook: {excludedNamespaces: [kube-system, monitoring]}
nodeRuntime: {runc: /usr/local/sbin/runc}
checkpoint: {every: "30", toImages: /mnt/shared/paladin}
recover: {lostAfter: "60", images: /mnt/shared/paladin}
mover: {carryAddress: "[::]"}
YAML
"$kubectl" kustomize "$work/overlay" >"$work/overlay.yaml"
"$render" template paladin "$chart" -n paladin -f "$work/values.yaml" --set namespace.create=true \
  --set image.tag=1.2 --set 'webhook.extraPaladinUsers={system:serviceaccount:paladin:paladin-operator}' \
  >"$work/values-render.yaml"
check "values (-f, --set) = the same changes as an overlay" "$work/overlay.yaml" \
  "$work/values-render.yaml"

# without NAME KIND:NAME...: $work/NAME/kustomization.yaml, deploy/k8s with those objects
# deleted; more patches may be appended to it.
without() {
  local dir=$work/$1 gone
  shift
  mkdir "$dir"
  cat >"$dir/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath --relative-to="$dir" "$repo/deploy/k8s")
patches:
YAML
  for gone in "$@"; do
    cat >>"$dir/kustomization.yaml" <<YAML
  - target: {kind: ${gone%%:*}, name: ${gone#*:}}
    patch: |-
      \$patch: delete
      apiVersion: v1
      kind: ${gone%%:*}
      metadata: {name: ${gone#*:}}
YAML
  done
}

# server.enabled=false: deploy/k8s without Paladin's server: none of its objects, nor the mover's
# (its moves come from the server), the scheduler and the webhook without --paladin-server and the
# mover's --paladin-user, its token's and its CA's Secrets, and the webhook without an API
# token (it then calls nothing).
without noserver PersistentVolumeClaim:paladin-server-data Service:paladin-server \
  Deployment:paladin-server ServiceAccount:paladin-server ClusterRole:paladin-webhook \
  ClusterRoleBinding:paladin-webhook DaemonSet:paladin-mover ServiceAccount:paladin-mover \
  ClusterRole:paladin-mover ClusterRoleBinding:paladin-mover \
  ValidatingAdmissionPolicy:paladin-mover-cordons-only \
  ValidatingAdmissionPolicyBinding:paladin-mover-cordons-only
cat >>"$work/noserver/kustomization.yaml" <<'YAML'
  - target: {kind: Deployment, name: paladin-scheduler}
    patch: |-
      - {op: remove, path: /spec/template/spec/containers/0/command/10}
      - {op: remove, path: /spec/template/spec/containers/0/command/9}
      - {op: remove, path: /spec/template/spec/containers/0/command/8}
      - {op: remove, path: /spec/template/spec/containers/0/command/7}
      - {op: remove, path: /spec/template/spec/containers/0/command/6}
      - {op: remove, path: /spec/template/spec/containers/0/command/5}
      - {op: remove, path: /spec/template/spec/containers/0/volumeMounts}
      - {op: remove, path: /spec/template/spec/volumes}
  - target: {kind: Deployment, name: paladin-webhook}
    patch: |-
      - {op: remove, path: /spec/template/spec/containers/0/command/22}
      - {op: remove, path: /spec/template/spec/containers/0/command/21}
      - {op: remove, path: /spec/template/spec/containers/0/command/20}
      - {op: remove, path: /spec/template/spec/containers/0/command/19}
      - {op: remove, path: /spec/template/spec/containers/0/command/18}
      - {op: remove, path: /spec/template/spec/containers/0/command/17}
      - {op: remove, path: /spec/template/spec/containers/0/command/16}
      - {op: remove, path: /spec/template/spec/containers/0/command/15}
      - {op: remove, path: /spec/template/spec/containers/0/volumeMounts/2}
      - {op: remove, path: /spec/template/spec/containers/0/volumeMounts/1}
      - {op: remove, path: /spec/template/spec/volumes/2}
      - {op: remove, path: /spec/template/spec/volumes/1}
      - {op: add, path: /spec/template/spec/automountServiceAccountToken, value: false}
  - target: {kind: ServiceAccount, name: paladin-webhook}
    patch: |-
      - {op: add, path: /automountServiceAccountToken, value: false}
YAML
"$kubectl" kustomize "$work/noserver" >"$work/noserver.yaml"
"$render" template paladin "$chart" -n paladin --set namespace.create=true,server.enabled=false \
  >"$work/noserver-render.yaml"
check "server.enabled=false = deploy/k8s without the server" "$work/noserver.yaml" \
  "$work/noserver-render.yaml"
if grep -n 'paladin-server' "$work/noserver-render.yaml"; then
  echo "chart: FAIL: server.enabled=false: the render still names the server"
  failed=1
fi

# checkpoint.enabled=false, recover.enabled=false, mover.enabled=false: deploy/k8s without the
# checkpointer's DaemonSet, the recovery's Deployment and the mover's DaemonSet, their identities,
# and the recovery's and the mover's --paladin-user.
without norecover DaemonSet:paladin-checkpoint Deployment:paladin-recover \
  ServiceAccount:paladin-checkpoint ServiceAccount:paladin-recover ClusterRole:paladin-checkpoint \
  ClusterRole:paladin-recover ClusterRoleBinding:paladin-checkpoint \
  ClusterRoleBinding:paladin-recover DaemonSet:paladin-mover ServiceAccount:paladin-mover \
  ClusterRole:paladin-mover ClusterRoleBinding:paladin-mover \
  ValidatingAdmissionPolicy:paladin-mover-cordons-only \
  ValidatingAdmissionPolicyBinding:paladin-mover-cordons-only
cat >>"$work/norecover/kustomization.yaml" <<'YAML'
  - target: {kind: Deployment, name: paladin-webhook}
    patch: |-
      - {op: remove, path: /spec/template/spec/containers/0/command/16}
      - {op: remove, path: /spec/template/spec/containers/0/command/15}
      - {op: remove, path: /spec/template/spec/containers/0/command/14}
      - {op: remove, path: /spec/template/spec/containers/0/command/13}
YAML
"$kubectl" kustomize "$work/norecover" >"$work/norecover.yaml"
"$render" template paladin "$chart" -n paladin --set namespace.create=true \
  --set checkpoint.enabled=false,recover.enabled=false,mover.enabled=false \
  >"$work/norecover-render.yaml"
check "checkpoint, recover and mover disabled = deploy/k8s without them" \
  "$work/norecover.yaml" "$work/norecover-render.yaml"
if grep -nE 'paladin-(checkpoint|recover|mover)|--host-mounts' "$work/norecover-render.yaml"; then
  echo "chart: FAIL: checkpoint, recover and mover disabled: the render still names them"
  failed=1
fi

# checkpoint.toNode: each node's checkpointer sends its images to the mover of that node (found
# among the movers' pods, at the carry port, with the move key) instead of into a shared folder,
# and the recovery runs there.
without tonode
cat >>"$work/tonode/kustomization.yaml" <<'YAML'
  - target: {kind: DaemonSet, name: paladin-checkpoint}
    patch: |-
      - {op: replace, path: /spec/template/spec/containers/0/command/8, value: --to-mover-node}
      - {op: replace, path: /spec/template/spec/containers/0/command/9, value: gpu-3}
      - {op: add, path: /spec/template/spec/containers/0/command/10, value: --carry-port}
      - {op: add, path: /spec/template/spec/containers/0/command/11, value: "7446"}
      - {op: add, path: /spec/template/spec/containers/0/command/12, value: --mover-pods}
      - {op: add, path: /spec/template/spec/containers/0/command/13, value: paladin/app.kubernetes.io/name=paladin-mover}
      - {op: add, path: /spec/template/spec/containers/0/command/14, value: --key}
      - {op: add, path: /spec/template/spec/containers/0/command/15, value: /var/lib/paladin/k8s/move.key}
  - target: {kind: Deployment, name: paladin-recover}
    patch: |-
      - {op: replace, path: /spec/template/spec/nodeSelector, value: {kubernetes.io/hostname: gpu-3}}
YAML
"$kubectl" kustomize "$work/tonode" >"$work/tonode.yaml"
"$render" template paladin "$chart" -n paladin --set namespace.create=true \
  --set checkpoint.toNode=gpu-3 >"$work/tonode-render.yaml"
check "checkpoint.toNode = deploy/k8s checkpointing to that node's mover, the recovery there" \
  "$work/tonode.yaml" "$work/tonode-render.yaml"
if out=$("$render" template paladin "$chart" -n paladin --set checkpoint.toNode=gpu-3 \
  --set mover.carryPort=0 2>&1); then
  echo "chart: FAIL: checkpoint.toNode without the movers' carry port rendered"
  failed=1
elif [[ $out != *"checkpoint.toNode: the recovery node's mover takes the images"* ]]; then
  echo "chart: FAIL: checkpoint.toNode without the movers' carry port: $out"
  failed=1
fi

# The server's storage and token as values: a node's folder instead of a claim, an existing
# claim, a StorageClass, the token's Secret from a file (trimmed, base64).
printf 'pal_%064d\n' 0 >"$work/token"
"$render" template paladin "$chart" -n paladin --set server.persistence.hostPath=/srv/paladin \
  --set server.token.create=true --set-file server.token.value="$work/token" \
  --set 'server.extraArgs={--lease,10}' >"$work/server-values.yaml"
want_token=$(printf 'pal_%064d' 0 | base64 -w0)
if grep -q 'kind: PersistentVolumeClaim' "$work/server-values.yaml" ||
  ! grep -q 'hostPath: {path: "/srv/paladin", type: DirectoryOrCreate}' "$work/server-values.yaml" ||
  ! grep -q "token: $want_token\$" "$work/server-values.yaml" ||
  ! grep -A1 -- '- "--lease"' "$work/server-values.yaml" | grep -q '"10"'; then
  echo "chart: FAIL: server.persistence.hostPath, server.token, server.extraArgs not rendered as values.yaml says"
  failed=1
else
  echo "chart: ok: server.persistence.hostPath (no claim), server.token (the Secret), server.extraArgs"
fi
"$render" template paladin "$chart" -n paladin --set server.persistence.existingClaim=mine \
  >"$work/claim.yaml"
"$render" template paladin "$chart" -n paladin --set server.persistence.storageClassName=fast \
  >"$work/class.yaml"
if grep -q 'kind: PersistentVolumeClaim' "$work/claim.yaml" ||
  ! grep -q 'claimName: mine' "$work/claim.yaml" ||
  ! grep -q 'storageClassName: "fast"' "$work/class.yaml"; then
  echo "chart: FAIL: server.persistence.existingClaim or storageClassName not rendered as values.yaml says"
  failed=1
else
  echo "chart: ok: server.persistence.existingClaim (no claim made), storageClassName"
fi

# Another namespace: the same objects once its name is put back, and none naming `paladin` as a
# namespace any more.
"$render" template gpu "$chart" -n gpu-system --set namespace.create=true >"$work/other.yaml"
sed 's/\bgpu-system\b/paladin/g' "$work/other.yaml" >"$work/other-back.yaml"
check "release namespace gpu-system (its name put back) = deploy/k8s" "$work/k8s.yaml" \
  "$work/other-back.yaml"
if left=$(grep -nE 'namespace: *"?paladin"?( |,|}|$)|serviceaccount:paladin:|\.paladin\.svc|"paladin"[],]' \
  "$work/other.yaml"); then
  echo "chart: FAIL: release namespace gpu-system: still naming the namespace paladin:"
  indent <<<"$left"
  failed=1
else
  echo "chart: ok: release namespace gpu-system: no reference to the namespace paladin left"
fi

if notes=$("$render" template paladin "$chart" -n paladin --notes) &&
  grep -q 'deploy/k8s/webhook-tls.sh -n paladin' <<<"$notes"; then
  echo "chart: ok: NOTES.txt renders"
else
  echo "chart: FAIL: NOTES.txt: $notes"
  failed=1
fi
if err=$("$render" template paladin "$chart" --set image.repository= 2>&1 >/dev/null); then
  echo "chart: FAIL: an empty image.repository was rendered"
  failed=1
elif grep -q 'image.repository' <<<"$err"; then
  echo "chart: ok: an empty image.repository refused, naming it"
else
  echo "chart: FAIL: an empty image.repository refused, but not naming it: $err"
  failed=1
fi
[[ $failed == 0 ]] && echo "chart: PASS" || echo "chart: FAIL"
exit "$failed"
