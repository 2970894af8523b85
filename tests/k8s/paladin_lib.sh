# Sourced by the cases that need Paladin in the cluster: `paladin_start` runs Paladin's webhook and
# scheduler on this machine (the API server reaches the webhook on 127.0.0.1), prepares the node
# (its GPUs published, the library folder the webhook mounts) and registers the webhook for the
# case's namespace only; `paladin_stop` (run from the case's EXIT trap) undoes all of it, and stops
# the server `start_server` started, if any.
# Env (tests/k8s/k8s_test.sh): KUBECTL, NS, PALADIN, EMUCUDA, NODE, K8S_NODE_FLAGS, CLUSTER_DIR;
# a case may set PALADIN_WEBHOOK_FLAGS and PALADIN_SCHEDULER_FLAGS (more flags of each).
# shellcheck shell=bash

PALADIN_EMU_GPUS_SPEC=2x8GiB
# Paladin's own identity: its scheduler and mover reach the API server with the test cluster's
# admin certificate (K8S_NODE_FLAGS), whose user name this is. Only it may write Paladin's
# annotations; the cases act as a tenant with `--as` (paladin_tenant).
PALADIN_USER=paladin-test-admin
paladin_pids=()

paladin_stop() {
  local p
  "$KUBECTL" delete mutatingwebhookconfiguration "paladin-$NS" --ignore-not-found >/dev/null 2>&1 || true
  for p in "${paladin_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${paladin_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  paladin_pids=()
  stop_server
}

# start_server DIR: Paladin's server on this machine (127.0.0.1, a free port), its data in DIR, its
# log in DIR.log; sets SERVER_URL, SERVER_TOKEN_FILE (its admin token) and SERVER_PID, which the
# case stops (stop_server) when it is done or to see what happens without it. case_installed
# checks the server installed in the cluster instead.
SERVER_PID=''
start_server() {
  local dir=$1 i
  "$PALADIN" server --listen 127.0.0.1:0 --data "$dir" >"$dir.log" 2>&1 &
  SERVER_PID=$!
  for ((i = 0; i < 100; i++)); do
    [[ -s $dir/server.url && -s $dir/admin.token ]] && break
    sleep 0.1
  done
  if [[ ! -s $dir/server.url ]]; then
    echo "paladin: Paladin's server did not start: $(tail -3 "$dir.log")"
    return 1
  fi
  # shellcheck disable=SC2034 # the case's
  SERVER_URL=$(cat "$dir/server.url") SERVER_TOKEN_FILE=$dir/admin.token
}

# stop_server: stops the server start_server started, if it runs.
stop_server() {
  [[ -n $SERVER_PID ]] || return 0
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=''
}

