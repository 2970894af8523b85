#!/usr/bin/env bash
# The webhook's serving certificate: a CA made for it alone signs a certificate for the Service
# paladin-webhook.NAMESPACE.svc; the certificate and key become the Secret paladin-webhook-tls
# and the CA the caBundle of the MutatingWebhookConfiguration `paladin`. The CA's key is thrown
# away: run it again to renew (valid 365 days), then restart the webhook's Deployment.
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
"$kubectl" -n "$ns" create secret tls paladin-webhook-tls --cert "$work/tls.crt" \
  --key "$work/tls.key" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
"$kubectl" patch mutatingwebhookconfiguration paladin --type json -p \
  "[{\"op\": \"add\", \"path\": \"/webhooks/0/clientConfig/caBundle\", \"value\": \"$(base64 -w0 "$work/ca.crt")\"}]" \
  >/dev/null
echo "webhook-tls: Secret $ns/paladin-webhook-tls for $svc; caBundle of mutatingwebhookconfiguration/paladin set"
