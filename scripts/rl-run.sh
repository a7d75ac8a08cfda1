#!/usr/bin/env bash
# One RL run on this host: the trainer and N generators as separate processes
# (localhost; the weight transport is negotiated). The trainer's progress goes
# to the console; everything lands in --out: trainer.jsonl, generator-K.jsonl,
# timeline-*.jsonl, *.log and the RL checkpoint (policy.safetensors).
#
# Usage: scripts/rl-run.sh --start SFT_DIR --out DIR [--mode sync|async]
#          [--generators N] [--steps N] [--prompts P] [--group-size G]
#          [--temperature T] [--batch-groups B] [--device cpu|cuda] [--seed S] [--resume] [--transcripts]
#          [--task KIND[:DIFFICULTY][,KIND[:DIFFICULTY]...]] [--carry-candidates N]
#          [--trainer-cpus LIST --generator-cpus LIST] [--in-flight-updates on|off] [--dynamic-filter on|off]
#          [--hosts [--host-rate RATE] [--topology flat|chain|treeK]] [--sign] [-- more trainer options]
# The trainer runs the SFT warm start into SFT_DIR first if it is empty.
# --device goes to the trainer and every generator (default cpu).
# --resume: the trainer continues from its checkpoint in DIR and every
# generator from its place in its task stream (DIR/generator-K-state.json),
# so no prompt is drawn twice; a generator whose state file is missing,
# corrupt or from other flags stops with the reason.
# --transcripts: every generator writes each trajectory it samples as a JSON
# line to DIR/transcripts-generator-K.jsonl (prompt, turns, tool calls and
# results, reward, versions; 1-2 KB a line).
# --task: what the generators sample (default compositional:easy, e.g.
# compositional:medium; a comma-separated list alternates prompt by prompt,
# e.g. compositional:easy,compositional:medium); the trainer's held-out
# evaluation stays on easy.
# --carry-candidates N: prompts weighted towards carries (each generator
# draws N tasks per prompt and keeps the one whose column working takes the
# most carries or borrows in; default 1: off).
# --seed S: another run of the same settings (generators' sampling seed S and
# task seeds from 200000 + S * 10000000); without it the generators' defaults.
# --in-flight-updates on|off: async generators install new weights at token
# boundaries while they sample (on, the generator's default) or pull them in
# the foreground between rounds (off), to compare the two (docs/rl_loop.md).
# --dynamic-filter on|off: SLIME's dynamic sampling in every generator (on,
# the generator's default: zero-variance groups are not sent and each round
# samples further prompts until --prompts groups carry a signal, at most 4 x
# --prompts; docs/rl_loop.md). Left out, it is off when the trainer options
# after -- train on zero-variance groups (--baseline running, or
# --keep-zero-variance: the trainer refuses filtered groups there), else on;
# --dynamic-filter on with those options is refused.
# --trainer-cpus / --generator-cpus (taskset lists, e.g. 0 and 1): pin the
# trainer and every generator to those CPUs, as if each had a device of its
# own (docs/results.md); the trainer then runs one torch thread per CPU of its
# list. Both or neither.
# Trainer options after --, e.g. -- --wire-dtype bf16 (docs/rl_loop.md).
# --hosts: the same run across hosts of a test bed on this machine
# (scripts/testbed.sh, root only; docs/testbed.md): the trainer in host 0 bound
# to its address, generator K in host K+1, all on the per-run secret; weights
# then go over tcp between network namespaces, never shm. --host-rate caps
# every host's link in both directions (e.g. 1gbit). The bed is removed when
# the run ends, however it ends. --topology (with --hosts): flat (default) has
# every generator pull from the trainer; chain and treeK (e.g. tree2) make
# generators relays (generator --relay, docs/relays.md): in a chain generator K
# pulls from generator K-1's relay, in a tree of fan-out K from its parent's;
# each falls back to the trainer if its relay is lost.
# --sign: versions the trainer signs (docs/security.md): a per-run Ed25519
# key pair in DIR (trainer-key.pem, mode 0600, given to the trainer alone as
# WEIGHTSYNC_SIGNING_KEY; trainer-pub.pem to every generator as
# WEIGHTSYNC_TRUSTED_KEY), so each generator, and each relay on the way,
# accepts only versions the trainer signed. Host memory only (--device cpu).
# Across real hosts run the same two executables yourself: see docs/rl_loop.md.
# Unless WEIGHTSYNC_SECRET is set, every process of the run gets a random
# per-run secret, also written to DIR/secret (mode 0600) so you can attach
# another process: WEIGHTSYNC_SECRET="$(cat DIR/secret)" build/bin/generator ...
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"
all_args=("$@")

