#!/usr/bin/env bash
# ctest helper: weightsync-bench server and client on loopback, as across two
# hosts. Usage: client_server.sh BENCH_EXE WORKDIR
set -euo pipefail
bench="$1" work="$2"
mkdir -p "$work"
port=$((20000 + RANDOM % 20000))
"$bench" server --port "$port" >"$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do grep -q "waiting for a client" "$work/server.log" 2>/dev/null && break; sleep 0.05; done
"$bench" client "127.0.0.1:$port" --transports tcp --sizes 1MiB --readers 1 --reps 3 --compute-rounds 1 \
  --min-gb-per-cell 0 --iperf3-seconds 0 --checkpoint-dir "$work" --json "$work/client.json"
grep -q '"transport": "tcp"' "$work/client.json"
for _ in $(seq 1 100); do grep -q "client done" "$work/server.log" && break; sleep 0.05; done
grep -q "client done" "$work/server.log"
echo "client/server: ok"
