# shellcheck shell=bash
# Sourced by rl_launch_mpi.sh and rl_launch_srun.sh (never run): the checks of
# a multi-host launch by scripts/rl-launch.sh in a 3-host test bed, whatever
# the launcher. The layout both use: 5 ranks, hosts 0 and 1 with two, host 2
# with one:
#   rank 0  host 0  the trainer
#   rank 1  host 0  generator 0, from the trainer (same host: shm)
#   rank 2  host 1  generator 1, relaying for host 1
#   rank 3  host 1  generator 2, from host 1's relay (shm; the trainer is in
#                   another namespace, out of shm's reach: every such pull came
#                   through the relay)
#   rank 4  host 2  generator 3, relaying for host 2
# The run: a tiny policy, async, 3 steps. Callers define fail().

# launch_field NAME: a JSON field of a jsonl line on stdin.
launch_field() { sed -n "s/.*\"$1\":\"\{0,1\}\([0-9a-z.]*\).*/\1/p"; }

# check_launch_ok LOG RUN_DIR BED TRAINER_ADDRESS: the completed run.
check_launch_ok() {
  local log="$1" run="$2" bed="$3" a0="$4" line r g pulls pulled
  local roles=("0 trainer" "0 generator 0, from the trainer" "1 generator 1, relaying for this host at 127.0.0.1:29600"
    "1 generator 2, from this host's relay" "2 generator 3, relaying for this host at 127.0.0.1:29600")
  for r in 0 1 2 3 4; do
    line="$(grep -E "rl-launch\[rank $r\]: .* on host " "$log" | head -n 1)"
    [[ "$line" == *"rl-launch[rank $r]: ${roles[$r]#* } on host "*"(netns $bed-h${roles[$r]%% *})"* ]] ||
      fail "rank $r should be '${roles[$r]#* }' in host ${roles[$r]%% *}: '$line'"
    grep -q "rl-launch\[rank $r\]: .*: finished (exit 0)" "$log" || fail "rank $r did not finish with exit 0"
  done
  grep -q "trainer: done after 3 steps (version 4)" "$log" || fail "the trainer did not finish at version 4"
  [ "$(grep -c '"event":"step"' "$run/trainer.jsonl")" -eq 3 ] || fail "trainer.jsonl should log 3 steps"
  grep '"event":"publish"' "$run/trainer.jsonl" | while read -r line; do
    echo "$(echo "$line" | launch_field version) $(echo "$line" | launch_field xxh3)"
  done >"$run/published.txt"
  [ "$(wc -l <"$run/published.txt")" -eq 4 ] || fail "expected versions 1-4 published"
  for g in 0 1 2 3; do
    pulls=0
    while read -r line; do
      pulled="$(echo "$line" | launch_field version) $(echo "$line" | launch_field xxh3)"
      grep -qx "$pulled" "$run/published.txt" || fail "generator $g pulled '$pulled', not what was published"
      pulls=$((pulls + 1))
    done < <(grep '"event":"pull"' "$run/generator-$g.jsonl")
    [ "$pulls" -ge 1 ] || fail "generator $g made no pull"
    grep -q "generator $g: stopped after" "$log" || fail "generator $g did not stop cleanly"
  done
  grep -q "generator 0: connected to the trainer at $a0:29500 (transport shm)" "$log" ||
    fail "generator 0 should pull from the trainer on its host: $(grep "generator 0: connected" "$log")"
  for g in 1 3; do
    grep -q "generator $g: connected to its relay at 127.0.0.1:29600 .*(transport shm)" "$log" ||
      fail "generator $g should relay and read its relay over shm: $(grep "generator $g: connected" "$log")"
  done
  grep -q "generator 2: connected to the sources 127.0.0.1:29600, $a0:29500 (transport shm)" "$log" ||
    fail "generator 2 should pull from its host's relay: $(grep "generator 2: connected" "$log")"
  ! grep '"event":"pull"' "$run/generator-2.jsonl" | grep -qv '"transport":"shm"' ||
    fail "generator 2 made a pull that did not come from its host's relay"
  grep -q "rl-launch\[rank [1-4]\]: the trainer is done" "$log" || fail "no generator saw the done file"
  [ "$(cat "$run/launch.done")" != "some-other-job" ] || fail "the trainer did not write its done file"
  [ -s "$run/policy.safetensors" ] || fail "no RL checkpoint"
}

# check_launch_failed LOG RUN_DIR BED RC ELAPSED_S: rank 3 (generator 2) had
# the wrong secret: the launcher exited non-zero within 60 s, the rank's error
# lines are in its output, the trainer never finished, no rank's process (the
# wrapper, a trainer, a generator) is left running in any host.
check_launch_failed() {
  local log="$1" run="$2" bed="$3" rc="$4" elapsed="$5" i left
  [ "$rc" -ne 0 ] || fail "the launcher exited 0 with a rank on the wrong secret"
  [ "$rc" -ne 124 ] || fail "the launcher did not end within its bound with a rank on the wrong secret"
  [ "$elapsed" -le 60 ] || fail "the launcher took $elapsed s to stop a run with a failed rank (bound: 60 s)"
  grep -q "generator: cannot connect to the sources 127\.0\.0\.1:29600, .*: 127\.0\.0\.1:29600: publisher refused: authentication failed" "$log" ||
    fail "generator 2's error line is missing: $(tail -n 20 "$log")"
  grep -q "rl-launch\[rank 3\]: generator 2, from this host's relay: failed (exit 1)" "$log" ||
    fail "rank 3's wrapper did not report the failure"
  ! grep -q "trainer: done after" "$log" || fail "the trainer finished although a rank failed"
  [ ! -e "$run/launch.done" ] || fail "a done file was written for a failed run"
  for i in 0 1 2; do
    left="$(ip netns pids "$bed-h$i" 2>/dev/null | xargs)"
    [ -z "$left" ] || left="$(ps -o pid=,args= -p "${left// /,}" | grep -E 'rl-launch|bin/(trainer|generator)' || true)"
    [ -z "$left" ] || fail "a role left running in host $i after the launcher returned: $left"
  done
}
