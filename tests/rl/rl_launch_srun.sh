#!/usr/bin/env bash
# ctest helper: the RL loop launched across hosts of a test bed by Slurm's srun
# through scripts/rl-launch.sh, under a real Slurm: a private munged (its own
# key and socket), slurmctld in host 0 and one slurmd per host
# (NodeName = the host's address, so the node list resolves as a cluster's
# host names do; ProctrackType linuxproc, no cgroup confinement, no
# accounting). srun runs in the root namespace: `srun -N 3 -n 5` places ranks
# block-wise on the 2-CPU nodes (2, 2, 1), the layout of rl_launch_checks.sh.
# Nothing tells the ranks the trainer's host: rl-launch.sh takes the first
# node of SLURM_STEP_NODELIST (scontrol). Run 1 must complete
# (check_launch_ok); in run 2 (--multi-prog) rank 3 gets a wrong secret file
# and srun --kill-on-bad-exit must stop everything within 60 s
# (check_launch_failed). Every daemon is stopped, and the bed removed, however
# the test ends. Exits 77 (skipped, with the reason) without root, network
# namespaces, or Slurm and munge (scripts/install-deps.sh installs them).
# Usage: rl_launch_srun.sh BUILD_DIR SOURCE_DIR WORKDIR
set -euo pipefail
build="$1" source="$2" work="$3"
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$source/tests/rl/rl_launch_checks.sh"

