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
openssl ecparam -name prime256v1 -genkey -noout -out "$work/ca.key" 2>/dev/null
openssl req -x509 -new -key "$work/ca.key" -subj "/CN=paladin-webhook-ca" -days 365 \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
  -out "$work/ca.crt" 2>/dev/null
openssl ecparam -name prime256v1 -genkey -noout -out "$work/tls.key" 2>/dev/null
printf 'keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:%s,DNS:%s.cluster.local\n' \
  "$svc" "$svc" >"$work/ext"
openssl req -new -key "$work/tls.key" -subj "/CN=$svc" 2>/dev/null |
  openssl x509 -req -CA "$work/ca.crt" -CAkey "$work/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
    -days 365 -extfile "$work/ext" -out "$work/tls.crt" 2>/dev/null
"$kubectl" -n "$ns" create secret tls paladin-webhook-tls --cert "$work/tls.crt" \
  --key "$work/tls.key" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
"$kubectl" patch mutatingwebhookconfiguration paladin --type json -p \
  "[{\"op\": \"add\", \"path\": \"/webhooks/0/clientConfig/caBundle\", \"value\": \"$(base64 -w0 "$work/ca.crt")\"}]" \
  >/dev/null
echo "webhook-tls: Secret $ns/paladin-webhook-tls for $svc; caBundle of mutatingwebhookconfiguration/paladin set"
