#!/usr/bin/env bash
# One rank of a multi-host RL run started by a launcher: Open MPI's mpirun or
# Slurm's srun runs this same script on every rank, and it picks its role from
# its rank (OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK, or SLURM_PROCID /
# SLURM_NTASKS / SLURM_LOCALID):
#   rank 0                       the trainer, bound to --bind (default 0.0.0.0)
#                                on fixed ports;
#   rank R > 0                   generator R-1, and on a host other than the
#                                trainer's:
#     the host's first rank      (local rank 0) also runs the host's relay
#                                (generator --relay 127.0.0.1:RELAY_PORT): it
#                                pulls each version from the trainer once;
#     the host's other ranks     pull from that relay (over shm), falling back
#                                to the trainer if it is lost;
#   generators on the trainer's host pull from the trainer. --relays none: every
#   generator pulls from the trainer.
# Docs and the tested mpirun line: docs/rl_loop.md, "Across hosts".
#
# Usage (the same words on every rank):
#   mpirun -np N --host H0:1,H1:S,... -x WS_LAUNCH_TRAINER_HOST=H0 \
#          -x WS_LAUNCH_SECRET_FILE=FILE scripts/rl-launch.sh --start SFT_DIR --out RUN_DIR \
#          [--steps N] [--mode sync|async] [--prompts P] [--group-size G] [--batch-groups B]
#          [--bind ADDR] [--weights-port P] [--trajectory-port P] [--relay-port P]
#          [--relays per-host|none] [--threads N] [--time-limit S] [--wait-timeout S]
#          [--trainer-arg ARG]... [--generator-arg ARG]...
#   srun ... scripts/rl-launch.sh ...   (the trainer's host defaults to the
#                                        first node of the step's node list)
# Defaults: --steps 30 --mode async --prompts 4 --group-size 8 --batch-groups 8
# (each generator sends its share of a step's groups), --bind 0.0.0.0, ports
# 29500 (weights), 29501 (trajectories), 29600 (each host's relay, on
# 127.0.0.1), --threads 1 (torch threads per generator; the trainer takes every
# CPU of its host unless given --trainer-arg --threads --trainer-arg N).
# --trainer-arg / --generator-arg pass one more word to every trainer /
# generator (e.g. --trainer-arg --wire-dtype --trainer-arg bf16).
# Where things come from:
#   WS_LAUNCH_TRAINER_HOST  the trainer's host (name or address; rank 0 must be
#                           on it, else rank 0 refuses). mpirun: pass it with
#                           -x (the first host of --host). srun: defaults to
#                           the first node of SLURM_STEP_NODELIST (scontrol).
#   WS_LAUNCH_SECRET_FILE   a file holding the run's secret, owned by this user
#                           and readable by nobody else (mode 0600 or 0400);
#                           its path travels (mpirun -x), never the secret. Each
#                           rank exports it as WEIGHTSYNC_SECRET to its role.
#   SFT_DIR, RUN_DIR        on storage every host sees: SFT_DIR holds the
#                           starting policy (policy.safetensors); RUN_DIR gets
#                           trainer.jsonl, generator-K.jsonl, the checkpoint
#                           and launch.done (below).
# The end: when the trainer finishes it writes RUN_DIR/launch.done holding this
# job's id (mpirun's PMIX_NAMESPACE or OMPI_MCA_ess_base_jobid, Slurm's
# SLURM_JOB_ID.SLURM_STEP_ID; WS_LAUNCH_JOB overrides); every generator rank
# polls for it (every 0.5 s), stops its generator (SIGTERM) and exits 0, so the
# launcher sees every rank exit 0. A done file of another job is ignored.
# Exit codes: 0 the role finished; its own code when it failed (the launcher
# then stops the other ranks: mpirun kills them, srun with --kill-on-bad-exit);
# 2 bad usage or configuration (named on stderr); 124 --time-limit reached
# (the role is stopped); 143/130 stopped by a signal. Every wait is bounded:
# the relay's start by --wait-timeout (default 120 s), the role by
# --time-limit (default 0: none; the trainer's --idle-timeout and the
# generators' --trainer-timeout bound a lost peer), a stop by 20 s then SIGKILL.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"

