#!/usr/bin/env bash
# A multi-host test bed on one machine: K "hosts" are Linux network namespaces
# NAME-h0 .. NAME-h{K-1}, each with one veth link (eth0 inside) to a bridge in
# the root namespace, addresses 10.X.Y.(i+1)/24 (a /24 chosen per NAME), the
# bridge at 10.X.Y.254 so root-namespace processes reach every host. Optionally
# every link is capped in both directions (tbf). See docs/testbed.md for what
# it models and what it does not (no delay, no loss; one kernel and one set of
# CPUs shared by all hosts). Needs root and iproute2. `up` takes a lock in
# /run/weightsync (made by root, 0700; refused if anyone else could write it).
#
# Usage:
#   scripts/testbed.sh up NAME K [--rate RATE] [--burst BYTES]
#       Creates the bed and prints "HOST i NAMESPACE ADDRESS" per host. RATE as
#       tc takes it (500mbit, 1gbit, ...); BYTES the token bucket (default: 4 ms
#       at RATE, at least 128k). Fails, naming `down`, if NAME exists.
#   scripts/testbed.sh exec NAME i CMD...   CMD in host i (its pid is CMD's)
#   scripts/testbed.sh addr NAME i          prints host i's address
#   scripts/testbed.sh down NAME            kills what runs in NAME's hosts and
#                                           removes them; succeeds if none is there
#   scripts/testbed.sh run K [--rate RATE] [--burst BYTES] -- CMD...
#       A bed with a unique NAME for the duration of CMD (run in the root
#       namespace with WS_TESTBED=NAME, WS_TESTBED_HOSTS=K and
#       WS_TESTBED_SCRIPT=<this script>); exits with CMD's code (130/143 when
#       interrupted) and removes the bed on every exit path. A signal is passed
#       on to CMD, which gets WS_TESTBED_GRACE_S seconds (default 2) to exit.
#   scripts/testbed.sh check                exit 0 if beds can be made here, else
#                                           "SKIPPED: <reason>" and exit 77
#   scripts/testbed.sh list                 beds (and leftovers) that exist now
set -euo pipefail

self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
# The lock that serialises `up` (and `run`, which rl-run.sh --hosts uses): in a
# directory only root can create or write (never the world-writable /run/lock,
# where any user could plant a symlink, a FIFO or a held flock there for root).
lock_dir=/run/weightsync
lock_file="$lock_dir/testbed.lock"
max_hosts=200

die() {
  echo "testbed: $*" >&2
  exit 1
}
usage() {
  sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$self"
}

