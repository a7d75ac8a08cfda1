#!/usr/bin/env bash
# The reported RL runs of docs/results.md (issue 33): each algorithm x seed
# from the same warm start, every run evaluated on 200 held-out easy and
# medium tasks, the SFT-only control, and one rl-report over all of them
# that checks the targets.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/rl-seeds.sh [--out DIR] [--seeds N] [--steps N] [--start SFT_DIR]
                           [--algorithms LIST] [--no-control] [-- more options for every trainer]

For seeds 1..N (default 3) and each algorithm of LIST (default
grpo-sync,grpo-async,reinforce-ema,decoupled-ppo), one scripts/rl-run.sh run at the
demo's settings (2 generators, compositional:medium, periodic evaluation on medium and
easy every 10 steps), seed by seed so that drift on a shared machine hits every
algorithm alike:
  grpo-sync      --mode sync  --algorithm grpo
  grpo-async     --mode async --algorithm grpo
  reinforce-ema  --mode async --algorithm reinforce --baseline running (the Monarch
                 notebook's REINFORCE with a running-mean baseline; no dynamic filter:
                 r - b carries signal in every group)
  decoupled-ppo  --mode async --algorithm decoupled --minibatches 4 (AReaL's decoupled
                 PPO objective, 4 minibatches a step)
Each run is evaluated greedily (zorplex-eval, 200 held-out tasks of seed 42, easy and
medium); then the SFT-only control (scripts/sft-control.sh) gets the median run's wall
time; then rl-report --run ALGORITHM/SEED=DIR ... writes DIR/report.json and prints the
table and the targets (docs/rl_loop.md). About 4-5 minutes a run on 2 vCPUs.

  --out DIR         where the runs go (default build/rl-seeds)
  --seeds N         seeds per algorithm (default 3)
  --steps N         trainer steps per run (default 30, the demo's)
  --start DIR       the SFT warm start (default: the demo's cache,
                    ~/.cache/weightsync/sft-v3-1200; scripts/demo.sh makes it)
  --algorithms LIST comma-separated, from the four above
  --no-control      skip the SFT-only control
  --help            this text
Options after -- go to every trainer (e.g. -- --lr 1e-4 --credit first-error).
Build first: scripts/build.sh --target trainer generator zorplex-sft zorplex-eval rl-report
Keep the machine otherwise quiet: trajectories per second and wall times are reported.
USAGE
}

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"
out="$build/rl-seeds" seeds=3 steps=30 algorithms="grpo-sync,grpo-async,reinforce-ema,decoupled-ppo" control=1
start="${WEIGHTSYNC_CACHE_DIR:-$HOME/.cache/weightsync}/sft-v3-1200"
trainer_extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --start) start="$2"; shift 2 ;;
    --algorithms) algorithms="$2"; shift 2 ;;
    --no-control) control=""; shift ;;
    --) shift; trainer_extra=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) echo "rl-seeds: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -f "$start/policy.safetensors" ] ||
  { echo "rl-seeds: no warm start in $start (run scripts/demo.sh once, or pass --start)" >&2; exit 2; }
for tool in bin/trainer bin/generator rl/zorplex-sft rl/zorplex-eval rl/rl-report; do
  [ -x "$build/$tool" ] || { echo "rl-seeds: $build/$tool is missing; run scripts/build.sh --target trainer generator zorplex-sft zorplex-eval rl-report" >&2; exit 2; }
done
settings_of() {  # the rl-run.sh options of an algorithm name
  case "$1" in
    grpo-sync) echo "--mode sync" ;;
    grpo-async) echo "--mode async" ;;
    reinforce-ema) echo "--mode async -- --algorithm reinforce --baseline running" ;;
    decoupled-ppo) echo "--mode async -- --algorithm decoupled --minibatches 4" ;;
    *) return 1 ;;
  esac
}
IFS=, read -r -a names <<<"$algorithms"
for name in "${names[@]}"; do
  settings_of "$name" >/dev/null || { echo "rl-seeds: unknown algorithm $name (see --help)" >&2; exit 2; }
done
mkdir -p "$out"
. "$root/scripts/run-secret.sh"
ws_run_secret "$out" rl-seeds

evaluate() {  # evaluate CHECKPOINT PREFIX: PREFIX-easy.json, PREFIX-medium.json
  for difficulty in easy medium; do
    "$build/rl/zorplex-eval" --checkpoint "$1" --batch 64 --difficulty "$difficulty" --json "$2-$difficulty.json" \
      >"$2-$difficulty.log" 2>&1
  done
}
evaluate "$start" "$out/before"
report_args=(--before "$out/before-easy.json" --before "$out/before-medium.json")
walls=()
for seed in $(seq 1 "$seeds"); do
  for name in "${names[@]}"; do
    dir="$out/$name-$seed"
    rm -rf "$dir"
    read -r -a settings <<<"$(settings_of "$name")"
    # Trainer options: the algorithm's (after its --), then the common ones.
    rl_args=() trainer_args=() after=""
    for word in "${settings[@]}"; do
      if [ "$word" = -- ]; then after=1; elif [ -n "$after" ]; then trainer_args+=("$word"); else rl_args+=("$word"); fi
    done
    echo "rl-seeds: $(date +%T) $name seed $seed (load $(cut -d' ' -f1 /proc/loadavg))"
    began=$(date +%s)
    "$root/scripts/rl-run.sh" --start "$start" --out "$dir" --steps "$steps" --generators 2 \
      --task compositional:medium --seed "$seed" "${rl_args[@]}" -- \
      --eval-every 10 --eval-tasks 50 --eval-difficulty medium,easy "${trainer_args[@]}" "${trainer_extra[@]}" \
      >"$dir.console" 2>&1 || { echo "rl-seeds: the run failed; see $dir.console and $dir/*.log" >&2; exit 1; }
    walls+=($(( $(date +%s) - began )))
    evaluate "$dir" "$dir/eval"
    report_args+=(--run "$name/$seed=$dir" --eval "$name/$seed=$dir/eval-easy.json" --eval "$name/$seed=$dir/eval-medium.json")
    for difficulty in easy medium; do
      accuracy=$(sed -n 's/.*"accuracy": \([0-9.]*\).*/\1/p' "$dir/eval-$difficulty.json" | head -n 1)
      echo "rl-seeds:   $difficulty $(awk -v a="$accuracy" 'BEGIN { printf "%.1f%%", 100 * a }')"
    done
  done
done
if [ -n "$control" ]; then
  median_wall=$(printf '%s\n' "${walls[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  "$root/scripts/sft-control.sh" --start "$start" --out "$out/control" --seconds "$median_wall" | sed 's/^/rl-seeds: /'
  report_args+=(--control "$out/control/eval-easy.json" --control "$out/control/eval-medium.json")
fi
"$build/rl/rl-report" "${report_args[@]}" --target compositional:medium --out "$out/report.json" --plots "$out/plots"
"$build/rl/rl-report" --summarize "$out/report.json"