start="" out="" mode=async generators=2 steps=40 prompts=4 group_size=8 temperature=0.7 batch_groups=8 resume=""
transcripts=""
in_flight=() device=cpu hosts="" host_rate="" topology=flat sign="" seed="" trainer_cpus="" generator_cpus="" task=compositional:easy carry_candidates=1
extra=() dynamic_filter=""
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
    --seed) seed="$2"; shift 2 ;;
    --task) task="$2"; shift 2 ;;
    --carry-candidates) carry_candidates="$2"; shift 2 ;;
    --in-flight-updates) in_flight=(--in-flight-updates "$2"); shift 2 ;;
    --dynamic-filter) dynamic_filter="$2"; shift 2 ;;
    --trainer-cpus) trainer_cpus="$2"; shift 2 ;;
    --generator-cpus) generator_cpus="$2"; shift 2 ;;
    --resume) resume="--resume"; shift ;;
    --transcripts) transcripts=1; shift ;;
    --hosts) hosts=1; shift ;;
    --host-rate) host_rate="$2"; shift 2 ;;
    --topology) topology="$2"; shift 2 ;;
    --sign) sign=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "rl-run: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$start" ] && [ -n "$out" ] || { echo "rl-run: --start and --out are required (see --help)" >&2; exit 2; }
for tool in trainer generator; do
  [ -x "$build/bin/$tool" ] || { echo "rl-run: $build/bin/$tool is missing; run scripts/build.sh --target trainer generator" >&2; exit 2; }
done
[ -z "$host_rate" ] || [ -n "$hosts" ] || { echo "rl-run: --host-rate needs --hosts" >&2; exit 2; }
case "$topology" in
  flat) fanout=0 ;;
  chain) fanout=1 ;;
  tree[1-9]*) fanout="${topology#tree}" ;;
  *) echo "rl-run: --topology must be flat, chain or treeK (e.g. tree2), not '$topology'" >&2; exit 2 ;;
esac
# Pinning: both lists or neither; each a taskset list this machine has.
trainer_pin=() generator_pin=() trainer_threads=2
if [ -n "$trainer_cpus$generator_cpus" ]; then
  [ -n "$trainer_cpus" ] && [ -n "$generator_cpus" ] ||
    { echo "rl-run: --trainer-cpus and --generator-cpus go together" >&2; exit 2; }
  command -v taskset >/dev/null || { echo "rl-run: pinning needs taskset (util-linux)" >&2; exit 2; }
  for list in "$trainer_cpus" "$generator_cpus"; do
    taskset -c "$list" true 2>/dev/null ||
      { echo "rl-run: '$list' is not a CPU list of this machine (CPUs 0..$(($(nproc --all) - 1)); e.g. 0 or 0-3,8)" >&2; exit 2; }
  done
  trainer_pin=(taskset -c "$trainer_cpus") generator_pin=(taskset -c "$generator_cpus")
  trainer_threads=$(taskset -c "$trainer_cpus" nproc)
fi
seed_args=()
if [ -n "$seed" ]; then
  [[ "$seed" =~ ^[0-9]{1,6}$ ]] || { echo "rl-run: --seed must be a number from 0 to 999999, not '$seed'" >&2; exit 2; }
  seed_args=(--seed "$seed" --task-seed-base $((200000 + seed * 10000000)))
fi
task_kind='(simple|multi_step|recursive|compositional(:(easy|medium|hard))?)'
[[ "$task" =~ ^$task_kind(,$task_kind)*$ ]] ||
  { echo "rl-run: --task must be simple, multi_step, recursive or compositional[:easy|medium|hard], or a comma-separated list of them, not '$task'" >&2; exit 2; }