start="" out="" steps=30 mode=async prompts=4 group_size=8 batch_groups=8 bind=0.0.0.0
weights_port=29500 trajectory_port=29501 relay_port=29600 relays=per-host threads=1
time_limit=0 wait_timeout=120
trainer_args=() generator_args=()
usage() { sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; }
die() { echo "rl-launch[rank ${rank:-?}]: $*" >&2; exit 2; }
number() {  # number NAME VALUE MIN MAX: a decimal number (no leading zero) in [MIN, MAX]
  [[ "$2" =~ ^(0|[1-9][0-9]{0,8})$ ]] && [ "$2" -ge "$3" ] && [ "$2" -le "$4" ] ||
    die "$1 must be a number from $3 to $4, not '$2'"
}
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
  esac
  [ $# -ge 2 ] || die "$1 needs a value (see --help)"
  case "$1" in
    --start) start="$2" ;;
    --out) out="$2" ;;
    --steps) steps="$2" ;;
    --mode) mode="$2" ;;
    --prompts) prompts="$2" ;;
    --group-size) group_size="$2" ;;
    --batch-groups) batch_groups="$2" ;;
    --bind) bind="$2" ;;
    --weights-port) weights_port="$2" ;;
    --trajectory-port) trajectory_port="$2" ;;
    --relay-port) relay_port="$2" ;;
    --relays) relays="$2" ;;
    --threads) threads="$2" ;;
    --time-limit) time_limit="$2" ;;
    --wait-timeout) wait_timeout="$2" ;;
    --trainer-arg) trainer_args+=("$2") ;;
    --generator-arg) generator_args+=("$2") ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift 2
done

# ---- Who am I: the launcher's rank variables ----
if [ -n "${OMPI_COMM_WORLD_RANK:-}" ]; then
  launcher=mpirun rank="$OMPI_COMM_WORLD_RANK" size="${OMPI_COMM_WORLD_SIZE:-}"
  local_rank="${OMPI_COMM_WORLD_LOCAL_RANK:-}"
  job="${WS_LAUNCH_JOB:-${PMIX_NAMESPACE:-${OMPI_MCA_ess_base_jobid:-}}}"
elif [ -n "${SLURM_PROCID:-}" ]; then
  launcher=srun rank="$SLURM_PROCID" size="${SLURM_NTASKS:-}" local_rank="${SLURM_LOCALID:-}"
  job="${WS_LAUNCH_JOB:-${SLURM_JOB_ID:+$SLURM_JOB_ID.${SLURM_STEP_ID:-0}}}"
else
  rank=""
  die "no rank: run me under mpirun (OMPI_COMM_WORLD_RANK) or srun (SLURM_PROCID)"
fi
for v in rank size local_rank; do
  [[ "${!v}" =~ ^[0-9]{1,6}$ ]] || die "$launcher gave no usable $v ('${!v}')"
done
[ "$rank" -lt "$size" ] || die "rank $rank is not below the size $size"
[ "$size" -ge 2 ] || die "a run needs 2 ranks or more (the trainer and a generator), not $size"
[[ "$job" =~ ^[A-Za-z0-9._-]{1,64}$ ]] ||
  die "no job id for the done file ('$job'): set WS_LAUNCH_JOB to one word shared by every rank"

# ---- Checks every rank makes before starting anything ----
[ -n "$start" ] && [ -n "$out" ] || die "--start and --out are required (see --help)"
for v in steps prompts group_size batch_groups threads wait_timeout; do
  number "--${v//_/-}" "${!v}" 1 1000000
done
number --time-limit "$time_limit" 0 100000000
for v in weights_port trajectory_port relay_port; do
  number "--${v//_/-}" "${!v}" 1 65535
done
[ "$weights_port" != "$trajectory_port" ] || die "--weights-port and --trajectory-port must differ"
case "$mode" in sync|async) ;; *) die "--mode must be sync or async, not '$mode'" ;; esac
case "$relays" in per-host|none) ;; *) die "--relays must be per-host or none, not '$relays'" ;; esac
[ -f "$start/policy.safetensors" ] ||
  die "--start $start has no policy.safetensors on this host (it must be on storage every host sees; run the SFT warm start first)"
