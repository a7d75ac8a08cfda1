#!/usr/bin/env bash
# One RL run on this host: the trainer and N generators as separate processes
# (localhost; the weight transport is negotiated). The trainer's progress goes
# to the console; everything lands in --out: trainer.jsonl, generator-K.jsonl,
# timeline-*.jsonl, *.log and the RL checkpoint (policy.safetensors).
#
# Usage: scripts/rl-run.sh --start SFT_DIR --out DIR [--mode sync|async]
#          [--generators N] [--steps N] [--prompts P] [--group-size G]
#          [--temperature T] [--batch-groups B] [--device cpu|cuda] [--resume]
#          [-- more trainer options]
# The trainer runs the SFT warm start into SFT_DIR first if it is empty.
# --device goes to the trainer and every generator (default cpu).
# Across hosts run the same two executables yourself: see docs/rl_loop.md.
# Unless WEIGHTSYNC_SECRET is set, every process of the run gets a random
# per-run secret, also written to DIR/secret (mode 0600) so you can attach
# another process: WEIGHTSYNC_SECRET="$(cat DIR/secret)" build/bin/generator ...
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"

start="" out="" mode=async generators=2 steps=40 prompts=4 group_size=8 temperature=0.7 batch_groups=8 resume=""
device=cpu
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --start) start="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --mode) mode="$2"; shift 2 ;;
    --generators) generators="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --prompts) prompts="$2"; shift 2 ;;
    --group-size) group_size="$2"; shift 2 ;;
    --temperature) temperature="$2"; shift 2 ;;
    --batch-groups) batch_groups="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --resume) resume="--resume"; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "rl-run: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$start" ] && [ -n "$out" ] || { echo "rl-run: --start and --out are required (see --help)" >&2; exit 2; }
for tool in trainer generator; do
  [ -x "$build/bin/$tool" ] || { echo "rl-run: $build/bin/$tool is missing; run scripts/build.sh --target trainer generator" >&2; exit 2; }
done
mkdir -p "$out"
rm -f "$out/address.json"
# Before any process starts: the trainer and the generators read it.
. "$root/scripts/run-secret.sh"
ws_run_secret "$out" rl-run

# async: each generator sends its share of a step's groups and may run two
# steps ahead of the trainer (generator --groups-per-version, --max-ahead).
share=$(( (batch_groups + generators - 1) / generators ))

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$build/bin/trainer" --start "$start" --out "$out" --mode "$mode" --steps "$steps" \
  --generators "$generators" --prompts-per-round "$prompts" --temperature "$temperature" \
  --batch-groups "$batch_groups" --device "$device" --threads 2 --address-file "$out/address.json" $resume "${extra[@]}" \
  > >(tee -a "$out/trainer.log") 2>&1 &
trainer_pid=$!

until [ -s "$out/address.json" ]; do
  kill -0 "$trainer_pid" 2>/dev/null || { wait "$trainer_pid"; echo "rl-run: the trainer exited before serving (see $out/trainer.log)" >&2; exit 1; }
  sleep 0.2
done
weights=$(sed -n 's/.*"weights":"\([^"]*\)".*/\1/p' "$out/address.json")
trajectories=$(sed -n 's/.*"trajectories":"\([^"]*\)".*/\1/p' "$out/address.json")

for id in $(seq 0 $((generators - 1))); do
  "$build/bin/generator" --trainer "$weights" --trajectories "$trajectories" --checkpoint "$start" \
    --id "$id" --mode "$mode" --prompts "$prompts" --group-size "$group_size" --temperature "$temperature" \
    --groups-per-version "$share" --max-ahead 2 --device "$device" --threads 1 --out "$out" >> "$out/generator-$id.log" 2>&1 &
  pids+=($!)
done

status=0
wait "$trainer_pid" || status=$?
exit "$status"