# Opens the lock on fd 9 (not yet taken): $lock_dir is made by root with mode
# 0700 if missing, and refused unless it is a directory (not a symlink) of
# root's that neither group nor others can write; the lock in it must be a
# regular file (a symlink, FIFO or device is refused, never opened: a FIFO
# would block the open), opened without truncating.
open_lock() {
  local uid mode type info mask parent="${lock_dir%/*}"
  # Its parent (/run): root's, and writable by others only with the sticky
  # bit (else $lock_dir could be swapped for another after the checks below).
  info="$(stat -c '%u:%a' "$parent" 2>/dev/null)" || die "cannot stat $parent"
  IFS=: read -r uid mode <<<"$info"
  if [ "$uid" != 0 ] || { ! [[ "$mode" =~ [0145][0145]$ ]] && [ $((8#$mode & 8#1000)) -eq 0 ]; }; then
    die "refusing to keep the lock in $parent: it is uid $uid's with mode $mode (not root's, or writable by others)"
  fi
  if [ ! -e "$lock_dir" ] && [ ! -L "$lock_dir" ]; then
    mkdir -m 0700 "$lock_dir" 2>/dev/null || [ -d "$lock_dir" ] || die "cannot create $lock_dir"
  fi
  info="$(stat -c '%u:%a:%F' "$lock_dir" 2>/dev/null)" || die "cannot stat $lock_dir"
  IFS=: read -r uid mode type <<<"$info"
  if [ "$type" != directory ] || [ "$uid" != 0 ]; then
    die "refusing the lock directory $lock_dir: it is a $type owned by uid $uid, not a directory of root's (remove it; testbed.sh makes it)"
  fi
  # No write bit for group or others (the last two octal digits are 0, 1, 4 or 5).
  [[ "$mode" =~ [0145][0145]$ ]] ||
    die "refusing the lock directory $lock_dir: mode $mode lets group or others write it (remove it, or chmod 0700 it)"
  if [ -L "$lock_file" ] || { [ -e "$lock_file" ] && [ ! -f "$lock_file" ]; }; then
    die "refusing the lock $lock_file: it is a $(stat -c %F "$lock_file"), not a regular file (remove it)"
  fi
  mask="$(umask)"
  umask 077
  exec 9>>"$lock_file"
  umask "$mask"
  info="$(stat -L -c '%u:%F' /proc/self/fd/9)"
  case "$info" in
    "0:regular file" | "0:regular empty file") ;;
    *) die "refusing the lock $lock_file: it is ${info#*:} of uid ${info%%:*}, not root's regular file" ;;
  esac
  chmod 0600 /proc/self/fd/9  # one left readable to others would let them hold its flock
}

# Short names (interface names are at most 15 bytes): ws<6 hex of NAME's hash>.
tag_of() { printf '%s' "$1" | md5sum | cut -c1-6; }
bridge_of() { echo "ws$(tag_of "$1")br"; }
veth_of() { echo "ws$(tag_of "$1")h$2"; }  # root-namespace end of host $2's link

valid_name() {
  [[ "$1" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$ ]] || die "bad bed name '$1' (1-40 of A-Z a-z 0-9 _ . -)"
}
valid_index() {
  [[ "$1" =~ ^[0-9]+$ ]] || die "bad host index '$1'"
}

# The namespaces of bed $1, in index order.
namespaces_of() {
  local name="$1"
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${name//./\\.}-h[0-9]+$" | sort -V || true
}

# Bits per second of a tc rate ("500mbit", "1gbit", "10mbps" = bytes).
rate_bits() {
  local r="${1,,}" n unit
  [[ "$r" =~ ^([0-9]+)([a-z]*)$ ]] || die "bad rate '$1' (e.g. 500mbit, 1gbit)"
  n="${BASH_REMATCH[1]}" unit="${BASH_REMATCH[2]}"
  case "$unit" in
    ""|bit) echo "$n" ;;
    kbit) echo $((n * 1000)) ;;
    mbit) echo $((n * 1000000)) ;;
    gbit) echo $((n * 1000000000)) ;;
    bps) echo $((n * 8)) ;;
    kbps) echo $((n * 8000)) ;;
    mbps) echo $((n * 8000000)) ;;
    gbps) echo $((n * 8000000000)) ;;
    *) die "bad rate unit in '$1' (bit, kbit, mbit, gbit, bps, kbps, mbps, gbps)" ;;
  esac
}