# paladin_start PORT
paladin_start() {
  local port=$1 pki=$CLUSTER_DIR/pki work=$CLUSTER_DIR/paladin-$NS flags
  read -ra flags <<<"$K8S_NODE_FLAGS"
  mkdir -p "$work" "$CLUSTER_DIR/paladin/emu"
  # The node: each GPU's size for the scheduler, and the folder of libraries pods get.
  PALADIN_EMU_GPUS=$PALADIN_EMU_GPUS_SPEC PALADIN_EMU_STATE=$CLUSTER_DIR/paladin/emu/state \
    "$PALADIN" k8s node --node "$NODE" --nvml "$EMUCUDA" --lib-dir "$CLUSTER_DIR/paladin/lib" \
    "${flags[@]}" >"$work/node.log"
  # The webhook's serving certificate, from the cluster's CA.
  openssl ecparam -name prime256v1 -genkey -noout -out "$work/webhook.key" 2>/dev/null
  printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n' \
    >"$work/webhook.ext"
  openssl req -new -key "$work/webhook.key" -subj "/CN=paladin-webhook" 2>/dev/null |
    openssl x509 -req -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
      -days 1 -extfile "$work/webhook.ext" -out "$work/webhook.crt" 2>/dev/null
  # shellcheck disable=SC2086 # word-split on purpose: more flags
  "$PALADIN" k8s webhook --listen "127.0.0.1:$port" --cert "$work/webhook.crt" \
    --key "$work/webhook.key" --lib-dir "$CLUSTER_DIR/paladin/lib" \
    --emulated-gpus "$PALADIN_EMU_GPUS_SPEC" --emu-state-dir "$CLUSTER_DIR/paladin/emu" \
    --paladin-user "$PALADIN_USER" ${PALADIN_WEBHOOK_FLAGS:-} >"$work/webhook.log" 2>&1 &
  paladin_pids+=($!)
  # shellcheck disable=SC2086 # word-split on purpose: more flags
  "$PALADIN" k8s scheduler --interval 0.3 "${flags[@]}" ${PALADIN_SCHEDULER_FLAGS:-} \
    >"$work/scheduler.log" 2>&1 &
  paladin_pids+=($!)
  paladin_register_webhook "$port"
  # Ready once a GPU pod (a server-side dry run, which calls the webhook) comes back mutated.
  local i got
  for ((i = 0; i < 50; i++)); do
    got=$(gpu_pod probe 1Gi "" --dry-run=server -o jsonpath='{.spec.schedulerName}' 2>/dev/null) || true
    [[ $got == paladin ]] && return 0
    sleep 0.2
  done
  echo "paladin: the webhook did not answer: $(tail -3 "$work/webhook.log")"
  return 1
}

# paladin_register_webhook PORT: the webhook for the case's namespace. CREATE and UPDATE of GPU
# pods, and of any pod that has or had one of Paladin's own annotations (every paladin.io/ key but
# paladin.io/priority: refused from anyone but Paladin, also on a pod that asks for no GPU memory).
paladin_register_webhook() {
  "$KUBECTL" apply -f - >/dev/null <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: paladin-$NS}
webhooks:
- name: gpu-pods.paladin.io
  clientConfig:
    url: https://127.0.0.1:$1/mutate
    caBundle: $(base64 -w0 "$CLUSTER_DIR/pki/ca.crt")
  rules:
  - {operations: [CREATE, UPDATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: $NS}}
  matchConditions:
  - name: gpu-pod-or-paladin-annotation
    expression: >-
      object.spec.containers.exists(c, has(c.resources) && has(c.resources.limits) &&
      'paladin.io/gpu-memory' in c.resources.limits) ||
      (has(object.metadata.annotations) && object.metadata.annotations.exists(k,
      k.startsWith('paladin.io/') && k != 'paladin.io/priority')) ||
      (oldObject != null && has(oldObject.metadata.annotations) &&
      oldObject.metadata.annotations.exists(k,
      k.startsWith('paladin.io/') && k != 'paladin.io/priority'))
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 5
YAML
}

# paladin_tenant: a user of the case's namespace who is not Paladin (the ClusterRole edit there);
# `"$KUBECTL" --as paladin-test-tenant` then acts as it.
paladin_tenant() {
  "$KUBECTL" -n "$NS" create rolebinding paladin-test-tenant --clusterrole edit \
    --user paladin-test-tenant >/dev/null
}

