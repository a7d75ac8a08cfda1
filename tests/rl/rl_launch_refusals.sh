#!/usr/bin/env bash
# ctest helper: scripts/rl-launch.sh refuses, before it starts anything and
# with exit 2 and a line naming the problem, a rank it cannot place or trust:
# no launcher rank; a secret file that is missing, unset, a symlink, readable
# by others, empty, or (as root) another user's; a trainer host that is not
# rank 0's host or not a host name; no job id; bad options; a --start
# without a policy. Each case runs the script as the launcher would (its rank
# variables in the environment), with the real trainer and generator
# executables; none of them gets far enough to start.
# Usage: rl_launch_refusals.sh BUILD_DIR SOURCE_DIR WORKDIR
set -euo pipefail
build="$1" source="$2" work="$3"
launch="$source/scripts/rl-launch.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work/start" "$work/run"
: >"$work/start/policy.safetensors"  # present: the refusals below come first
(umask 077 && echo "0123456789abcdef0123456789abcdef" >"$work/secret")
export WEIGHTSYNC_BUILD_DIR="$build"
unset WEIGHTSYNC_SECRET SLURM_PROCID OMPI_COMM_WORLD_RANK

# expect_refusal NAME REGEX ENV... -- ARGS...: rl-launch exits 2 and says REGEX.
expect_refusal() {
  local name="$1" regex="$2" envs=() out rc=0
  shift 2
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  out="$(env "${envs[@]}" timeout 20 bash "$launch" "$@" 2>&1)" || rc=$?
  [ "$rc" -eq 2 ] || fail "$name: exit $rc, not 2: $out"
  [[ "$out" =~ $regex ]] || fail "$name: the message does not match '$regex': $out"
  ! [[ "$out" =~ rl-launch\[rank\ [0-9]+\]:\ (trainer|generator).*\ on\ host ]] || fail "$name: a role started: $out"
  echo "ok: $name"
}
# A rank as mpirun gives it; the trainer's host is this one (loopback).
rank0=(OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_LOCAL_RANK=0 PMIX_NAMESPACE=4242
  WS_LAUNCH_TRAINER_HOST=127.0.0.1 WS_LAUNCH_SECRET_FILE="$work/secret")
args=(--start "$work/start" --out "$work/run")

help="$(bash "$launch" --help)" || fail "--help failed"
[[ "$help" == *"Usage (the same words on every rank)"*"WS_LAUNCH_SECRET_FILE"*"Exit codes"* ]] || fail "--help: $help"

expect_refusal "no launcher rank" "no rank: run me under mpirun .* or srun" \
  WS_LAUNCH_SECRET_FILE="$work/secret" -- "${args[@]}"
expect_refusal "a rank not below the size" "rank 3 is not below the size 3" \
  "${rank0[@]}" OMPI_COMM_WORLD_RANK=3 -- "${args[@]}"
expect_refusal "one rank only" "needs 2 ranks or more" "${rank0[@]}" OMPI_COMM_WORLD_SIZE=1 -- "${args[@]}"
expect_refusal "a rank that is not a number" "gave no usable rank" "${rank0[@]}" OMPI_COMM_WORLD_RANK=x1 -- "${args[@]}"
expect_refusal "no job id" "no job id for the done file" "${rank0[@]}" PMIX_NAMESPACE= -- "${args[@]}"
expect_refusal "a job id with a path in it" "no job id for the done file" \
  "${rank0[@]}" "PMIX_NAMESPACE=../../x" -- "${args[@]}"
expect_refusal "no --out" "--start and --out are required" "${rank0[@]}" -- --start "$work/start"
expect_refusal "a bad --mode" "--mode must be sync or async" "${rank0[@]}" -- "${args[@]}" --mode sideways
expect_refusal "a bad --relays" "--relays must be per-host or none" "${rank0[@]}" -- "${args[@]}" --relays some
expect_refusal "a --steps that is not a number" "--steps must be a number" "${rank0[@]}" -- "${args[@]}" --steps 3x
expect_refusal "a --steps of 0" "--steps must be a number from 1" "${rank0[@]}" -- "${args[@]}" --steps 0
expect_refusal "a --batch-groups with a leading zero (octal to bash)" "--batch-groups must be a number" \
  "${rank0[@]}" -- "${args[@]}" --batch-groups 08