[[ "$carry_candidates" =~ ^[1-9][0-9]?$ ]] ||
  { echo "rl-run: --carry-candidates must be a number from 1 to 64, not '$carry_candidates'" >&2; exit 2; }
# The dynamic filter against the trainer's options: a trainer that trains on
# zero-variance groups refuses filtered ones.
keeps_zero_variance=""
for ((i = 0; i < ${#extra[@]}; i++)); do
  case "${extra[$i]}" in
    --keep-zero-variance|--baseline=running) keeps_zero_variance="${extra[$i]}" ;;
    --baseline) [ "${extra[$((i + 1))]:-}" != running ] || keeps_zero_variance="--baseline running" ;;
  esac
done
case "$dynamic_filter" in
  on) [ -z "$keeps_zero_variance" ] ||
        { echo "rl-run: --dynamic-filter on with the trainer's $keeps_zero_variance: that trainer trains on zero-variance groups and refuses filtered ones; leave --dynamic-filter out (it is then off)" >&2; exit 2; } ;;
  off) ;;
  "") dynamic_filter=on; [ -z "$keeps_zero_variance" ] || dynamic_filter=off ;;
  *) echo "rl-run: --dynamic-filter must be on or off, not '$dynamic_filter'" >&2; exit 2 ;;
esac
[ "$topology" = flat ] || [ -n "$hosts" ] || { echo "rl-run: --topology $topology needs --hosts" >&2; exit 2; }
[ -z "$sign" ] || [ "$device" = cpu ] ||
  { echo "rl-run: --sign checks whole versions in host memory: use it with --device cpu" >&2; exit 2; }
[ -z "$sign" ] || command -v openssl >/dev/null || { echo "rl-run: --sign needs the openssl command (apt-get install openssl)" >&2; exit 2; }
# on_host I CMD...: CMD in host I of the bed (--hosts), else here.
on_host=()
trainer_bind=()
if [ -n "$hosts" ]; then
  if [ -z "${WS_TESTBED:-}" ]; then
    # Run this script again inside a bed of 1 + N hosts; the trainer gets
    # time to checkpoint when the run is interrupted.
    "$root/scripts/testbed.sh" check >/dev/null || { "$root/scripts/testbed.sh" check; exit 2; }
    export WS_TESTBED_GRACE_S="${WS_TESTBED_GRACE_S:-60}"
    exec "$root/scripts/testbed.sh" run $((generators + 1)) ${host_rate:+--rate "$host_rate"} -- "$0" "${all_args[@]}"
  fi
  [ "${WS_TESTBED_HOSTS:-0}" -ge $((generators + 1)) ] ||
    { echo "rl-run: bed $WS_TESTBED has ${WS_TESTBED_HOSTS:-0} hosts, $((generators + 1)) needed" >&2; exit 2; }
  on_host=("$WS_TESTBED_SCRIPT" exec "$WS_TESTBED")
  trainer_bind=(--bind "$("$WS_TESTBED_SCRIPT" addr "$WS_TESTBED" 0)")
  echo "rl-run: bed $WS_TESTBED: trainer in host 0 (${trainer_bind[1]}), generators in hosts 1..$generators"
fi
run_on() {  # run_on HOST CMD...
  local host="$1"
  shift
  if [ -n "$hosts" ]; then
    exec "${on_host[@]}" "$host" "$@"
  else
    exec "$@"
  fi
}
mkdir -p "$out"
rm -f "$out/address.json"
# Before any process starts: the trainer and the generators read it.
. "$root/scripts/run-secret.sh"
ws_run_secret "$out" rl-run
if [ -n "$hosts" ] && [ -z "${WEIGHTSYNC_SECRET:-}" ]; then
  echo "rl-run: --hosts needs a secret (the trainer serves a non-loopback address); unset WEIGHTSYNC_SECRET for a per-run one" >&2
  exit 2
