#!/usr/bin/env bash
# The serving certificate of Paladin's server in the cluster: a CA made for it alone signs a
# certificate for the Service paladin-server.NAMESPACE.svc (and any more names given with -a);
# the certificate, its key and the CA's certificate become the Secret paladin-server-tls, which
# the server serves HTTPS with (--tls-cert, --tls-key) and whose ca.crt the scheduler, the
# webhook and the mover trust (--paladin-ca-file). The CA's key is thrown away. An existing Secret
# is kept unless -r (replace) is given: then the server, scheduler, webhook and mover are
# restarted to take the new one. Valid 365 days: renew with -r before then.
#
#   deploy/k8s/server-tls.sh [-n NAMESPACE] [-k KUBECTL] [-a SAN]... [-r]
#
# SAN: one more name of the server, as openssl writes it (IP:10.0.0.5, DNS:paladin.example.org),
# e.g. where its clients outside the cluster reach it. For `paladin` from outside the cluster:
#   kubectl -n paladin get secret paladin-server-tls -o jsonpath='{.data.ca\.crt}' | base64 -d >ca.crt
#   PALADIN_CA_FILE=ca.crt paladin pods --server https://...
set -euo pipefail
ns=paladin kubectl=kubectl replace=0 extra=''
while getopts "n:k:a:r" opt; do
  case $opt in
    n) ns=$OPTARG ;;
    k) kubectl=$OPTARG ;;
    a)
      [[ $OPTARG =~ ^(IP|DNS):[A-Za-z0-9.:-]+$ ]] || { echo "server-tls: -a '$OPTARG': expected IP:ADDRESS or DNS:NAME" >&2; exit 2; }
      extra+=",$OPTARG" ;;
    r) replace=1 ;;
    *) sed -n '/^#   deploy/p' "$0" >&2; exit 2 ;;
  esac
done
if [[ $replace == 0 ]] && "$kubectl" -n "$ns" get secret paladin-server-tls >/dev/null 2>&1; then
  echo "server-tls: Secret $ns/paladin-server-tls exists; kept (-r replaces it)"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
umask 077
svc=paladin-server.$ns.svc
# shellcheck source=deploy/k8s/certs.sh
source "$(dirname "${BASH_SOURCE[0]}")/certs.sh"
serving_certificate "$work" paladin-server-ca "$svc" "DNS:$svc,DNS:$svc.cluster.local,DNS:paladin-server$extra"
"$kubectl" -n "$ns" create secret generic paladin-server-tls --from-file=tls.crt="$work/tls.crt" \
  --from-file=tls.key="$work/tls.key" --from-file=ca.crt="$work/ca.crt" \
  --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
echo "server-tls: Secret $ns/paladin-server-tls for $svc${extra:+ (and ${extra#,})}, valid 365 days"
if [[ $replace == 1 ]]; then
  for d in deployment/paladin-server deployment/paladin-scheduler deployment/paladin-webhook \
    daemonset/paladin-mover; do
    "$kubectl" -n "$ns" rollout restart "$d" >/dev/null 2>&1 ||
      echo "server-tls: $d not restarted (not installed?)"
  done
  echo "server-tls: server, scheduler, webhook and mover restarted to take the new certificate"
fi
