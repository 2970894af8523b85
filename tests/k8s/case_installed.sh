#!/usr/bin/env bash
# Paladin installed into the cluster from its Helm chart (deploy/helm/paladin, rendered by
# tests/k8s/chart_render, the stand-in for `helm template`) or, without the renderer, from its
# manifests (deploy/k8s, `kubectl apply -k`): the image of its components made by
# deploy/k8s/image.sh and imported into the node's containerd, the scheduler and webhook
# Deployments and the node DaemonSet running as pods, with emulated GPUs (deploy/k8s/emulated,
# the chart's emulatedGPUs). Then case_gpu_share's checks through them: two GPU pods share GPU 0
# under their quotas, a third past its own gets CUDA_ERROR_OUT_OF_MEMORY in its log. Uninstalled
# at the end, also on failure.
#
# The test cluster differs from a user's in three ways, each patched by an overlay made here
# (and given to the chart as values, whose render must be the overlay's objects):
# it has no kube-proxy and no route from the host to pod addresses, so the components run with
# hostNetwork and reach the API server at 127.0.0.1 (KUBERNETES_SERVICE_HOST/PORT), and the
# API server reaches the webhook at a URL on 127.0.0.1 instead of its Service; its certificate
# comes from the cluster's CA; the node's folders are in the cluster's directory, not
# /var/lib/paladin; and the webhook is registered for the case's namespace only.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, IMAGE, PALADIN, EMUCUDA, NODE, CLUSTER_DIR;
# PALADIN_CHART_RENDER (ctest sets it where chart_render is built).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$(dirname "$here")")
k() { "$KUBECTL" -n "$NS" "$@"; }
fail() {
  echo "installed: FAIL: $*" >&2
  # What the components said and how they ended, before the uninstall removes them.
  local p
  for p in $("$KUBECTL" -n paladin get pods -o name 2>/dev/null); do
    echo "installed: $p: $("$KUBECTL" -n paladin get "$p" -o jsonpath='{.status.containerStatuses[0].lastState.terminated}' 2>&1)" >&2
    "$KUBECTL" -n paladin logs "$p" --previous 2>/dev/null | tail -5 | sed "s|^|installed:   $p (previous): |" >&2 || true
    "$KUBECTL" -n paladin logs "$p" 2>&1 | tail -5 | sed "s|^|installed:   $p: |" >&2 || true
  done
  exit 1
}
if [[ -z ${CLUSTER_DIR:-} ]]; then
  echo "installed: SKIP: imports an image into the test cluster's containerd"
  exit 77