fi
# --sign: the private key reaches the trainer's environment only.
trainer_env=(env) generator_env=(env)
if [ -n "$sign" ]; then
  rm -f "$out/trainer-key.pem" "$out/trainer-pub.pem"
  (umask 077 && openssl genpkey -algorithm ed25519 -out "$out/trainer-key.pem" 2>/dev/null) ||
    { echo "rl-run: openssl could not make an Ed25519 key" >&2; exit 1; }
  openssl pkey -in "$out/trainer-key.pem" -pubout -out "$out/trainer-pub.pem" 2>/dev/null
  trainer_env=(env "WEIGHTSYNC_SIGNING_KEY=$out/trainer-key.pem")
  generator_env=(env "WEIGHTSYNC_TRUSTED_KEY=$out/trainer-pub.pem")
  echo "rl-run: the trainer signs every version with a per-run key ($out/trainer-key.pem, mode 0600);" \
    "generators and relays check it against $out/trainer-pub.pem"
fi

transcript_args=()
[ -z "$transcripts" ] || transcript_args=(--transcripts "$out")

# async: each generator sends its share of a step's groups and may run two
# steps ahead of the trainer (generator --groups-per-version, --max-ahead).
share=$(( (batch_groups + generators - 1) / generators ))

pids=()
trainer_pid=""
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  # --hosts: the bed goes when this script ends; let the trainer finish its
  # checkpoint first (it got the signal too), for at most 50 s.
  if [ -n "$hosts" ] && [ -n "$trainer_pid" ]; then
    for _ in $(seq 1 500); do kill -0 "$trainer_pid" 2>/dev/null || break; sleep 0.1; done
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

(run_on 0 "${trainer_pin[@]}" "${trainer_env[@]}" "$build/bin/trainer" --start "$start" --out "$out" --mode "$mode" --steps "$steps" \
  --generators "$generators" --prompts-per-round "$prompts" --temperature "$temperature" \
  --batch-groups "$batch_groups" --device "$device" --threads "$trainer_threads" --address-file "$out/address.json" \
  "${trainer_bind[@]}" $resume "${extra[@]}") \
  > >(tee -a "$out/trainer.log") 2>&1 &
trainer_pid=$!

until [ -s "$out/address.json" ]; do
  kill -0 "$trainer_pid" 2>/dev/null || { wait "$trainer_pid"; echo "rl-run: the trainer exited before serving (see $out/trainer.log)" >&2; exit 1; }
  sleep 0.2
done
if [ -n "$trainer_cpus" ]; then  # what the kernel says, not what was asked
  echo "rl-run: pinned: trainer on CPUs $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$trainer_pid/status")" \
    "with $trainer_threads torch threads, generators on CPUs $generator_cpus"
fi
weights=$(sed -n 's/.*"weights":"\([^"]*\)".*/\1/p' "$out/address.json")
trajectories=$(sed -n 's/.*"trajectories":"\([^"]*\)".*/\1/p' "$out/address.json")

# Relays (--topology chain|treeK): node 0 is the trainer, node K+1 generator
# K; node n's parent is node (n-1)/fanout; a generator with children relays on
# its host's address at a fixed port.
relay_port=29600
for id in $(seq 0 $((generators - 1))); do
  node=$((id + 1))
  sources="$weights"
  relay=()
  if [ "$fanout" -gt 0 ]; then
    parent=$(((node - 1) / fanout))
    if [ "$parent" -gt 0 ]; then
      sources="$("$WS_TESTBED_SCRIPT" addr "$WS_TESTBED" "$parent"):$relay_port,$weights"
    fi
    if [ $((node * fanout + 1)) -le "$generators" ]; then
      relay=(--relay "$("$WS_TESTBED_SCRIPT" addr "$WS_TESTBED" "$node"):$relay_port")
    fi
  fi
  (run_on "$node" "${generator_pin[@]}" "${generator_env[@]}" "$build/bin/generator" --trainer "$sources" --trajectories "$trajectories" --checkpoint "$start" \
    --id "$id" --mode "$mode" --prompts "$prompts" --group-size "$group_size" --temperature "$temperature" \
    --groups-per-version "$share" --max-ahead 2 --task "$task" --carry-candidates "$carry_candidates" --device "$device" --threads 1 --out "$out" $resume --dynamic-filter "$dynamic_filter" \
    "${transcript_args[@]}" "${in_flight[@]}" "${relay[@]}" "${seed_args[@]}") \
    >> "$out/generator-$id.log" 2>&1 &
  pids+=($!)
done

status=0
wait "$trainer_pid" || status=$?
exit "$status"
