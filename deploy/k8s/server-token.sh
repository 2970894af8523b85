#!/usr/bin/env bash
# The admin token of Paladin's server in the cluster: a new random token (pal_ and 64 hex digits,
# the form the server makes) as the Secret paladin-server-token, which the server takes as its
# admin token (--admin-token-file) and the scheduler, webhook and mover use to reach it. An existing
# Secret is kept unless -r (replace) is given: then the server, scheduler, webhook and mover
# are restarted to take the new one, and the old token stops working once the server has.
#
#   deploy/k8s/server-token.sh [-n NAMESPACE] [-k KUBECTL] [-r]
#
# The token, for `paladin --token` or the dashboard (an admin token: keep it to administrators):
#   kubectl -n paladin get secret paladin-server-token -o jsonpath='{.data.token}' | base64 -d
set -euo pipefail
ns=paladin kubectl=kubectl replace=0
while getopts "n:k:r" opt; do
  case $opt in
    n) ns=$OPTARG ;;
    k) kubectl=$OPTARG ;;
    r) replace=1 ;;
    *) sed -n '/^#   deploy/p' "$0" >&2; exit 2 ;;
  esac
done
if [[ $replace == 0 ]] && "$kubectl" -n "$ns" get secret paladin-server-token >/dev/null 2>&1; then
  echo "server-token: Secret $ns/paladin-server-token exists; kept (-r replaces it)"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
umask 077
printf 'pal_%s' "$(openssl rand -hex 32)" >"$work/token"
"$kubectl" -n "$ns" create secret generic paladin-server-token --from-file=token="$work/token" \
  --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
echo "server-token: Secret $ns/paladin-server-token made"
if [[ $replace == 1 ]]; then
  for d in deployment/paladin-server deployment/paladin-scheduler deployment/paladin-webhook \
    daemonset/paladin-mover; do
    "$kubectl" -n "$ns" rollout restart "$d" >/dev/null 2>&1 ||
      echo "server-token: $d not restarted (not installed?)"
  done
  echo "server-token: server, scheduler, webhook and mover restarted to take the new token"
fi