mkdir -p "$out" 2>/dev/null && [ -w "$out" ] || die "--out $out cannot be written from this host"
tool=trainer
[ "$rank" -eq 0 ] || tool=generator
[ -x "$build/bin/$tool" ] || die "$build/bin/$tool is missing on this host (set WEIGHTSYNC_BUILD_DIR)"

# The secret: from a file only this user can read; exported to the role only.
secret_file="${WS_LAUNCH_SECRET_FILE:-}"
[ -n "$secret_file" ] || die "WS_LAUNCH_SECRET_FILE is not set (a file holding the run's secret; mpirun -x WS_LAUNCH_SECRET_FILE=PATH)"
[ -f "$secret_file" ] && [ ! -L "$secret_file" ] || die "the secret file $secret_file is not a regular file on this host"
read -r owner perms <<<"$(stat -c '%u %a' "$secret_file")"
[ "$owner" = "$(id -u)" ] || die "the secret file $secret_file belongs to uid $owner, not to this user ($(id -u))"
[ $((8#$perms & 8#077)) -eq 0 ] || die "the secret file $secret_file has mode $perms: others can read it (chmod 600 it)"
secret="$(head -n 1 "$secret_file")"
[ -n "$secret" ] || die "the secret file $secret_file is empty"
export WEIGHTSYNC_SECRET="$secret"
unset secret

# The trainer's host, and whether this host is it (one of its addresses).
trainer_host="${WS_LAUNCH_TRAINER_HOST:-}"
if [ -z "$trainer_host" ] && [ "$launcher" = srun ] && command -v scontrol >/dev/null; then
  trainer_host="$(scontrol show hostnames "${SLURM_STEP_NODELIST:-${SLURM_JOB_NODELIST:-}}" 2>/dev/null | head -n 1)"
fi
[ -n "$trainer_host" ] || die "WS_LAUNCH_TRAINER_HOST is not set (rank 0's host; mpirun -x WS_LAUNCH_TRAINER_HOST=HOST)"
[[ "$trainer_host" =~ ^[A-Za-z0-9._-]{1,253}$ ]] || die "WS_LAUNCH_TRAINER_HOST '$trainer_host' is not a host name or IPv4 address"
trainer_addresses="$( (getent ahostsv4 "$trainer_host" 2>/dev/null || true) | awk '{print $1}' | sort -u)"
[ -n "$trainer_addresses" ] || die "the trainer's host '$trainer_host' does not resolve on this host"
local_addresses="$( (ip -o -4 addr show 2>/dev/null || true) | awk '{split($4, a, "/"); print a[1]}' | sort -u)"
[ -n "$local_addresses" ] || local_addresses="$( (hostname -I 2>/dev/null || true) | tr ' ' '\n' | sed '/^$/d' | sort -u)"
on_trainer_host=""
[ -z "$(comm -12 <(echo "$trainer_addresses") <(echo "$local_addresses"))" ] || on_trainer_host=1

# ---- The role ----
generators=$((size - 1))
trainer_weights="$trainer_host:$weights_port" wait_relay=""
if [ "$rank" -eq 0 ]; then
  [ -n "$on_trainer_host" ] ||
    die "rank 0 runs the trainer, but WS_LAUNCH_TRAINER_HOST=$trainer_host ($(echo $trainer_addresses)) is not this host ($(echo $local_addresses)): give rank 0's host"
  role="trainer"
  cmd=("$build/bin/trainer" --start "$start" --out "$out" --mode "$mode" --steps "$steps"
    --generators "$generators" --prompts-per-round "$prompts" --batch-groups "$batch_groups"
    --bind "$bind" --weights-port "$weights_port" --trajectory-port "$trajectory_port" "${trainer_args[@]}")
else
  id=$((rank - 1))
  sources="$trainer_weights" relay=() wait_relay=""
  if [ "$relays" = per-host ] && [ -z "$on_trainer_host" ]; then
    if [ "$local_rank" -eq 0 ]; then
      relay=(--relay "127.0.0.1:$relay_port")
    else
      sources="127.0.0.1:$relay_port,$trainer_weights" wait_relay=1
    fi
  fi
  role="generator $id, from the trainer"
  [ ${#relay[@]} -eq 0 ] || role="generator $id, relaying for this host at 127.0.0.1:$relay_port"
  [ -z "$wait_relay" ] || role="generator $id, from this host's relay"
  share=$(((batch_groups + generators - 1) / generators))
  # A trainer that trains on zero-variance groups refuses filtered ones (as
  # rl-run.sh: the generators' dynamic filter off then, unless given with
  # --generator-arg).
  filter=(--dynamic-filter on)
  for ((i = 0; i < ${#trainer_args[@]}; i++)); do
    case "${trainer_args[$i]}" in
      --keep-zero-variance|--baseline=running) filter=(--dynamic-filter off) ;;
      --baseline) [ "${trainer_args[$((i + 1))]:-}" != running ] || filter=(--dynamic-filter off) ;;
    esac
  done
  for arg in "${generator_args[@]}"; do
    case "$arg" in --dynamic-filter*) filter=() ;; esac
  done
  cmd=("$build/bin/generator" --trainer "$sources" --trajectories "tcp://$trainer_host:$trajectory_port"
    --checkpoint "$start/policy.safetensors" --id "$id" --mode "$mode" --prompts "$prompts"
    --group-size "$group_size" --groups-per-version "$share" --max-ahead 2 --threads "$threads"
    --out "$out" "${filter[@]}" "${relay[@]}" "${generator_args[@]}")
fi
netns="$(ip netns identify $$ 2>/dev/null || true)"
say() { echo "rl-launch[rank $rank]: $*"; }
say "$role on host $(hostname)${netns:+ (netns $netns)}, addresses $(echo $local_addresses)," \
  "job $job, $size ranks via $launcher; trainer at $trainer_host"

# ---- Run it, bounded ----
child=""
stop_child() {  # stop_child SIGNAL: the role gets SIGNAL, then SIGKILL after 20 s
  [ -n "$child" ] || return 0
  kill "-$1" "$child" 2>/dev/null || true
  for _ in $(seq 1 200); do
    kill -0 "$child" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$child" 2>/dev/null || true
}
trap 'say "stopped by SIGTERM"; stop_child TERM; exit 143' TERM
trap 'say "stopped by SIGINT"; stop_child INT; exit 130' INT
started=$SECONDS
over_time() { [ "$time_limit" -gt 0 ] && [ $((SECONDS - started)) -ge "$time_limit" ]; }

if [ -n "$wait_relay" ]; then
  # This host's relay (local rank 0) serves once its port accepts.
  until (exec 3<>"/dev/tcp/127.0.0.1/$relay_port") 2>/dev/null; do
    if [ $((SECONDS - started)) -ge "$wait_timeout" ]; then
      echo "rl-launch[rank $rank]: this host's relay (127.0.0.1:$relay_port, local rank 0) did not serve within $wait_timeout s" >&2
      exit 1
    fi
    sleep 0.2
  done
fi

"${cmd[@]}" &
child=$!
done_file="$out/launch.done"
rc=""
while :; do
  if ! kill -0 "$child" 2>/dev/null; then
    rc=0
    wait "$child" || rc=$?
    child=""
    break
  fi
  if over_time; then
    echo "rl-launch[rank $rank]: $role: still running after --time-limit $time_limit s: stopping it" >&2
    stop_child TERM
    exit 124
  fi
  if [ "$rank" -ne 0 ] && [ "$(head -c 128 "$done_file" 2>/dev/null || true)" = "$job" ]; then
    say "the trainer is done (job $job): stopping generator $id"
    stop_child TERM
    rc=0
    wait "$child" 2>/dev/null || rc=$?
    child=""
    # Stopped as asked: the generator exits 0, or 143 when the signal came
    # before it set its handler (still loading).
    [ "$rc" -ne 143 ] || rc=0
    break
  fi
  sleep 0.5
done

if [ "$rc" -ne 0 ]; then
  echo "rl-launch[rank $rank]: $role: failed (exit $rc)" >&2
  exit "$rc"
fi
if [ "$rank" -eq 0 ]; then
  printf '%s\n' "$job" >"$done_file.tmp" && mv -f "$done_file.tmp" "$done_file" ||
    { echo "rl-launch[rank 0]: cannot write $done_file: the generators would not stop" >&2; exit 1; }
fi
say "$role: finished (exit 0) after $((SECONDS - started)) s"
