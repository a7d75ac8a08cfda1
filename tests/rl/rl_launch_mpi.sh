#!/usr/bin/env bash
# ctest helper: the RL loop launched across hosts of a test bed by Open MPI's
# mpirun through scripts/rl-launch.sh, as a user would on a cluster. Three
# hosts (network namespaces, scripts/testbed.sh); mpirun runs in the root
# namespace with an rsh agent that starts each host's daemon inside that
# host's namespace (as weightsync-bench fanout's MPI baseline does), 5 ranks:
# rank 0 (the trainer) on host 0, ranks 1-2 on host 1, ranks 3-4 on host 2.
# A tiny SFT policy, async mode, 3 steps; the secret in a 0600 file whose path
# travels with -x; a done file of another job planted in the run folder.
# Checks, run 1: mpirun exits 0 (every rank exited 0); each rank says its role
# from the netns it ran in (trainer in h0, a relaying generator and one behind
# it in h1 and in h2); the trainer reached its last step; each generator's
# pulls are bit-exact with what the trainer published, and those of generators
# 1 and 3 came through their host's relay (over shm, which cannot cross
# namespaces: the trainer is in another one); every generator stopped cleanly
# when the trainer was done, not on the planted done file. Run 2: rank 4 gets
# a wrong secret file: mpirun exits non-zero within 60 s, the rank's error line
# is in its output, the trainer never finishes, and nothing is left running in
# the hosts. Exits 77 (skipped, with the reason) without root, network
# namespaces or mpirun.
# Usage: rl_launch_mpi.sh BUILD_DIR SOURCE_DIR WORKDIR
set -euo pipefail
build="$1" source="$2" work="$3"
fail() { echo "FAIL: $*" >&2; exit 1; }
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([0-9a-z.]*\).*/\1/p"; }

if [ -z "${WS_TESTBED:-}" ]; then
  "$source/scripts/testbed.sh" check || exit 77
  command -v mpirun >/dev/null ||
    { echo "SKIPPED: Open MPI's mpirun is not installed (scripts/install-deps.sh installs openmpi-bin)"; exit 77; }
  rm -rf "$work" && mkdir -p "$work"
  "$build/rl/zorplex-sft" --out "$work/start" --d-model 32 --layers 1 --heads 2 --d-ff 64 --max-seq-len 384 \
    --batch 4 --steps 2 --log-every 1 >"$work/sft.log"
  (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$work/secret" && echo >>"$work/secret")
  (umask 077 && echo "not-the-secret-of-this-run-0123456789abcdef" >"$work/wrong-secret")
  exec "$source/scripts/testbed.sh" run 3 -- bash "$0" "$@"
fi

# ---- Inside the bed: the agent, the hosts, mpirun ----
bed="$WS_TESTBED" tb="$WS_TESTBED_SCRIPT"
a0="$("$tb" addr "$bed" 0)" a1="$("$tb" addr "$bed" 1)" a2="$("$tb" addr "$bed" 2)"
# mpirun calls: agent [options] HOST COMMAND... (ssh-style: the words form one shell command).
cat >"$work/agent.sh" <<EOF
#!/bin/sh
# rsh agent for mpirun: the command runs in the test-bed host whose address is the host name
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host="\$1"; shift
case "\$host" in
  $a0) i=0 ;;
  $a1) i=1 ;;
  $a2) i=2 ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec '$tb' exec '$bed' "\$i" sh -c "\$*"
EOF
chmod 0700 "$work/agent.sh"
printf '%s slots=1\n%s slots=2\n%s slots=2\n' "$a0" "$a1" "$a2" >"$work/hostfile"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 WEIGHTSYNC_BUILD_DIR="$build"
unset WEIGHTSYNC_SECRET
launch() {  # launch APP_CONTEXT...: mpirun (bounded: 150 s) with the bed's hosts and agent
  timeout 150 mpirun --hostfile "$work/hostfile" --tag-output \
    --mca plm_rsh_agent "$work/agent.sh" --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include "${a0%.*}.0/24" "$@"
}
# The environment each app context passes on (mpirun's -x holds for the context it is in).
xs=(-x WS_LAUNCH_TRAINER_HOST="$a0" -x WS_LAUNCH_SECRET_FILE="$work/secret" -x WEIGHTSYNC_BUILD_DIR -x OPENBLAS_NUM_THREADS)
common=(--start "$work/start" --steps 3 --prompts 2 --group-size 3 --batch-groups 6 --time-limit 90
  --trainer-arg --keep-zero-variance --trainer-arg --idle-timeout --trainer-arg 60
  --generator-arg --trainer-timeout --generator-arg 30)

