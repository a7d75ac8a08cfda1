#!/usr/bin/env bash
# ctest helper: the RL loop across hosts of a test bed (scripts/testbed.sh):
# the trainer in host 0, three generators in hosts 1-3 wired as a chain of
# relays (generator 0 relays for 1, 1 for 2; scripts/rl-run.sh --hosts
# --topology chain). A tiny SFT policy, async mode, 3 steps. Checks: the same
# report as the localhost run (every step logged, the RL checkpoint written,
# generators stopped cleanly); every version each generator pulled has exactly
# the bytes the trainer published (xxHash3 of the parameter buffer, computed by
# each process on its own memory); weights crossed hosts over tcp (never shm
# between hosts) and went through the relays (a relaying generator reads its
# own relay over shm on its host; the others pull over tcp from the relay
# above them); and, with --sign, every pull carried the trainer's signature,
# forwarded unchanged by the relays and checked by every generator against
# the trainer's public key (docs/security.md, "Versions the trainer signs").
# Exits 77 (skipped) where network namespaces cannot be created.
# Usage: rl_loop_hosts.sh BUILD_DIR SOURCE_DIR WORKDIR
set -euo pipefail
build="$1" source="$2" work="$3"
"$source/scripts/testbed.sh" check || exit 77
rm -rf "$work" && mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1 WEIGHTSYNC_BUILD_DIR="$build"
unset WEIGHTSYNC_SECRET  # rl-run.sh makes a per-run one
fail() { echo "FAIL: $*" >&2; exit 1; }
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([0-9a-z.]*\).*/\1/p"; }

"$build/rl/zorplex-sft" --out "$work/start" --d-model 32 --layers 1 --heads 2 --d-ff 64 --max-seq-len 384 \
  --batch 4 --steps 2 --log-every 1 >"$work/sft.log"

run="$work/chain"
"$source/scripts/rl-run.sh" --start "$work/start" --out "$run" --mode async --steps 3 --prompts 2 \
  --group-size 3 --batch-groups 6 --generators 3 --hosts --topology chain --sign \
  -- --keep-zero-variance --idle-timeout 60 --round-timeout 30 >"$work/chain.log" 2>&1 ||
  fail "rl-run.sh --hosts failed: $(tail -n 5 "$work/chain.log")"
[ "$(grep -c '"event":"step"' "$run/trainer.jsonl")" -eq 3 ] || fail "trainer.jsonl should log 3 steps"
grep -q "done after 3 steps (version 4)" "$run/trainer.log" || fail "the trainer did not finish at version 4"
grep '"event":"publish"' "$run/trainer.jsonl" | while read -r line; do
  echo "$(echo "$line" | field version) $(echo "$line" | field xxh3)"
done >"$run/published.txt"
[ "$(wc -l <"$run/published.txt")" -eq 4 ] || fail "expected versions 1-4 published"
for g in 0 1 2; do
  pulls=0
  while read -r line; do
    pulled="$(echo "$line" | field version) $(echo "$line" | field xxh3)"
    grep -qx "$pulled" "$run/published.txt" || fail "generator $g pulled '$pulled', not what was published"
    pulls=$((pulls + 1))
  done < <(grep '"event":"pull"' "$run/generator-$g.jsonl")
  [ "$pulls" -ge 1 ] || fail "generator $g made no pull"
  signed="$(grep '"event":"pull"' "$run/generator-$g.jsonl" | grep -c '"signed":true' || true)"
  [ "$signed" -eq "$pulls" ] || fail "generator $g checked the trainer's signature on $signed of its $pulls pulls"
  grep -q '"event":"round"' "$run/generator-$g.jsonl" || fail "generator $g logged no round"
  grep -q "generator $g: stopped after" "$run/generator-$g.log" || fail "generator $g did not stop cleanly"
done
# The wiring: 0 and 1 relay (and read their own relay over shm), 2 pulls over
# tcp from 1's relay; nobody reads another host over shm.
for g in 0 1; do
  grep -q "generator $g: connected to its relay at .*(transport shm)" "$run/generator-$g.log" ||
    fail "generator $g should relay and read its own relay over shm: $(grep connected "$run/generator-$g.log")"
done
grep -q "generator 2: connected to the sources .*(transport tcp)" "$run/generator-2.log" ||
  fail "generator 2 should pull over tcp from generator 1's relay: $(grep connected "$run/generator-2.log")"
! grep -q '"transport":"shm"' "$run/generator-2.jsonl" || fail "generator 2 read another host over shm"
[ -s "$run/policy.safetensors" ] || fail "no RL checkpoint"
for t in trainer generator-0 generator-1 generator-2; do
  grep -q '"event":"' "$run/timeline-$t.jsonl" || fail "empty timeline for $t"
done
echo "rl loop across hosts: ok"
