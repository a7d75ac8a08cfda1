#!/usr/bin/env bash
# ctest helper: how scripts/rl-launch.sh ends a generator rank, on this host
# with the real generator (rank 1 of 2 as mpirun gives it; no trainer runs, so
# the generator waits for one): (1) a done file of another job is ignored and
# its own job's done file stops the generator, which says it stopped, and the
# rank exits 0; (2) --time-limit stops it and the rank exits 124 within the
# limit plus the stop's bound; (3) SIGTERM to the rank (what mpirun sends when
# another rank failed) stops the generator too: exit 143, no generator left
# behind; (4) on a host other than the trainer's, the roles by local rank
# (relay, --relays none, waiting for the host's relay at most --wait-timeout).
# A tiny SFT policy; about 15 s.
# Usage: rl_launch_stops.sh BUILD_DIR SOURCE_DIR WORKDIR
set -euo pipefail
build="$1" source="$2" work="$3"
launch="$source/scripts/rl-launch.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work/run"
"$build/rl/zorplex-sft" --out "$work/start" --d-model 32 --layers 1 --heads 2 --d-ff 64 --max-seq-len 384 \
  --batch 4 --steps 1 --log-every 1 >"$work/sft.log"
(umask 077 && echo "0123456789abcdef0123456789abcdef" >"$work/secret")
export WEIGHTSYNC_BUILD_DIR="$build" OPENBLAS_NUM_THREADS=1
unset WEIGHTSYNC_SECRET SLURM_PROCID
export OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 WS_LAUNCH_JOB=job-a \
  WS_LAUNCH_TRAINER_HOST=127.0.0.1 WS_LAUNCH_SECRET_FILE="$work/secret"
# A port nobody serves (nor the next one): the generator keeps waiting for its trainer.
port=""
for _ in $(seq 1 20); do
  candidate=$((20000 + RANDOM % 20000))
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null &&
    ! (exec 3<>"/dev/tcp/127.0.0.1/$((candidate + 1))") 2>/dev/null; then
    port="$candidate"
    break
  fi
done
[ -n "$port" ] || fail "no free pair of ports found"
args=(--start "$work/start" --out "$work/run" --weights-port "$port" --trajectory-port $((port + 1))
  --generator-arg --trainer-timeout --generator-arg 60)
generator_of() {  # the generator process the rank $1 started ("" if none)
  pgrep -P "$1" -f "bin/generator" || true
}
wait_for_generator() {  # wait_for_generator RANK_PID: until the generator waits for its trainer
  for _ in $(seq 1 200); do
    grep -q "generator 0: waiting for the trainer" "$2" 2>/dev/null && return 0
    kill -0 "$1" 2>/dev/null || fail "the rank exited early: $(cat "$2")"
    sleep 0.1
  done
  fail "the generator did not start: $(cat "$2")"
}

# (1) Another job's done file, then this job's.
echo "job-b" >"$work/run/launch.done"
bash "$launch" "${args[@]}" >"$work/done.log" 2>&1 &
pid=$!
wait_for_generator "$pid" "$work/done.log"
sleep 1.5  # three polls of the other job's file
kill -0 "$pid" 2>/dev/null || fail "another job's done file stopped the rank: $(cat "$work/done.log")"
echo "job-a" >"$work/run/launch.done.tmp" && mv "$work/run/launch.done.tmp" "$work/run/launch.done"
rc=0
timeout 30 tail --pid="$pid" -f /dev/null || fail "the rank did not stop on its job's done file"
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || fail "exit $rc after the done file, not 0: $(cat "$work/done.log")"
grep -q "rl-launch\[rank 1\]: the trainer is done (job job-a): stopping generator 0" "$work/done.log" ||
  fail "no done line: $(cat "$work/done.log")"
grep -q "generator 0: stopped after" "$work/done.log" || fail "the generator did not stop cleanly: $(cat "$work/done.log")"
echo "ok: another job's done file is ignored, this job's stops the generator (exit 0)"