# ---- Run 1: the whole loop ----
run="$work/run"
mkdir -p "$run"
echo "some-other-job" >"$run/launch.done"  # a done file left by another job: ignored
rc=0
launch -np 5 "${xs[@]}" "$source/scripts/rl-launch.sh" --out "$run" "${common[@]}" >"$work/run.log" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || fail "mpirun exited $rc: $(tail -n 15 "$work/run.log")"
rank_line() { grep -E "^\[[0-9]+,$1\]<stdout>:rl-launch\[rank $1\]: " "$work/run.log" | head -n 1; }
expect_role() {  # expect_role RANK HOST_INDEX ROLE_REGEX
  local line
  line="$(rank_line "$1")"
  [[ "$line" =~ $3\ on\ host\ .*\(netns\ $bed-h$2\) ]] || fail "rank $1 should be '$3' in host $2: '$line'"
}
expect_role 0 0 "trainer"
expect_role 1 1 "generator 0, relaying for this host at 127.0.0.1:29600"
expect_role 2 1 "generator 1, from this host's relay"
expect_role 3 2 "generator 2, relaying for this host at 127.0.0.1:29600"
expect_role 4 2 "generator 3, from this host's relay"
for r in 0 1 2 3 4; do
  grep -qE "^\[[0-9]+,$r\]<stdout>:rl-launch\[rank $r\]: .* finished \(exit 0\)" "$work/run.log" ||
    fail "rank $r did not finish with exit 0"
done
grep -q "done after 3 steps (version 4)" "$work/run.log" || fail "the trainer did not finish at version 4"
[ "$(grep -c '"event":"step"' "$run/trainer.jsonl")" -eq 3 ] || fail "trainer.jsonl should log 3 steps"
grep '"event":"publish"' "$run/trainer.jsonl" | while read -r line; do
  echo "$(echo "$line" | field version) $(echo "$line" | field xxh3)"
done >"$run/published.txt"
[ "$(wc -l <"$run/published.txt")" -eq 4 ] || fail "expected versions 1-4 published"
for g in 0 1 2 3; do
  pulls=0
  while read -r line; do
    pulled="$(echo "$line" | field version) $(echo "$line" | field xxh3)"
    grep -qx "$pulled" "$run/published.txt" || fail "generator $g pulled '$pulled', not what was published"
    pulls=$((pulls + 1))
  done < <(grep '"event":"pull"' "$run/generator-$g.jsonl")
  [ "$pulls" -ge 1 ] || fail "generator $g made no pull"
  grep -q "generator $g: stopped after" "$work/run.log" || fail "generator $g did not stop cleanly"
done
# The relays: 0 and 2 read their own relay over shm; 1 and 3 read the relay of
# their host over shm for every pull (the trainer, in h0, is out of shm's reach).
for g in 0 2; do
  grep -q "generator $g: connected to its relay at 127.0.0.1:29600 .*(transport shm)" "$work/run.log" ||
    fail "generator $g should relay and read its relay over shm: $(grep "generator $g: connected" "$work/run.log")"
done
for g in 1 3; do
  grep -q "generator $g: connected to the sources 127.0.0.1:29600, $a0:29500 (transport shm)" "$work/run.log" ||
    fail "generator $g should pull from its host's relay: $(grep "generator $g: connected" "$work/run.log")"
  ! grep '"event":"pull"' "$run/generator-$g.jsonl" | grep -qv '"transport":"shm"' ||
    fail "generator $g made a pull that did not come from its host's relay"
done
grep -q "rl-launch\[rank [1-4]\]: the trainer is done" "$work/run.log" || fail "no generator saw the done file"
[ "$(cat "$run/launch.done")" != "some-other-job" ] || fail "the trainer did not write its done file"
[ -s "$run/policy.safetensors" ] || fail "no RL checkpoint"

# ---- Run 2: rank 4 has the wrong secret: mpirun stops everything ----
run2="$work/wrong"
mkdir -p "$run2"
begin=$SECONDS
rc=0
launch -np 4 "${xs[@]}" "$source/scripts/rl-launch.sh" --out "$run2" "${common[@]}" \
  : -np 1 "${xs[@]}" env WS_LAUNCH_SECRET_FILE="$work/wrong-secret" "$source/scripts/rl-launch.sh" --out "$run2" "${common[@]}" \
  >"$work/wrong.log" 2>&1 || rc=$?
elapsed=$((SECONDS - begin))
[ "$rc" -ne 0 ] || fail "mpirun exited 0 with a rank on the wrong secret"
[ "$rc" -ne 124 ] || fail "mpirun did not end within 150 s with a rank on the wrong secret"
[ "$elapsed" -le 60 ] || fail "mpirun took $elapsed s to stop a run with a failed rank (bound: 60 s)"
grep -qE "^\[[0-9]+,4\]<stderr>:generator: cannot connect to .*127\.0\.0\.1:29600.*auth" "$work/wrong.log" ||
  fail "generator 3's error line is missing: $(grep ',4\]' "$work/wrong.log" | tail -n 5)"
grep -qE "^\[[0-9]+,4\]<stderr>:rl-launch\[rank 4\]: generator 3, from this host's relay failed \(exit 1\)" "$work/wrong.log" ||
  fail "rank 4's wrapper did not report the failure"
! grep -q "done after" "$work/wrong.log" || fail "the trainer finished although a rank failed"
[ ! -e "$run2/launch.done" ] || fail "a done file was written for a failed run"
for i in 0 1 2; do
  left="$(ip netns pids "$bed-h$i" 2>/dev/null | xargs)"
  [ -z "$left" ] || fail "processes left in host $i after mpirun returned: $(ps -o pid=,args= -p "${left// /,}")"
done
echo "rl launch by mpirun: ok (run 2 stopped in $elapsed s, exit $rc)"