if [ -z "${WS_TESTBED:-}" ]; then
  "$source/scripts/testbed.sh" check || exit 77
  for tool in slurmctld slurmd srun scontrol sinfo munged; do
    command -v "$tool" >/dev/null || PATH="$PATH:/usr/sbin" command -v "$tool" >/dev/null ||
      { echo "SKIPPED: $tool is not installed (scripts/install-deps.sh installs slurmctld slurmd slurm-client munge)"; exit 77; }
  done
  rm -rf "$work" && mkdir -p "$work"
  "$build/rl/zorplex-sft" --out "$work/start" --d-model 32 --layers 1 --heads 2 --d-ff 64 --max-seq-len 384 \
    --batch 4 --steps 2 --log-every 1 >"$work/sft.log"
  (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$work/secret" && echo >>"$work/secret")
  (umask 077 && echo "not-the-secret-of-this-run-0123456789abcdef" >"$work/wrong-secret")
  exec "$source/scripts/testbed.sh" run 3 -- bash "$0" "$@"
fi

# ---- Inside the bed: munge, slurmctld, a slurmd per host ----
export PATH="$PATH:/usr/sbin"
bed="$WS_TESTBED" tb="$WS_TESTBED_SCRIPT"
a0="$("$tb" addr "$bed" 0)" a1="$("$tb" addr "$bed" 1)" a2="$("$tb" addr "$bed" 2)"
# Slurm's and munge's files in a short /tmp path (their Unix sockets must fit
# in 108 bytes); the logs are copied to WORKDIR/slurm at the end.
s="$(mktemp -d /tmp/ws-slurm-XXXXXX)"
mkdir -p "$s/state" "$s/spool-$a0" "$s/spool-$a1" "$s/spool-$a2" && chmod 0755 "$s"
(umask 077 && mkdir "$s/munge" && head -c 1024 /dev/urandom >"$s/munge/munge.key")
chmod 0711 "$s/munge"  # the socket must be reachable; the key stays 0600
daemons=()
cleanup() {
  # The daemons this script started (testbed.sh down would kill what is left
  # in the hosts; munged runs in the root namespace), then their files.
  local pid
  for pid in "${daemons[@]}"; do kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    for pid in "${daemons[@]}"; do kill -0 "$pid" 2>/dev/null && break; pid=""; done
    [ -n "$pid" ] || break
    sleep 0.1
  done
  for pid in "${daemons[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  mkdir -p "$work/slurm" && cp "$s"/*.log "$s"/*.out "$s/slurm.conf" "$work/slurm/" 2>/dev/null || true
  rm -rf "$s"
}
trap cleanup EXIT
munged --force --foreground --socket="$s/munge/socket" --key-file="$s/munge/munge.key" \
  --log-file="$s/munge/log" --pid-file="$s/munge/pid" --seed-file="$s/munge/seed" >"$s/munge/out" 2>&1 &
daemons+=($!)
cat >"$s/slurm.conf" <<EOF
ClusterName=wstestbed
SlurmctldHost=$(hostname -s)($a0)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$s/munge/socket
SlurmctldPort=6817
KillWait=5
SlurmdPort=6818
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool-%n
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd-%n.pid
SlurmctldLogFile=$s/slurmctld.log
SlurmdLogFile=$s/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$a0 NodeAddr=$a0 CPUs=2 State=UNKNOWN
NodeName=$a1 NodeAddr=$a1 CPUs=2 State=UNKNOWN
NodeName=$a2 NodeAddr=$a2 CPUs=2 State=UNKNOWN
PartitionName=bed Nodes=$a0,$a1,$a2 Default=YES MaxTime=10 State=UP
EOF
printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' >"$s/cgroup.conf"
export SLURM_CONF="$s/slurm.conf"
for _ in $(seq 1 50); do [ -S "$s/munge/socket" ] && break; sleep 0.1; done
[ -S "$s/munge/socket" ] || fail "munged did not start: $(cat "$s/munge/out")"
"$tb" exec "$bed" 0 slurmctld -D -i -f "$SLURM_CONF" >"$s/slurmctld.out" 2>&1 &
daemons+=($!)
i=0
for a in "$a0" "$a1" "$a2"; do
  "$tb" exec "$bed" "$i" slurmd -D -N "$a" -f "$SLURM_CONF" >"$s/slurmd-$i.out" 2>&1 &
  daemons+=($!)
  i=$((i + 1))
done
idle=0
for _ in $(seq 1 60); do
  idle="$(sinfo -h -N -o '%t' 2>/dev/null | grep -c '^idle' || true)"
  [ "$idle" -eq 3 ] && break
  sleep 0.5
done
[ "$idle" -eq 3 ] || fail "Slurm did not bring up 3 idle nodes in 30 s: $(sinfo -N 2>&1; tail -n 5 "$s/slurmd-0.out")"

export OPENBLAS_NUM_THREADS=1 WEIGHTSYNC_BUILD_DIR="$build" WS_LAUNCH_SECRET_FILE="$work/secret"
unset WEIGHTSYNC_SECRET WS_LAUNCH_TRAINER_HOST
common=(--start "$work/start" --steps 3 --prompts 2 --group-size 3 --batch-groups 6 --time-limit 90
  --trainer-arg --keep-zero-variance --trainer-arg --idle-timeout --trainer-arg 60
  --generator-arg --trainer-timeout --generator-arg 30)

# ---- Run 1: the whole loop ----
run="$work/run"
mkdir -p "$run"
echo "some-other-job" >"$run/launch.done"  # a done file left by another job: ignored
begin=$SECONDS
rc=0
timeout 150 srun -N 3 -n 5 --label --kill-on-bad-exit=1 \
  "$source/scripts/rl-launch.sh" --out "$run" "${common[@]}" >"$work/run.log" 2>&1 || rc=$?
run1_s=$((SECONDS - begin))
[ "$rc" -eq 0 ] || fail "srun exited $rc: $(tail -n 15 "$work/run.log")"
check_launch_ok "$work/run.log" "$run" "$bed" "$a0"
grep -q "rl-launch\[rank 0\]: trainer on host .*via srun; trainer at $a0$" "$work/run.log" ||
  fail "rank 0 did not take the trainer's host from the node list"

# ---- Run 2: rank 3 has the wrong secret: srun stops everything ----
run2="$work/wrong"
mkdir -p "$run2"
{
  printf '0-2,4 %s' "$source/scripts/rl-launch.sh"
  printf ' %q' --out "$run2" "${common[@]}" --steps 50
  printf '\n3 env WS_LAUNCH_SECRET_FILE=%q %s' "$work/wrong-secret" "$source/scripts/rl-launch.sh"
  printf ' %q' --out "$run2" "${common[@]}" --steps 50
  printf '\n'
} >"$work/wrong.conf"
begin=$SECONDS
rc=0
timeout 150 srun -N 3 -n 5 --label --kill-on-bad-exit=1 --multi-prog "$work/wrong.conf" >"$work/wrong.log" 2>&1 || rc=$?
check_launch_failed "$work/wrong.log" "$run2" "$bed" "$rc" $((SECONDS - begin))
grep -qE "^ *3: generator: cannot connect" "$work/wrong.log" || fail "the error line is not rank 3's"
echo "rl launch by srun: ok (run 1 took $run1_s s; run 2, a rank failing, stopped in $((SECONDS - begin)) s, exit $rc)"