fi
# shellcheck source=tests/k8s/paladin_lib.sh
source "$here/paladin_lib.sh"
t0=$SECONDS
work=$CLUSTER_DIR/installed
mkdir -p "$work/overlay" "$work/lib" "$work/emu"
api_port=$("$KUBECTL" config view -o jsonpath='{.clusters[0].cluster.server}')
api_port=${api_port##*:}
port=19446
overlay=$work/overlay

render=${PALADIN_CHART_RENDER:--}
[[ -x $render ]] || render=
installed_from=$work/installed.yaml

uninstall() {
  if [[ -f $installed_from ]]; then
    "$KUBECTL" delete -f "$installed_from" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  "$KUBECTL" label node "$NODE" paladin.io/gpu-node- >/dev/null 2>&1 || true
  # The components' pods end with their namespace; wait for them, so that the next case does not
  # meet a second scheduler or a webhook still answering.
  "$KUBECTL" wait --for=delete namespace/paladin --timeout=60s >/dev/null 2>&1 || true
}
trap uninstall EXIT

# The image, as a user makes it, loaded as a node without a registry loads it.
"$repo/deploy/k8s/image.sh" "$(dirname "$(readlink -f "$PALADIN")")" "$work/paladin.tar" \
  paladin.local/paladin:test >/dev/null
"$(dirname "$KUBECTL")/ctr" --address "$CLUSTER_DIR/containerd/containerd.sock" -n k8s.io \
  images import "$work/paladin.tar" >/dev/null
echo "installed: image paladin.local/paladin:test ($(($(stat -c %s "$work/paladin.tar") >> 20)) MiB) imported in $((SECONDS - t0)) s"

# The webhook's certificate for 127.0.0.1, from the cluster's CA.
pki=$CLUSTER_DIR/pki
openssl ecparam -name prime256v1 -genkey -noout -out "$overlay/tls.key" 2>/dev/null
printf 'keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n' >"$work/ext"
openssl req -new -key "$overlay/tls.key" -subj "/CN=paladin-webhook" 2>/dev/null |
  openssl x509 -req -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
    -days 1 -extfile "$work/ext" -out "$overlay/tls.crt" 2>/dev/null

# The tests' build has ASan, whose shadow memory is past the manifests' limits (sized for a
# release build).
limits="{requests: {cpu: 10m, memory: 32Mi}, limits: {memory: 4Gi}}"
in_cluster_env="[{name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}, {name: KUBERNETES_SERVICE_PORT, value: \"$api_port\"}]"
cat >"$overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath --relative-to="$overlay" "$repo/deploy/k8s/emulated")
labels:
  - pairs: {app.kubernetes.io/part-of: paladin}
images:
  - {name: paladin.local/paladin, newTag: test}
secretGenerator:
  - name: paladin-webhook-tls
    namespace: paladin
    type: kubernetes.io/tls
    files: [tls.crt, tls.key]
    options: {disableNameSuffixHash: true}
patches:
  - target: {kind: Deployment, name: paladin-scheduler}
    patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: paladin-scheduler}
      spec:
        template:
          spec:
            hostNetwork: true
            containers:
              - name: scheduler
                command: [/usr/local/bin/paladin, k8s, scheduler, --interval, "0.3"]
                env: $in_cluster_env
                resources: $limits
  - target: {kind: DaemonSet, name: paladin-node}
    patch: |-
      apiVersion: apps/v1
      kind: DaemonSet
      metadata: {name: paladin-node}
      spec:
        template:
          spec:
            hostNetwork: true
            containers:
              - name: node
                resources: $limits
            volumes:
              - {name: lib, hostPath: {path: $work/lib, type: Directory}}
              - {name: emu, hostPath: {path: $work/emu, type: Directory}}
  # After the node's own variables (as the chart's node.extraEnv), not before them.
  - target: {kind: DaemonSet, name: paladin-node}
    patch: |-
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_PORT, value: "$api_port"}}
  - target: {kind: Deployment, name: paladin-webhook}
    patch: |-
      - {op: add, path: /spec/template/spec/hostNetwork, value: true}
      - op: replace
        path: /spec/template/spec/containers/0/command
        value: [/usr/local/bin/paladin, k8s, webhook, --listen, "127.0.0.1:$port",
                --cert, /tls/tls.crt, --key, /tls/tls.key, --lib-dir, $work/lib,
                --paladin-user, "system:serviceaccount:paladin:paladin-scheduler",
                --emulated-gpus, $PALADIN_EMU_GPUS_SPEC, --emu-state-dir, $work/emu]
      - {op: replace, path: /spec/template/spec/containers/0/resources, value: $limits}
      - op: replace
        path: /spec/template/spec/containers/0/ports
        value: [{name: https, containerPort: $port}]
      - op: replace
        path: /spec/template/spec/containers/0/readinessProbe/httpGet
        value: {host: 127.0.0.1, path: /healthz, port: $port, scheme: HTTPS}
  - target: {kind: Service, name: paladin-webhook}
    patch: |-
      - {op: replace, path: /spec/ports/0/targetPort, value: $port}
  - target: {kind: MutatingWebhookConfiguration, name: paladin}
    patch: |-
      - op: replace
        path: /webhooks/0/clientConfig
        value:
          url: https://127.0.0.1:$port/mutate
          caBundle: $(base64 -w0 "$pki/ca.crt")
      - op: replace
        path: /webhooks/0/namespaceSelector
        value: {matchLabels: {kubernetes.io/metadata.name: $NS}}
YAML
"$KUBECTL" kustomize "$overlay" >"$work/overlay.yaml"
if [[ -n $render ]]; then
  # The same differences as the chart's values; its render must be the overlay's objects.
  cat >"$work/values.yaml" <<YAML
