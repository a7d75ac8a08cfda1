#!/usr/bin/env bash
# A real Prometheus (Debian's `prometheus`) scrapes a running publisher and a
# subscriber (two ws_metrics_peer processes) on 127.0.0.1 every 250 ms; the
# test then asks Prometheus's HTTP API (/api/v1/query) for the 0.9 quantile of
# the pull latency (histogram_quantile over the _bucket series) and the
# version count, within a bounded wait. Exits 77 (ctest: skipped) when
# prometheus or curl is not installed.
# Usage: prometheus_scrape.sh PATH/TO/ws_metrics_peer
set -euo pipefail
peer="$1"
for tool in prometheus curl; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIPPED: $tool is not installed (apt-get install prometheus curl; scripts/install-deps.sh does)"
    exit 77
  fi
done
py=/usr/bin/python3
tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# wait_line FILE PREFIX: the rest of the first line of FILE starting with PREFIX (10 s at most).
wait_line() {
  for _ in $(seq 100); do
    line="$(grep -m1 "^$2 " "$1" 2>/dev/null || true)"
    if [ -n "$line" ]; then echo "${line#"$2 "}"; return 0; fi
    sleep 0.1
  done
  echo "no '$2' line in $1:" >&2; cat "$1" >&2; return 1
}

# stdin from a fifo we hold open: the peers stop when this script ends.
mkfifo "$tmp/stdin"
exec 3<>"$tmp/stdin"
"$peer" publish --metrics 127.0.0.1:0 --size 4194304 --period-ms 100 --seconds 40 <&3 >"$tmp/pub.out" 2>&1 &
pids+=($!)
pub_metrics="$(wait_line "$tmp/pub.out" METRICS)"
pub_address="$(wait_line "$tmp/pub.out" ADDRESS)"
"$peer" subscribe --address "$pub_address" --metrics 127.0.0.1:0 --transport tcp --seconds 40 <&3 \
  >"$tmp/sub.out" 2>&1 &
pids+=($!)
sub_metrics="$(wait_line "$tmp/sub.out" METRICS)"

prom_port="$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat >"$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 250ms
  scrape_timeout: 200ms
scrape_configs:
  - job_name: weightsync
    static_configs:
      - targets: ['$pub_metrics', '$sub_metrics']
YML
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
pids+=($!)

# query EXPR: the first result's value, or "" (no result yet).
query() {
  { curl -s --max-time 2 "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1" || true; } |
    "$py" -c 'import json,sys
try:
    r = json.load(sys.stdin)["data"]["result"]
    print(r[0]["value"][1] if r else "")
except Exception:
    print("")'
}

quantile_expr='histogram_quantile(0.9, sum by (le, transport) (rate(weightsync_subscriber_pull_duration_seconds_bucket{job="weightsync"}[3s])))'
versions_expr='max(weightsync_publisher_versions_published_total{job="weightsync"})'
pulls_expr='max(weightsync_subscriber_pulls_total{job="weightsync"})'
up_expr='sum(up{job="weightsync"})'
deadline=$((SECONDS + 20))
p90="" versions="" pulls="" up=""
while [ "$SECONDS" -lt "$deadline" ]; do
  p90="$(query "$quantile_expr")"
  versions="$(query "$versions_expr")"
  pulls="$(query "$pulls_expr")"
  up="$(query "$up_expr")"
  if [ "$up" = "2" ] && "$py" -c "import sys, math
p = float('$p90' or 'nan'); v = float('$versions' or 0); n = float('$pulls' or 0)
sys.exit(0 if (not math.isnan(p)) and 0 < p <= 60 and v >= 5 and n >= 3 else 1)"; then
    echo "Prometheus: 2 targets up, p90 pull latency ${p90} s over tcp, ${versions} versions published, ${pulls} pulled"
    exit 0
  fi
  sleep 0.5
done
echo "FAILED within 20 s: up=$up p90='$p90' versions='$versions' pulls='$pulls'" >&2
echo "--- prometheus log" >&2; tail -20 "$tmp/prometheus.log" >&2
echo "--- publisher" >&2; tail -5 "$tmp/pub.out" >&2
echo "--- subscriber" >&2; tail -5 "$tmp/sub.out" >&2
exit 1
