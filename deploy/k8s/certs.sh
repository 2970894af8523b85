# Sourced by deploy/k8s/webhook-tls.sh and server-tls.sh: a serving certificate signed by a CA
# made for it alone (ECDSA P-256, valid 365 days), the CA's key thrown away with the folder.
#
#   serving_certificate DIR CA_NAME CN SANS
#
# writes DIR/ca.crt, DIR/tls.crt and DIR/tls.key; SANS as openssl's subjectAltName
# (DNS:a,DNS:b,IP:10.0.0.5).
serving_certificate() {
  local dir=$1 ca_name=$2 cn=$3 sans=$4
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$dir/ca.key" -subj "/CN=$ca_name" -days 365 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
    -out "$dir/ca.crt" 2>/dev/null
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/tls.key" 2>/dev/null
  printf 'keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' \
    "$sans" >"$dir/ext"
  openssl req -new -key "$dir/tls.key" -subj "/CN=$cn" 2>/dev/null |
    openssl x509 -req -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
      -days 365 -extfile "$dir/ext" -out "$dir/tls.crt" 2>/dev/null
  rm -f "$dir/ca.key"
}