namespace: {create: true}
image: {tag: test}
emulatedGPUs: {enabled: true, gpus: $PALADIN_EMU_GPUS_SPEC}
hostPaths: {lib: $work/lib, emu: $work/emu, type: Directory}
scheduler: {interval: "0.3", hostNetwork: true, extraEnv: $in_cluster_env, resources: $limits}
node: {hostNetwork: true, extraEnv: $in_cluster_env, resources: $limits}
webhook:
  hostNetwork: true
  listenHost: 127.0.0.1
  port: $port
  resources: $limits
  url: https://127.0.0.1:$port/mutate
  caBundle: $(base64 -w0 "$pki/ca.crt")
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: $NS}}
  tls: {create: true}
YAML
  "$render" template paladin "$repo/deploy/helm/paladin" -n paladin -f "$work/values.yaml" \
    --set-file webhook.tls.cert="$overlay/tls.crt" --set-file webhook.tls.key="$overlay/tls.key" \
    >"$work/chart.yaml"
  diff=$("$render" compare "$work/overlay.yaml" "$work/chart.yaml") ||
    fail "the chart's render with the test's values differs from the test's overlay: $diff"
  cp "$work/chart.yaml" "$installed_from"
  echo "installed: from the Helm chart (rendered by chart_render; the overlay's objects: $diff)"
else
  cp "$work/overlay.yaml" "$installed_from"
  echo "installed: from deploy/k8s/emulated through the test's overlay (no chart_render built)"
fi
"$KUBECTL" label node "$NODE" paladin.io/gpu-node=true >/dev/null
"$KUBECTL" apply -f "$installed_from" >/dev/null
for d in deployment/paladin-scheduler deployment/paladin-webhook daemonset/paladin-node; do
  "$KUBECTL" -n paladin rollout status "$d" --timeout=90s >/dev/null ||
    fail "$d not ready: $("$KUBECTL" -n paladin get pods -o wide 2>&1 | tail -5)"
done
# The manifests as a user applies them (real GPUs), accepted by the API server: a dry run, over
# what is installed.
"$KUBECTL" apply --dry-run=server -k "$repo/deploy/k8s" >/dev/null ||
  fail "deploy/k8s refused by the API server (dry run)"
if [[ -n $render ]]; then
  # And the chart's render with its defaults, as `helm install -n paladin` would create it.
  "$render" template paladin "$repo/deploy/helm/paladin" -n paladin >"$work/chart-default.yaml"
  "$KUBECTL" apply --dry-run=server -f "$work/chart-default.yaml" >/dev/null ||
    fail "the chart's default render refused by the API server (dry run)"
fi
echo "installed: scheduler, webhook and node running as pods $((SECONDS - t0)) s after the start:" \
  "$("$KUBECTL" -n paladin get pods --no-headers -o custom-columns=N:.metadata.name | tr '\n' ' ')"
# The node published its GPUs and filled the library folder from inside its pod.
for ((i = 0; i < 50; i++)); do
  [[ -e $work/lib/libcuda.so.1 ]] && break
  sleep 0.2
done
[[ -e $work/lib/libcuda.so.1 ]] || fail "the node's pod did not fill $work/lib: $("$KUBECTL" -n paladin logs daemonset/paladin-node 2>&1 | tail -3)"
echo "installed: node: $("$KUBECTL" -n paladin logs daemonset/paladin-node | grep -m1 'paladin.io/gpu-memory =')"
# Ready once a GPU pod (a server-side dry run, which calls the webhook) comes back mutated.
for ((i = 0; i < 50; i++)); do
  got=$(gpu_pod probe 1Gi "" --dry-run=server -o jsonpath='{.spec.schedulerName}' 2>/dev/null) || true
  [[ $got == paladin ]] && break
  sleep 0.2
done
[[ $got == paladin ]] || fail "the installed webhook did not mutate a GPU pod: $("$KUBECTL" -n paladin logs deployment/paladin-webhook 2>&1 | tail -3)"

gpu_share_checks installed
# The placement was the installed scheduler's: its log names the pods.
grep -q "placing pods" <<<"$("$KUBECTL" -n paladin logs deployment/paladin-scheduler)" ||
  fail "the installed scheduler's log: $("$KUBECTL" -n paladin logs deployment/paladin-scheduler | tail -3)"
echo "installed: installed and checked in $((SECONDS - t0)) s"