# gpu_pod NAME GPU_MEMORY ANNOTATIONS [kubectl apply flags...]: a pod of the demo workload asking
# for GPU_MEMORY; DEMO_ARGS (a YAML list's items) replaces its arguments.
gpu_pod() {
  local name=$1 mem=$2 annotations=$3 args='"--mib", "16", "--host-mib", "1", "--every-ms", "200"'
  shift 3
  "$KUBECTL" -n "$NS" apply "$@" -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $name
  annotations: {${annotations}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: demo
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: [${DEMO_ARGS:-$args}]
    resources:
      limits: {paladin.io/gpu-memory: $mem}
YAML
}

# gpu_share_checks TAG: two pods asking for 2Gi each share GPU 0 and keep verifying generations
# while a third, asking for 1Gi, allocates past it and gets CUDA_ERROR_OUT_OF_MEMORY in its own
# log (case_gpu_share, and case_installed through the installed components). Uses the case's
# `fail` and `k`.
gpu_share_checks() {
  local tag=$1 p gpu i log_c ga gb ga2 gb2
  DEMO_ARGS='"--mib", "512", "--host-mib", "1", "--every-ms", "200"' gpu_pod a 2Gi "" >/dev/null
  DEMO_ARGS='"--mib", "512", "--host-mib", "1", "--every-ms", "200"' gpu_pod b 2Gi "" >/dev/null
  # 256 MiB, then 1 GiB more at its third generation: past its 1Gi.
  DEMO_ARGS='"--mib", "256", "--host-mib", "1", "--every-ms", "200", "--grow-mib", "1024", "--grow-at", "3"' \
    gpu_pod c 1Gi "" >/dev/null
  for p in a b; do
    k wait --for=jsonpath='{.status.phase}'=Running "pod/$p" --timeout=60s >/dev/null ||
      fail "pod $p not Running: $(k get pod "$p" -o jsonpath='{.status.conditions}')"
  done
  for p in a b c; do
    [[ $(k get pod "$p" -o jsonpath='{.spec.schedulerName}') == paladin ]] || fail "pod $p: not Paladin's"
    gpu=$(k get pod "$p" -o jsonpath='{.metadata.annotations.paladin\.io/gpu}')
    [[ $gpu == 0 ]] || fail "pod $p on GPU '$gpu', expected 0 (all fit there)"
  done
  echo "$tag: a, b and c placed on $NODE/0: $(k get pod a -o jsonpath='{.metadata.annotations.paladin\.io/placement}')"

  # c: refused by the interposer in its own container, and only c.
  for ((i = 0; i < 150; i++)); do
    [[ $(k get pod c -o jsonpath='{.status.phase}') == Failed ]] && break
    sleep 0.2
  done
  log_c=$(k logs c 2>&1)
  [[ $log_c == *CUDA_ERROR_OUT_OF_MEMORY* ]] || fail "no CUDA_ERROR_OUT_OF_MEMORY in c's log: $log_c"
  echo "$tag: c: $(grep -m1 CUDA_ERROR_OUT_OF_MEMORY <<<"$log_c")"
  echo "$tag: c: $(grep -m1 '^OOM' <<<"$log_c")"

  # a and b: the same emulated GPU (one UUID), still verifying after c's refusal.
  last_gen() { k logs "$1" | grep '^gen ' | tail -1 | awk '{print $2}'; }
  uuid() { k logs "$1" | grep -m1 '^gen ' | awk '{print $6}'; }
  [[ -n $(uuid a) && $(uuid a) == "$(uuid b)" ]] || fail "a on '$(uuid a)', b on '$(uuid b)'"
  for p in a b; do
    [[ $(k logs "$p") != *CUDA_ERROR_OUT_OF_MEMORY* ]] || fail "pod $p was refused memory"
  done
  ga=$(last_gen a) gb=$(last_gen b)
  sleep 1.5
  ga2=$(last_gen a) gb2=$(last_gen b)
  ((ga2 > ga && gb2 > gb)) || fail "neighbours stalled: a $ga -> $ga2, b $gb -> $gb2"
  for p in a b; do
    [[ $(k get pod "$p" -o jsonpath='{.status.phase}') == Running ]] || fail "pod $p not Running"
  done
  echo "$tag: a and b share $(uuid a) and run on: a gen $ga -> $ga2, b gen $gb -> $gb2"
  # A case's own checks of the running pods, if it has any.
  if declare -F gpu_share_more >/dev/null; then gpu_share_more; fi
  k delete pod a b c --wait=true --timeout=30s >/dev/null
}