# (2) --time-limit.
rm -f "$work/run/launch.done"
begin=$SECONDS
rc=0
timeout 60 bash "$launch" "${args[@]}" --time-limit 3 >"$work/limit.log" 2>&1 || rc=$?
elapsed=$((SECONDS - begin))
[ "$rc" -eq 124 ] || fail "exit $rc at --time-limit, not 124: $(cat "$work/limit.log")"
[ "$elapsed" -le 25 ] || fail "--time-limit 3 took $elapsed s"
grep -q "generator 0, from the trainer: still running after --time-limit 3 s: stopping it" "$work/limit.log" ||
  fail "no time-limit line: $(cat "$work/limit.log")"
echo "ok: --time-limit 3 ends the rank with 124 in $elapsed s"

# (3) SIGTERM to the rank, as mpirun sends it.
bash "$launch" "${args[@]}" >"$work/term.log" 2>&1 &
pid=$!
wait_for_generator "$pid" "$work/term.log"
generator="$(generator_of "$pid")"
[ -n "$generator" ] || fail "no generator process under the rank"
kill -TERM "$pid"
rc=0
timeout 30 tail --pid="$pid" -f /dev/null || fail "the rank did not stop on SIGTERM"
wait "$pid" || rc=$?
[ "$rc" -eq 143 ] || fail "exit $rc on SIGTERM, not 143: $(cat "$work/term.log")"
! kill -0 "$generator" 2>/dev/null || fail "the generator ($generator) outlived its rank"
grep -q "generator 0: stopped after" "$work/term.log" || fail "the generator was not stopped: $(cat "$work/term.log")"
echo "ok: SIGTERM stops the rank (143) and its generator"

# (4) The roles on a host that is not the trainer's (an RFC 5737 address this
# host does not have): the host's first rank relays, unless --relays none; its
# other ranks wait for that relay, at most --wait-timeout, and start nothing
# without it.
other=""
for candidate in 192.0.2.1 198.51.100.1 203.0.113.1; do
  ip -o -4 addr show | grep -q " $candidate/" || { other="$candidate"; break; }
done
[ -n "$other" ] || fail "this host has every RFC 5737 address this test tries"
role_of() {  # role_of LOCAL_RANK EXPECTED_EXIT [ARGS...]: the rank's role line
  local local_rank="$1" expected="$2" out rc=0
  shift 2
  out="$(OMPI_COMM_WORLD_LOCAL_RANK="$local_rank" WS_LAUNCH_TRAINER_HOST="$other" \
    timeout 60 bash "$launch" "${args[@]}" --relay-port "$port" "$@" 2>&1)" || rc=$?
  [ "$rc" -eq "$expected" ] || fail "local rank $local_rank $*: exit $rc, not $expected: $out"
  echo "$out"
}
out="$(role_of 0 124 --time-limit 1)"
[[ "$out" == *"rl-launch[rank 1]: generator 0, relaying for this host at 127.0.0.1:$port on host"* ]] ||
  fail "a host's first rank should relay: $out"
out="$(role_of 0 124 --time-limit 1 --relays none)"
[[ "$out" == *"rl-launch[rank 1]: generator 0, from the trainer on host"* ]] ||
  fail "with --relays none a host's first rank should pull from the trainer: $out"
out="$(role_of 1 1 --wait-timeout 1)"
[[ "$out" == *"rl-launch[rank 1]: generator 0, from this host's relay on host"*"this host's relay (127.0.0.1:$port, local rank 0) did not serve within 1 s"* ]] ||
  fail "a host's second rank should wait for its relay, then give up: $out"
[[ "$out" != *"generator 0: "* ]] || fail "a generator started without its host's relay: $out"
echo "ok: a host's first rank relays (not with --relays none), the others wait for it at most --wait-timeout"
echo "rl launch stops: ok"
