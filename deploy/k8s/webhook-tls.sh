#!/usr/bin/env bash
# The webhook's serving certificate: a CA made for it alone signs a certificate for the Service
# paladin-webhook.NAMESPACE.svc; the certificate and key become the Secret paladin-webhook-tls
# and the CA the caBundle of the MutatingWebhookConfiguration `paladin`. The CA's key is thrown
# away. Valid 365 days: run it again to renew, with no restart and no window of refused pods: the
# new CA joins the caBundle beside the ones still valid there (the API server trusts the old and
# the new certificate), and the running webhook serves the new certificate from its next
# connection once the kubelet has updated the Secret in its pod (within a minute or two).
#
#   deploy/k8s/webhook-tls.sh [-n NAMESPACE] [-k KUBECTL]
set -euo pipefail
ns=paladin kubectl=kubectl
while getopts "n:k:" opt; do
  case $opt in
    n) ns=$OPTARG ;;
    k) kubectl=$OPTARG ;;
    *) sed -n '/^#   deploy/p' "$0" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
svc=paladin-webhook.$ns.svc
# shellcheck source=deploy/k8s/certs.sh
source "$(dirname "${BASH_SOURCE[0]}")/certs.sh"
serving_certificate "$work" paladin-webhook-ca "$svc" "DNS:$svc,DNS:$svc.cluster.local"
# The caBundle: the new CA, then each CA of the current bundle that has not expired (the
# certificate the webhook serves until its Secret is updated was signed by one of them).
cp "$work/ca.crt" "$work/bundle.pem"
kept=0
"$kubectl" get mutatingwebhookconfiguration paladin \
  -o jsonpath='{.webhooks[0].clientConfig.caBundle}' 2>/dev/null | base64 -d >"$work/old.pem" 2>/dev/null || true
awk -v dir="$work" '/-----BEGIN CERTIFICATE-----/ {n++} n {print > (dir "/old-" n ".pem")}' "$work/old.pem"
for old in "$work"/old-*.pem; do
  [[ -e $old ]] || continue
  if openssl x509 -in "$old" -noout -checkend 0 >/dev/null 2>&1; then
    cat "$old" >>"$work/bundle.pem"
    kept=$((kept + 1))
  fi
done
"$kubectl" -n "$ns" create secret tls paladin-webhook-tls --cert "$work/tls.crt" \
  --key "$work/tls.key" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
"$kubectl" patch mutatingwebhookconfiguration paladin --type json -p \
  "[{\"op\": \"add\", \"path\": \"/webhooks/0/clientConfig/caBundle\", \"value\": \"$(base64 -w0 "$work/bundle.pem")\"}]" \
  >/dev/null
echo "webhook-tls: Secret $ns/paladin-webhook-tls for $svc; caBundle of mutatingwebhookconfiguration/paladin" \
  "set: the new CA and $kept earlier one(s) still valid"
