#!/usr/bin/env bash
# What HTTPS costs the server's API, on loopback, against plain HTTP measured in the same run
# (one `paladin server` of each, alternated ROUNDS times):
#   1. N requests on one kept-alive connection (curl, one process): GET /v1/jobs with the admin
#      token, the time per request;
#   2. CONNS requests each on a new connection (a curl each): the TLS handshake included.
# Prints each round's medians and the HTTPS / HTTP ratios.
#
#   [N=500] [CONNS=100] [ROUNDS=3] bench/http_tls.sh [PALADIN]
#
# Debug build, the 2-core build machine, 2026-12-05 (bench/http_tls.sh build/debug/paladin):
# kept alive 0.23-0.28 ms per request plain, 0.25-0.26 ms HTTPS (ratio 0.94-1.10, noise); a new
# connection each 0.53-0.62 ms plain, 3.6-3.9 ms HTTPS (ratio 6.4-6.9: the handshake, both
# ends on the same two cores).
set -euo pipefail
paladin=$(realpath "${1:-build/release/paladin}")
N=${N:-500} CONNS=${CONNS:-100} ROUNDS=${ROUNDS:-3}
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
start() { # NAME [FLAGS...]: a server, its URL in $work/NAME/server.url
  local name=$1
  shift
  "$paladin" server --data "$work/$name" --listen 127.0.0.1:0 "$@" 2>"$work/$name.log" &
  pids+=($!)
  for _ in $(seq 100); do [[ -s $work/$name/server.url ]] && return; sleep 0.1; done
  echo "server $name did not start: $(cat "$work/$name.log")" >&2
  exit 1
}
start plain
start tls --tls-cert "$work/cert.pem" --tls-key "$work/key.pem"
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
# ms per request over one connection; ms per request each on its own connection.
kept() {
  local url token args=()
  url=$(cat "$work/$1/server.url") token=$(cat "$work/$1/admin.token")
  for _ in $(seq "$N"); do args+=(-o /dev/null "$url/v1/jobs"); done
  # The first request opens the connection (and shakes hands); the rest reuse it.
  curl -s --cacert "$work/cert.pem" -H "Authorization: Bearer $token" \
    -w '%{time_total} %{time_appconnect} %{time_pretransfer}\n' "${args[@]}" |
    awk 'NR > 1 {print ($1 - $3) * 1000}' | median
}
fresh() {
  local url token
  url=$(cat "$work/$1/server.url") token=$(cat "$work/$1/admin.token")
  for _ in $(seq "$CONNS"); do
    curl -s --cacert "$work/cert.pem" -H "Authorization: Bearer $token" -o /dev/null \
      -w '%{time_total}\n' "$url/v1/jobs"
  done | awk '{print $1 * 1000}' | median
}
printf '%-6s %-22s %-22s %-10s %-10s\n' round "kept-alive ms (http/https)" "new conn ms (http/https)" "ratio kept" "ratio new"
for r in $(seq "$ROUNDS"); do
  kp=$(kept plain) kt=$(kept tls) fp=$(fresh plain) ft=$(fresh tls)
  printf '%-6s %-26s %-24s %-10s %-10s\n' "$r" "$kp / $kt" "$fp / $ft" \
    "$(awk -v a="$kt" -v b="$kp" 'BEGIN {printf "%.2f", a / b}')" \
    "$(awk -v a="$ft" -v b="$fp" 'BEGIN {printf "%.2f", a / b}')"
done
