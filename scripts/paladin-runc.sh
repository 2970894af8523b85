#!/usr/bin/env bash
# paladin-runc: the runtime behind Paladin's RuntimeClass `paladin` (containerd's runc v2 shim runs
# it in place of runc, BinaryName). It passes every call to runc unchanged, except two:
#
#  - `create` of a container whose OCI config carries the annotation paladin.io/restore-from=NAME
#    (copied from the pod by containerd's pod_annotations) runs `runc restore --detach` of the
#    checkpoint image $PALADIN_K8S_IMAGES/NAME/ROLE instead (ROLE: the container's name), with
#    create's bundle, pid file and console socket: the new pod's container is the restored process,
#    not a fresh start of its entrypoint. The `start` that follows is then a no-op.
#    Only a pod that Paladin's move created restores, and only the image made for it: the image's
#    folder records the namespace it was taken in and the pod it is for (`owner`, written by
#    paladin k8s move), the pod carries paladin.io/restore-token, an HMAC-SHA256 under the node's
#    key ($PALADIN_K8S_MOVE_KEY) over the image's name and the pod's namespace and name, and an
#    image is restored once. The namespace and name checked are containerd's (the kubelet's),
#    never the pod spec's.
#  - `create` or `start` of a container of a pod that Paladin checkpointed away (a file named by
#    its sandbox id in $PALADIN_K8S_IMAGES/moved/) is refused, so the kubelet cannot start the old
#    pod's container again while its replacement runs (the old pod is being deleted).
#
# Env (set by the node's installation; containerd passes its own environment to the shim):
#   PALADIN_RUNC        the real runc (default: runc on the PATH)
#   PALADIN_CRIU_DIR    the folder holding Paladin's `criu` wrapper, put first on runc's PATH
#   PALADIN_K8S_IMAGES  the node's checkpoint images (default /var/lib/paladin/k8s/images)
#   PALADIN_CRIU_CONFIG a CRIU configuration file for this runtime's containers (optional)
#   PALADIN_K8S_MOVE_KEY the node's move key, hex (default /var/lib/paladin/k8s/move.key)
#   PALADIN_K8S_PALADIN  Paladin's binary: restores a GPU pod's GPU state right after the pod
#                        (`paladin k8s gpu-restore`; unset: the mover does it from its node)
#   PALADIN_K8S_DRIVER, PALADIN_K8S_NVML  the CUDA driver and NVML for it (default the node's)
set -euo pipefail
RUNC=${PALADIN_RUNC:-runc}
IMAGES=${PALADIN_K8S_IMAGES:-/var/lib/paladin/k8s/images}
MOVE_KEY=${PALADIN_K8S_MOVE_KEY:-/var/lib/paladin/k8s/move.key}
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