expect_refusal "a port over 65535" "--relay-port must be a number from 1 to 65535" \
  "${rank0[@]}" -- "${args[@]}" --relay-port 65536
expect_refusal "the same port twice" "--weights-port and --trajectory-port must differ" \
  "${rank0[@]}" -- "${args[@]}" --weights-port 29501
expect_refusal "an unknown option" "unknown argument --frobnicate" "${rank0[@]}" -- "${args[@]}" --frobnicate 1
expect_refusal "a --start without a policy" "has no policy.safetensors" \
  "${rank0[@]}" -- --start "$work/run" --out "$work/run"

# The secret file.
expect_refusal "no secret file" "WS_LAUNCH_SECRET_FILE is not set" \
  "${rank0[@]}" WS_LAUNCH_SECRET_FILE= -- "${args[@]}"
expect_refusal "a missing secret file" "is not a regular file" \
  "${rank0[@]}" WS_LAUNCH_SECRET_FILE="$work/absent" -- "${args[@]}"
ln -s "$work/secret" "$work/secret-link"
expect_refusal "a symlinked secret file" "is not a regular file" \
  "${rank0[@]}" WS_LAUNCH_SECRET_FILE="$work/secret-link" -- "${args[@]}"
cp "$work/secret" "$work/secret-644" && chmod 644 "$work/secret-644"
expect_refusal "a secret file others can read" "has mode 644: others can read it" \
  "${rank0[@]}" WS_LAUNCH_SECRET_FILE="$work/secret-644" -- "${args[@]}"
cp "$work/secret" "$work/secret-640" && chmod 640 "$work/secret-640"
expect_refusal "a secret file the group can read" "has mode 640: others can read it" \
  "${rank0[@]}" WS_LAUNCH_SECRET_FILE="$work/secret-640" -- "${args[@]}"
(umask 077 && : >"$work/secret-empty")
expect_refusal "an empty secret file" "is empty" \
  "${rank0[@]}" WS_LAUNCH_SECRET_FILE="$work/secret-empty" -- "${args[@]}"
if [ "$(id -u)" -eq 0 ] && id nobody >/dev/null 2>&1; then
  cp "$work/secret" "$work/secret-nobody" && chown nobody "$work/secret-nobody"
  expect_refusal "another user's secret file" "belongs to uid $(id -u nobody), not to this user" \
    "${rank0[@]}" WS_LAUNCH_SECRET_FILE="$work/secret-nobody" -- "${args[@]}"
fi

# The trainer's host.
expect_refusal "no trainer host" "WS_LAUNCH_TRAINER_HOST is not set" \
  "${rank0[@]}" WS_LAUNCH_TRAINER_HOST= -- "${args[@]}"
expect_refusal "a trainer host with shell words in it" "is not a host name or IPv4 address" \
  "${rank0[@]}" "WS_LAUNCH_TRAINER_HOST=h0;touch $work/pwned" -- "${args[@]}"
[ ! -e "$work/pwned" ] || fail "the trainer host ran as a command"
expect_refusal "a trainer host that does not resolve" "does not resolve on this host" \
  "${rank0[@]}" WS_LAUNCH_TRAINER_HOST=no-such-host.invalid -- "${args[@]}"
# A documentation address (RFC 5737) that is no address of this host.
other=""
for candidate in 192.0.2.1 198.51.100.1 203.0.113.1; do
  ip -o -4 addr show | grep -q " $candidate/" || { other="$candidate"; break; }
done
[ -n "$other" ] || fail "this host has every RFC 5737 address this test tries"
expect_refusal "rank 0 on a host that is not the trainer's" "rank 0 runs the trainer, but WS_LAUNCH_TRAINER_HOST=$other .* is not this host" \
  "${rank0[@]}" WS_LAUNCH_TRAINER_HOST="$other" -- "${args[@]}"
# Slurm's variables are read too.
expect_refusal "srun's rank variables" "rank 5 is not below the size 4" \
  SLURM_PROCID=5 SLURM_NTASKS=4 SLURM_LOCALID=0 SLURM_JOB_ID=7 WS_LAUNCH_SECRET_FILE="$work/secret" -- "${args[@]}"
echo "rl launch refusals: ok"
