#!/usr/bin/env bash
# ctest helper: `weightsync-bench --gpu on` on a tiny tcp sweep. Where
# `nvidia-smi -L` lists a GPU, it must measure the GPU rows (exit 0, the JSON's
# gpu.measured true); elsewhere it must exit non-zero, before measuring
# anything, saying the GPU rows are not measured and why.
# Usage: gpu_on.sh BENCH_EXE WORKDIR
set -uo pipefail
bench="$1" work="$2"
mkdir -p "$work"
rm -f "$work/gpu-on.json"
"$bench" --gpu on --transports tcp --sizes 1MiB --readers 1 --reps 3 --compute-rounds 0 --min-gb-per-cell 0 \
  --iperf3-seconds 0 --checkpoint-dir "$work" --json "$work/gpu-on.json" >"$work/gpu-on.out" 2>"$work/gpu-on.err"
rc=$?
cat "$work/gpu-on.err"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  [ "$rc" -eq 0 ] || { tail -n 40 "$work/gpu-on.out"; echo "gpu on: a GPU is listed, but the bench exited $rc"; exit 1; }
  grep -q '"measured": true' "$work/gpu-on.json" || { echo "gpu on: the JSON says the GPU was not measured"; exit 1; }
  echo "gpu on: ok (measured)"
else
  [ "$rc" -ne 0 ] || { echo "gpu on: no GPU here, but the bench exited 0"; exit 1; }
  grep -q 'not measured: ' "$work/gpu-on.err" || { echo "gpu on: no 'not measured: <why>' message"; exit 1; }
  [ ! -e "$work/gpu-on.json" ] || { echo "gpu on: wrote a JSON although it refused to run"; exit 1; }
  echo "gpu on: ok (refused, exit $rc)"
fi
