#!/usr/bin/env bash
# ctest helper: the RL loop launched across hosts of a test bed by Open MPI's
# mpirun through scripts/rl-launch.sh, as a user would on a cluster. Three
# hosts (network namespaces, scripts/testbed.sh); mpirun runs in the root
# namespace with an rsh agent that starts each host's daemon inside that
# host's namespace (as weightsync-bench fanout's MPI baseline does); 5 ranks
# laid out by the hostfile's slots (2, 2, 1) as rl_launch_checks.sh describes:
# the trainer and a generator in host 0, a relaying generator and one behind
# it in host 1, a relaying generator in host 2. The secret is in a 0600 file
# whose path travels with -x; a done file of another job is planted in the
# run folder. Run 1 must complete (check_launch_ok: mpirun exits 0, roles on
# the right hosts, the trainer's last step, bit-exact pulls, the relay's
# pulls over shm, clean stops); in run 2 rank 3 gets a wrong secret file and
# mpirun must stop everything within 60 s (check_launch_failed). Exits 77
# (skipped, with the reason) without root, network namespaces or mpirun.
# Usage: rl_launch_mpi.sh BUILD_DIR SOURCE_DIR WORKDIR
set -euo pipefail
build="$1" source="$2" work="$3"
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$source/tests/rl/rl_launch_checks.sh"

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
printf '%s slots=2\n%s slots=2\n%s slots=1\n' "$a0" "$a1" "$a2" >"$work/hostfile"
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
begin=$SECONDS
rc=0
launch -np 5 "${xs[@]}" "$source/scripts/rl-launch.sh" --out "$run" "${common[@]}" >"$work/run.log" 2>&1 || rc=$?
run1_s=$((SECONDS - begin))
[ "$rc" -eq 0 ] || fail "mpirun exited $rc: $(tail -n 15 "$work/run.log")"
check_launch_ok "$work/run.log" "$run" "$bed" "$a0"

# ---- Run 2: rank 3 has the wrong secret: mpirun stops everything ----
run2="$work/wrong"
mkdir -p "$run2"
begin=$SECONDS
rc=0
launch -np 3 "${xs[@]}" "$source/scripts/rl-launch.sh" --out "$run2" "${common[@]}" --steps 50 \
  : -np 1 "${xs[@]}" env WS_LAUNCH_SECRET_FILE="$work/wrong-secret" "$source/scripts/rl-launch.sh" --out "$run2" "${common[@]}" --steps 50 \
  : -np 1 "${xs[@]}" "$source/scripts/rl-launch.sh" --out "$run2" "${common[@]}" --steps 50 >"$work/wrong.log" 2>&1 || rc=$?
check_launch_failed "$work/wrong.log" "$run2" "$bed" "$rc" $((SECONDS - begin))
grep -qE "^\[[0-9]+,3\]<stderr>:generator: cannot connect" "$work/wrong.log" || fail "the error line is not rank 3's"
echo "rl launch by mpirun: ok (run 1 took $run1_s s; run 2, a rank failing, stopped in $((SECONDS - begin)) s, exit $rc)"
