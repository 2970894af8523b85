#!/usr/bin/env bash
# paladin-runc: the runtime behind Paladin's RuntimeClass `paladin` (containerd's runc v2 shim runs
# it in place of runc, BinaryName). It passes every call to runc unchanged, except two:
#
#  - `create` of a container whose OCI config carries the annotation paladin.io/restore-from=NAME
#    (copied from the pod by containerd's pod_annotations) runs `runc restore --detach` of the
#    checkpoint image $PALADIN_K8S_IMAGES/NAME/ROLE instead (ROLE: the container's name), with
#    create's bundle, pid file and console socket: the new pod's container is the restored process,
#    not a fresh start of its entrypoint. The `start` that follows is then a no-op.
#  - `create` or `start` of a container of a pod that Paladin checkpointed away (a file named by
#    its sandbox id in $PALADIN_K8S_IMAGES/moved/) is refused, so the kubelet cannot start the old
#    pod's container again while its replacement runs (the old pod is being deleted).
#
# Env (set by the node's installation; containerd passes its own environment to the shim):
#   PALADIN_RUNC        the real runc (default: runc on the PATH)
#   PALADIN_CRIU_DIR    the folder holding Paladin's `criu` wrapper, put first on runc's PATH
#   PALADIN_K8S_IMAGES  the node's checkpoint images (default /var/lib/paladin/k8s/images)
#   PALADIN_CRIU_CONFIG a CRIU configuration file for this runtime's containers (optional)
set -euo pipefail
RUNC=${PALADIN_RUNC:-runc}
IMAGES=${PALADIN_K8S_IMAGES:-/var/lib/paladin/k8s/images}
[[ -z ${PALADIN_CRIU_DIR:-} ]] || PATH=$PALADIN_CRIU_DIR:$PATH
export PATH

# containerd shows runc's error from its --log file (JSON lines), so the reason lands in the
# pod's events.
log=''
fail() {
  echo "paladin-runc: $*" >&2
  [[ -z $log ]] || jq -cn --arg m "paladin-runc: $*" '{level: "error", msg: $m}' >>"$log" || true
  exit 1
}

# runc's global options come before the command; those with a value are skipped in pairs.
args=("$@")
i=0
root=/run/runc
while ((i < ${#args[@]})); do
  case ${args[i]} in
    --root) root=${args[i + 1]}; i=$((i + 2)) ;;
    --log) log=${args[i + 1]}; i=$((i + 2)) ;;
    --log-format | --criu | --rootless) i=$((i + 2)) ;;
    --root=*) root=${args[i]#--root=}; i=$((i + 1)) ;;
    -*) i=$((i + 1)) ;;
    *) break ;;
  esac
done
cmd=${args[i]:-}
[[ $cmd == create || $cmd == start ]] || exec "$RUNC" "$@"
globals=("${args[@]:0:i}")
rest=("${args[@]:i+1}")
id=${rest[-1]}
marker=$root/$id.paladin-restored

if [[ $cmd == start ]]; then
  if [[ -f $marker ]]; then
    rm -f "$marker"
    exit 0 # restored by create: already running
  fi
  exec "$RUNC" "$@"
fi

# create: its options (containerd's shim: --bundle, --pid-file, --console-socket, --no-pivot,
# --no-new-keyring), the container id last.
bundle=. pidfile='' console=''
extra=()
for ((j = 0; j < ${#rest[@]} - 1; j++)); do
  case ${rest[j]} in
    --bundle | -b) bundle=${rest[j + 1]}; j=$((j + 1)) ;;
    --pid-file) pidfile=${rest[j + 1]}; j=$((j + 1)) ;;
    --console-socket) console=${rest[j + 1]}; j=$((j + 1)) ;;
    --no-pivot | --no-new-keyring) extra+=("${rest[j]}") ;;
    *) ;;
  esac
done
config=$bundle/config.json
[[ -f $config ]] || exec "$RUNC" "$@"
# Joined by '|' (no whitespace: read would merge empty fields), which none of the three holds.
IFS='|' read -r from sandbox role type < <(jq -r '[.annotations["paladin.io/restore-from"] // "",
  .annotations["io.kubernetes.cri.sandbox-id"] // "",
  .annotations["io.kubernetes.cri.container-name"] // "",
  .annotations["io.kubernetes.cri.container-type"] // ""] | map(gsub("[|]"; "?")) | join("|")' \
  "$config")
# CRIU's options for runc's checkpoint and restore of this container come from the config file its
# annotation org.criu.config names (runc keeps the annotation from create on): the node's
# network lock (CRIU's default, iptables, is a program nodes may lack).
if [[ -n ${PALADIN_CRIU_CONFIG:-} ]]; then
  jq --arg c "$PALADIN_CRIU_CONFIG" '.annotations["org.criu.config"] = $c' "$config" >"$config.new"
  mv "$config.new" "$config"
fi
if [[ -n $sandbox && -e $IMAGES/moved/$sandbox ]]; then
  fail "container $id of sandbox $sandbox: its pod was checkpointed away by Paladin; not started again"
fi
# The pod's annotations reach its sandbox (pause) container too: only its containers are restored.
[[ -n $from && $type == container ]] || exec "$RUNC" "$@"

# The annotation comes from a pod spec: it names an image of this node's folder, nothing else.
[[ $from =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ ]] ||
  fail "annotation paladin.io/restore-from: '$from' is not an image name ([A-Za-z0-9._-], up to 128)"
[[ $role =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ ]] || fail "container name '$role' is not a DNS label"
image=$IMAGES/$from/$role
[[ -f $image/descriptors.json ]] || fail "annotation paladin.io/restore-from: no checkpoint image $image"
work=$IMAGES/$from/$role.restore-work
mkdir -p "$work"
opts=(--image-path "$image" --work-path "$work" --bundle "$bundle" --detach)
[[ -z $pidfile ]] || opts+=(--pid-file "$pidfile")
[[ -z $console ]] || opts+=(--console-socket "$console")
# The pod's /dev/shm is a tmpfs of its sandbox, outside CRIU's image: its files (the emulated
# GPU's state among them), saved next to the image by the mover, go into the new pod's first.
shm=$(jq -r '.mounts[] | select(.destination == "/dev/shm") | .source' "$config")
if [[ -d $IMAGES/$from/$role.shm && -n $shm && -d $shm ]]; then
  cp -a "$IMAGES/$from/$role.shm/." "$shm/"
fi
"$RUNC" "${globals[@]}" restore "${opts[@]}" "${extra[@]}" "$id"
touch "$marker"
