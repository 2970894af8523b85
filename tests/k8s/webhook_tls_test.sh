#!/usr/bin/env bash
# deploy/k8s/webhook-tls.sh renews without a window of refused pods (no cluster: a stand-in
# kubectl keeps the Secret and the MutatingWebhookConfiguration's caBundle in files): the first
# run sets the bundle to its CA alone; a renewal puts the new CA first and keeps the previous one,
# which signed the certificate the running webhook still serves; an expired CA in the bundle is
# dropped; the Secret's certificate verifies against the bundle each time, and so does the
# previous certificate after a renewal.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
command -v openssl >/dev/null || { echo "webhook_tls: SKIP: needs openssl"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "webhook_tls: FAIL: $*" >&2
  exit 1
}

# The stand-in: `create secret tls ... --dry-run=client -o yaml | apply -f -` keeps the pair,
# `get mutatingwebhookconfiguration ... jsonpath` prints the bundle, `patch` sets it.
cat >"$work/kubectl" <<'EOF'
#!/usr/bin/env bash
state=${KUBECTL_STATE:?}
args=" $* "
case $args in
  *" create secret tls "*)
    while (($#)); do
      case $1 in --cert) cp "$2" "$state/tls.crt"; shift ;; --key) cp "$2" "$state/tls.key"; shift ;; esac
      shift
    done
    echo "kind: Secret" ;;
  *" apply -f - "*) cat >/dev/null ;;
  *" get mutatingwebhookconfiguration "*) cat "$state/bundle.b64" 2>/dev/null || true ;;
  *" patch mutatingwebhookconfiguration "*)
    patch=${*: -1}
    python3 -c 'import json,sys; print(json.loads(sys.argv[1])[0]["value"])' "$patch" >"$state/bundle.b64" ;;
  *) echo "kubectl stand-in: unexpected: $*" >&2; exit 1 ;;
esac
EOF
chmod +x "$work/kubectl"
export KUBECTL_STATE=$work
bundle_count() { base64 -d "$work/bundle.b64" | grep -c 'BEGIN CERTIFICATE'; }
verifies() { # CERT: whether the bundle as the API server holds it verifies CERT
  base64 -d "$work/bundle.b64" >"$work/bundle.pem"
  openssl verify -CAfile "$work/bundle.pem" "$1" >/dev/null 2>&1
}

out=$("$repo/deploy/k8s/webhook-tls.sh" -k "$work/kubectl") || fail "first run: $out"
[[ $out == *"the new CA and 0 earlier one(s) still valid"* ]] || fail "first run said: $out"
[[ $(bundle_count) == 1 ]] || fail "first bundle holds $(bundle_count) certificates"
verifies "$work/tls.crt" || fail "the first certificate does not verify against the bundle"
cp "$work/tls.crt" "$work/first.crt"

out=$("$repo/deploy/k8s/webhook-tls.sh" -k "$work/kubectl") || fail "renewal: $out"
[[ $out == *"the new CA and 1 earlier one(s) still valid"* ]] || fail "renewal said: $out"
[[ $(bundle_count) == 2 ]] || fail "the renewed bundle holds $(bundle_count) certificates"
verifies "$work/tls.crt" || fail "the renewed certificate does not verify against the bundle"
verifies "$work/first.crt" || fail "the certificate served until the Secret is updated no longer verifies"
cmp -s "$work/tls.crt" "$work/first.crt" && fail "the renewal kept the same certificate"

# An expired CA in the bundle (a renewal a year ago) is dropped at the next one.
openssl ecparam -name prime256v1 -genkey -noout -out "$work/old.key" 2>/dev/null
openssl req -x509 -new -key "$work/old.key" -subj "/CN=paladin-webhook-ca" -days 1 \
  -not_before 20240101000000Z -not_after 20240102000000Z -out "$work/old-ca.crt" 2>/dev/null ||
  openssl x509 -in <(openssl req -new -key "$work/old.key" -subj "/CN=old" 2>/dev/null) -req \
    -signkey "$work/old.key" -days 0 -out "$work/old-ca.crt" 2>/dev/null
if openssl x509 -in "$work/old-ca.crt" -noout -checkend 0 >/dev/null 2>&1; then
  echo "webhook_tls: this openssl makes no expired certificate; the expiry case is not checked"
else
  { base64 -d "$work/bundle.b64"; cat "$work/old-ca.crt"; } | base64 -w0 >"$work/bundle.new"
  mv "$work/bundle.new" "$work/bundle.b64"
  [[ $(bundle_count) == 3 ]] || fail "the test's bundle holds $(bundle_count) certificates"
  out=$("$repo/deploy/k8s/webhook-tls.sh" -k "$work/kubectl") || fail "third run: $out"
  [[ $out == *"the new CA and 2 earlier one(s) still valid"* ]] || fail "third run said: $out"
  [[ $(bundle_count) == 3 ]] || fail "the expired CA was kept: $(bundle_count) certificates"
fi
echo "webhook_tls: PASS: a renewal keeps the previous CA beside the new one, drops an expired one"
