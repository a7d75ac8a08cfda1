#!/usr/bin/env bash
# A filter for people watching an RL run: reads scripts/rl-run.sh's output on stdin and prints one
# line per trainer step the moment it arrives, with the time elapsed and an estimate of the time
# left (elapsed / steps done x steps to go). Other lines of the trainer and of rl-run.sh (a
# generator left out of a round, refused trajectories, the final line, errors) pass through;
# the generators' output is dropped (it is in the run's logs). Reads line by line and writes each line at once, so nothing waits in
# a pipe buffer (grep and mawk would hold it until the run ends).
#
# Usage: scripts/rl-run.sh ... | scripts/rl-progress.sh [LABEL]
#   LABEL   prefix of every line (default "rl")
set -uo pipefail
label="${1:-rl}"
case "$label" in -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac

duration() {  # seconds -> "1m05s" / "42s"
  local s=$1
  if [ "$s" -ge 60 ]; then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}

step_re='trainer: step +([0-9]+)/([0-9]+) .*reward ([-0-9.]+) +correct ([0-9.]+( \(all [0-9.]+\))?).*elapsed ([0-9]+)s'
while IFS= read -r line; do
  if [[ "$line" =~ $step_re ]]; then
    done_steps=${BASH_REMATCH[1]}
    total=${BASH_REMATCH[2]}
    reward=${BASH_REMATCH[3]}
    correct=${BASH_REMATCH[4]}
    elapsed=${BASH_REMATCH[6]}
    left=0
    [ "$done_steps" -gt 0 ] && left=$((elapsed * (total - done_steps) / done_steps))
    printf '%s: step %d/%d  reward %s  correct %s  %s elapsed, about %s left\n' "$label" "$done_steps" \
      "$total" "$reward" "$correct" "$(duration "$elapsed")" "$(duration "$left")"
  elif [[ "$line" == trainer:* || "$line" == rl-run:* ]]; then
    printf '%s: %s\n' "$label" "$line"
  fi
done