# HMAC-SHA256 (RFC 2104) of MESSAGE under the key in hex, in hex. Written out in the shell so
# that the key is never an argument of a process (another process's /proc could read it).
hmac_sha256() { # KEY_HEX MESSAGE
  local key=$1 message=$2 i b x ipad='' opad='' inner
  for ((i = 0; i < 64; i++)); do
    b=0
    [[ -z ${key:2*i:2} ]] || b=$((16#${key:2*i:2}))
    printf -v x '\\x%02x' $((b ^ 0x36))
    ipad+=$x
    printf -v x '\\x%02x' $((b ^ 0x5c))
    opad+=$x
  done
  # shellcheck disable=SC2059 # the pads are escapes, printf's format on purpose
  inner=$({ printf "$ipad"; printf '%s' "$message"; } | sha256sum | cut -c1-64)
  # shellcheck disable=SC2059,SC2001
  { printf "$opad"; printf "$(sed 's/../\\x&/g' <<<"$inner")"; } | sha256sum | cut -c1-64
}

# Whether pod NS/NAME may restore IMAGE's container ROLE: the image was taken in its namespace for
# it (the owner file paladin k8s move wrote), its token is the node key's, and it is not taken.
trusted() { # IMAGE ROLE NS NAME TOKEN
  local from=$1 role=$2 ns=$3 name=$4 token=$5 owner_ns='' owner_pod='' k v key
  [[ -n $ns && -n $name ]] || fail "container of image $from: containerd gave no pod namespace or name"
  [[ -f $IMAGES/$from/owner ]] || fail "image $from has no owner record: not made by paladin k8s move"
  while read -r k v; do
    case $k in
      namespace) owner_ns=$v ;;
      pod) owner_pod=$v ;;
    esac
  done <"$IMAGES/$from/owner"
  [[ $owner_ns == "$ns" ]] ||
    fail "pod $ns/$name may not restore image $from: it was taken in namespace '$owner_ns'"
  [[ $owner_pod == "$name" ]] ||
    fail "pod $ns/$name may not restore image $from: it was made for pod $owner_ns/$owner_pod"
  [[ -n $token ]] || fail "pod $ns/$name names image $from but carries no paladin.io/restore-token"
  [[ -r $MOVE_KEY ]] || fail "no node move key at $MOVE_KEY: restores are refused"
  read -r key <"$MOVE_KEY"
  [[ $key =~ ^[0-9a-fA-F]{64,128}$ ]] || fail "the node move key $MOVE_KEY is not 32-64 bytes of hex"
  [[ $(hmac_sha256 "$key" $'paladin-restore-v1\n'"$from"$'\n'"$ns"$'\n'"$name"$'\n') == "$token" ]] ||
    fail "pod $ns/$name: paladin.io/restore-token is not the node's token for image $from and this pod"
  [[ ! -e $IMAGES/$from/$role.restored ]] ||
    fail "image $from was restored already (into $(cat "$IMAGES/$from/$role.restored")): it is restored once"
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
# Each annotation is read on its own, so that no value can shift another (a newline in one once
# emptied the sandbox id that the refusal below needs), and one holding a control character,
# which none of them legitimately does, is refused.
annotation() { # KEY: its value, '' when absent
  jq -er --arg k "$1" '(.annotations[$k] // "") as $v
    | if ($v | type) != "string" then error("not a string")
      elif ($v | explode | any(. < 32 or . == 127)) then error("a control character")
      else $v end' "$config" ||
    fail "annotation $1: not a string, or it holds a control character: refused"
}
sandbox=$(annotation io.kubernetes.cri.sandbox-id) || exit 1
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
from=$(annotation paladin.io/restore-from) || exit 1
type=$(annotation io.kubernetes.cri.container-type) || exit 1
role=$(annotation io.kubernetes.cri.container-name) || exit 1
token=$(annotation paladin.io/restore-token) || exit 1
pod_ns=$(annotation io.kubernetes.cri.sandbox-namespace) || exit 1
pod_name=$(annotation io.kubernetes.cri.sandbox-name) || exit 1
# The pod's annotations reach its sandbox (pause) container too: only its containers are restored.
[[ -n $from && $type == container ]] || exec "$RUNC" "$@"

# The annotation comes from a pod spec: it names an image of this node's folder, nothing else.
[[ $from =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ ]] ||
  fail "annotation paladin.io/restore-from: '$from' is not an image name ([A-Za-z0-9._-], up to 128)"
[[ $role =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ ]] || fail "container name '$role' is not a DNS label"
image=$IMAGES/$from/$role
[[ -f $image/descriptors.json ]] || fail "annotation paladin.io/restore-from: no checkpoint image $image"
trusted "$from" "$role" "$pod_ns" "$pod_name" "$token"
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
# A GPU pod's GPU state, checkpointed with it (the image's owner record names the GPU it was
# taken on), goes back here onto the GPU its binding gave it (paladin.io/gpu) where this runtime
# is set up for it (PALADIN_K8S_PALADIN): on the node itself, so the mover need not reach the
# node's processes. Otherwise the mover or the recovery does it once the pod runs.
from_uuid=$(sed -n 's/^gpu \(GPU-[0-9A-Za-z-]*\)$/\1/p' "$IMAGES/$from/owner" | head -1)
if [[ -n $from_uuid && -n ${PALADIN_K8S_PALADIN:-} ]]; then
  undo() { # WHY: the restored container removed, create refused
    "$RUNC" "${globals[@]}" delete --force "$id" >/dev/null 2>&1 || true
    fail "$1"
  }
  gpu=$(annotation paladin.io/gpu) || undo "annotation paladin.io/gpu unreadable"
  [[ $gpu =~ ^[0-9]{1,4}$ ]] || undo "annotation paladin.io/gpu '$gpu' is not a GPU index"
  if ! out=$("$PALADIN_K8S_PALADIN" k8s gpu-restore "$id" --gpu "$gpu" --from-uuid "$from_uuid" \
    --runc "$RUNC" --runc-root "$root" --driver "${PALADIN_K8S_DRIVER:-libcuda.so.1}" \
    --nvml "${PALADIN_K8S_NVML:-libnvidia-ml.so.1}" 2>&1); then
    undo "the GPU state of container $id not restored onto GPU $gpu: ${out##*$'\n'}"
  fi
  : >"$IMAGES/$from/$role.gpu-restored"
fi
touch "$marker"
# Restored once: the same annotations on another pod (a replay) find it taken.
echo "$pod_ns/$pod_name $id" >"$IMAGES/$from/$role.restored"