# A free 10.X.Y.0/24 for bed $1: from its hash, the next free one on collision.
pick_subnet() {
  local h x y _ used
  h=$((16#$(tag_of "$1")))
  x=$((200 + h % 50)) y=$(((h >> 8) % 256))
  used="$(ip -4 -o addr show 2>/dev/null; ip -4 route show table all 2>/dev/null)"
  for _ in $(seq 1 512); do
    if ! grep -q " 10\.$x\.$y\.[0-9]" <<<"$used"; then
      echo "10.$x.$y"
      return 0
    fi
    y=$((y + 1))
    if [ "$y" -gt 255 ]; then y=0 x=$((x + 1)); fi
    if [ "$x" -gt 249 ]; then x=200; fi
  done
  die "no free 10.200-249.x.0/24 subnet"
}

shape() {  # shape DEV RATE BURST [netns]
  local dev="$1" rate="$2" burst="$3" ns="${4:-}"
  local cmd=(tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 20ms)
  if [ -n "$ns" ]; then
    ip netns exec "$ns" "${cmd[@]}"
  else
    "${cmd[@]}"
  fi
}

cmd_up() {
  local name="" k="" rate="" burst=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --rate) [ $# -ge 2 ] || die "--rate needs a value"; rate="$2"; shift 2 ;;
      --burst) [ $# -ge 2 ] || die "--burst needs a value"; burst="$2"; shift 2 ;;
      -*) die "unknown option $1 (see --help)" ;;
      *) if [ -z "$name" ]; then name="$1"; elif [ -z "$k" ]; then k="$1"; else die "extra argument $1"; fi; shift ;;
    esac
  done
  [ -n "$name" ] && [ -n "$k" ] || die "usage: testbed.sh up NAME K [--rate RATE] [--burst BYTES]"
  valid_name "$name"
  [[ "$k" =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le "$max_hosts" ] || die "K must be 1..$max_hosts, not '$k'"
  if [ -n "$rate" ]; then
    local bits
    bits="$(rate_bits "$rate")"
    [ "$bits" -gt 0 ] || die "bad rate '$rate'"
    if [ -z "$burst" ]; then
      burst=$((bits / 8 / 250))  # 4 ms at the rate
      [ "$burst" -ge 131072 ] || burst=131072
    fi
  elif [ -n "$burst" ]; then
    die "--burst needs --rate"
  fi
  local br
  br="$(bridge_of "$name")"
  open_lock
  flock -w 30 9 || die "cannot take $lock_file within 30 s (another testbed.sh up is running)"
  if [ -n "$(namespaces_of "$name")" ] || ip link show "$br" >/dev/null 2>&1; then
    die "a bed named '$name' exists already; remove it with: $self down $name"
  fi
  # From here on a failure (or a signal) removes what was made.
  trap 'rc=$?; if [ $rc -ne 0 ]; then cmd_down "$name" >/dev/null 2>&1 || true; fi; exit $rc' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local subnet
  subnet="$(pick_subnet "$name")"
  ip link add "$br" type bridge
  ip link set dev "$br" alias "wstestbed:$name"
  ip addr add "$subnet.254/24" dev "$br"
  ip link set dev "$br" up
  local i ns veth
  for ((i = 0; i < k; i++)); do
    ns="$name-h$i"
    veth="$(veth_of "$name" "$i")"
    ip netns add "$ns"
    ip link add "$veth" type veth peer name "${veth}n"
    ip link set "${veth}n" netns "$ns"
    ip -n "$ns" link set "${veth}n" name eth0
    ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip link set "$veth" master "$br"
    ip link set "$veth" up
    if [ -n "$rate" ]; then
      shape eth0 "$rate" "$burst" "$ns"  # host -> bridge
      shape "$veth" "$rate" "$burst"     # bridge -> host
    fi
  done
  flock -u 9
  for ((i = 0; i < k; i++)); do
    echo "HOST $i $name-h$i $subnet.$((i + 1))"
  done
  trap - EXIT INT TERM
}

cmd_exec() {
  [ $# -ge 3 ] || die "usage: testbed.sh exec NAME i CMD..."
  local name="$1" i="$2"
  shift 2
  valid_name "$name"
  valid_index "$i"
  ip netns list | awk '{print $1}' | grep -qx -- "$name-h$i" || die "no host $i in bed '$name'"
  exec ip netns exec "$name-h$i" "$@"
}

cmd_addr() {
  [ $# -eq 2 ] || die "usage: testbed.sh addr NAME i"
  local name="$1" i="$2" addr
  valid_name "$name"
  valid_index "$i"
  addr="$(ip -n "$name-h$i" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -n 1)"
  [ -n "$addr" ] || die "no host $i in bed '$name'"
  echo "$addr"
}

# Kills every process in the namespaces of bed $1 (TERM, then KILL after 2 s).
kill_hosts() {
  local name="$1" ns pids round
  for round in $(seq 1 40); do
    pids=""
    for ns in $(namespaces_of "$name"); do
      pids="$pids $(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
    done
    pids="$(echo "$pids" | xargs)"
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086  # a list of pids
    if [ "$round" -le 20 ]; then kill -TERM $pids 2>/dev/null || true; else kill -KILL $pids 2>/dev/null || true; fi
    sleep 0.1
  done
  echo "testbed: processes still in bed '$name' after SIGKILL: $pids" >&2
  return 1
}

cmd_down() {
  [ $# -eq 1 ] || die "usage: testbed.sh down NAME"
  local name="$1" ns br dev ok=0
  valid_name "$name"
  kill_hosts "$name" || ok=1
  for ns in $(namespaces_of "$name"); do
    ip netns del "$ns" 2>/dev/null || ok=1
  done
  br="$(bridge_of "$name")"
  # Root-namespace ends of the links (normally gone with their namespaces).
  for dev in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
    grep -E "^ws$(tag_of "$name")h[0-9]+$" || true); do
    ip link del "$dev" 2>/dev/null || true
  done
  if ip link show "$br" >/dev/null 2>&1; then ip link del "$br" || ok=1; fi
  if [ -n "$(namespaces_of "$name")" ] || ip link show "$br" >/dev/null 2>&1; then
    echo "testbed: could not remove all of bed '$name'" >&2
    return 1
  fi
  return "$ok"
}

# Stops run's CMD ($run_child): signal $1, then TERM after G/2 s, KILL after
# G s, G = WS_TESTBED_GRACE_S (default 2; e.g. longer for a trainer that
# checkpoints on SIGINT). `down` then kills whatever is left in the hosts.
run_child="" run_name="" run_rc=0
run_child_stop() {
  local sig="$1" grace="${WS_TESTBED_GRACE_S:-2}" i
  [[ "$grace" =~ ^[0-9]+$ ]] && [ "$grace" -ge 1 ] || grace=2
  [ -n "$run_child" ] || return 0
  kill "-$sig" "$run_child" 2>/dev/null || true
  for i in $(seq 1 $((grace * 10 + 10))); do
    kill -0 "$run_child" 2>/dev/null || return 0
    if [ "$i" -eq $((grace * 5)) ]; then kill -TERM "$run_child" 2>/dev/null || true; fi
    if [ "$i" -eq $((grace * 10)) ]; then kill -KILL "$run_child" 2>/dev/null || true; fi
    sleep 0.1
  done
}

cmd_run() {
  local k="" opts=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --rate|--burst) [ $# -ge 2 ] || die "$1 needs a value"; opts+=("$1" "$2"); shift 2 ;;
      --) shift; break ;;
      -*) die "unknown option $1 (see --help)" ;;
      *) [ -z "$k" ] || die "extra argument $1 (the command goes after --)"; k="$1"; shift ;;
    esac
  done
  [ -n "$k" ] && [ $# -ge 1 ] || die "usage: testbed.sh run K [--rate RATE] -- CMD..."
  run_name="wstb-$$-$RANDOM"
  local rc=0
  # Removed on every exit path; a signal stops CMD first (run_child_stop).
  trap 'run_rc=$?; trap - EXIT INT TERM; run_child_stop TERM
        cmd_down "$run_name" >/dev/null 2>&1 || cmd_down "$run_name"; exit $run_rc' EXIT
  trap 'run_child_stop INT; exit 130' INT
  trap 'run_child_stop TERM; exit 143' TERM
  (cmd_up "$run_name" "$k" "${opts[@]}") >&2  # a subshell: its traps are its own
  export WS_TESTBED="$run_name" WS_TESTBED_HOSTS="$k" WS_TESTBED_SCRIPT="$self"
  # In the background so that a signal to this script is handled at once
  # (bash runs traps only between commands); stdin stays the caller's, and
  # SIGINT is restored (bash ignores it in background jobs).
  exec 3<&0
  (trap - INT QUIT; exec "$@" <&3 3<&-) &
  run_child=$!
  set +e
  wait "$run_child"
  rc=$?
  set -e
  run_child=""
  exit "$rc"
}

cmd_check() {
  skip() {
    echo "SKIPPED: $*"
    exit 77
  }
  [ "$(id -u)" -eq 0 ] || skip "the test bed needs root (network namespaces), and this is uid $(id -u)"
  command -v ip >/dev/null || skip "iproute2's ip is not installed"
  command -v flock >/dev/null || skip "flock (util-linux) is not installed"
  local probe="wstbcheck$$" pfx="wsc$$" err
  if ! err="$(ip netns add "$probe" 2>&1)"; then
    skip "ip netns add is refused here: $err"
  fi
  if ! err="$(ip link add "${pfx}v" type veth peer name "${pfx}p" netns "$probe" 2>&1)"; then
    ip netns del "$probe" 2>/dev/null || true
    skip "veth pairs cannot be made here: $err"
  fi
  ip link del "${pfx}v" 2>/dev/null || true
  ip netns del "$probe" 2>/dev/null || true
  if ! err="$(ip link add "${pfx}b" type bridge 2>&1)"; then
    skip "bridges cannot be made here: $err"
  fi
  ip link del "${pfx}b" 2>/dev/null || true
  echo "testbed: network namespaces, veth pairs and bridges work here"
}

cmd_list() {
  local names
  names="$( (ip netns list 2>/dev/null | awk '{print $1}' | sed -nE 's/^(.+)-h[0-9]+$/\1/p'
    ip -d -o link show type bridge 2>/dev/null | sed -nE 's/.*alias wstestbed:([^ \\]+).*/\1/p') | sort -u)"
  [ -n "$names" ] || { echo "testbed: no beds"; return 0; }
  local name hosts br subnet
  for name in $names; do
    hosts="$(namespaces_of "$name" | wc -l)"
    br="$(bridge_of "$name")"
    subnet="$(ip -4 -o addr show dev "$br" 2>/dev/null | awk '{print $4}' | head -n 1)"
    echo "BED $name hosts=$hosts bridge=$(ip link show "$br" >/dev/null 2>&1 && echo "$br" || echo none) subnet=${subnet:-none}"
  done
}

[ $# -ge 1 ] || { usage; exit 2; }
sub="$1"
shift
case "$sub" in
  up) cmd_up "$@" ;;
  exec) cmd_exec "$@" ;;
  addr) cmd_addr "$@" ;;
  down) cmd_down "$@" ;;
  run) cmd_run "$@" ;;
  check) cmd_check ;;
  list) cmd_list ;;
  -h|--help|help) usage ;;
  *) echo "testbed: unknown command '$sub' (see --help)" >&2; exit 2 ;;
esac
