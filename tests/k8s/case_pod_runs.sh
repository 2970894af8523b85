#!/usr/bin/env bash
# A pod from the local image of Paladin's demo workload (on the emulated GPU) reaches Running
# and its log shows generations verified. Env: KUBECTL, NS, IMAGE (tests/k8s/k8s_test.sh).
set -euo pipefail
k() { "$KUBECTL" -n "$NS" "$@"; }
k apply -f - <<YAML >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: demo}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: demo
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: ["--mib", "16", "--host-mib", "4", "--every-ms", "100"]
YAML
k wait --for=jsonpath='{.status.phase}'=Running pod/demo --timeout=60s >/dev/null
for ((i = 0; i < 100; i++)); do
  if grep -q '^gen 3 ok dev 0 ' <<<"$(k logs demo 2>/dev/null)"; then
    echo "pod_runs: demo Running on $(k get pod demo -o jsonpath='{.spec.nodeName}'):" \
      "$(k logs demo | grep -m1 '^started:')"
    k delete pod demo --wait=true --timeout=30s >/dev/null
    exit 0
  fi
  sleep 0.2
done
echo "pod_runs: no third verified generation in the log of pod demo:"
k logs demo 2>&1 | tail -5
exit 1
