#!/usr/bin/env bash
# testbed: a local user cannot turn the bed's lock against root (issue 30,
# finding 3). On a host with fs.protected_symlinks=0 a lock in world-writable
# /run/lock lets any user plant a symlink there (root's `up` truncates the
# target), a FIFO (root's `up` hangs) or a held flock (every bed, and every
# `rl-run.sh --hosts`, is refused). The lock must live where only root can
# create it, and a lock directory that someone else could have made or written
# must be refused, naming it.
#
# Usage: lock_attack_test.sh TESTBED_SH. Exits 77 (SKIPPED) where no bed can be
# made. The attacks run in a private mount namespace over a fresh /run (a
# tmpfs): what is planted there, the lock directory and the bed's namespaces
# are seen by no other process, so beds of other runs on this machine are not
# disturbed. The planted files are made as user nobody (setpriv).
set -euo pipefail
testbed="$(realpath "$1")"

if [ -z "${WS_LOCK_ATTACK_INNER:-}" ]; then
  rc=0
  "$testbed" check >/dev/null || rc=$?
  if [ "$rc" -ne 0 ]; then "$testbed" check; exit "$rc"; fi
  for tool in unshare setpriv mkfifo flock timeout stat; do
    command -v "$tool" >/dev/null || { echo "SKIPPED: $tool is not installed"; exit 77; }
  done
  id -u nobody >/dev/null 2>&1 || { echo "SKIPPED: there is no user nobody to plant the files as"; exit 77; }
  unshare -m --propagation private true 2>/dev/null ||
    { echo "SKIPPED: unshare -m (a private mount namespace) is refused here"; exit 77; }
  exec unshare -m --propagation private env WS_LOCK_ATTACK_INNER=1 bash "$(realpath "$0")" "$testbed"
fi

# ---- in the private mount namespace ----
mount -t tmpfs -o mode=0755 wslockattack /run
mkdir -m 1777 /run/lock
old_lock=/run/lock/weightsync-testbed.lock
new_dir=/run/weightsync
name="tbt-lock-$$"
as_nobody=(setpriv --reuid="$(id -u nobody)" --regid="$(id -g nobody)" --clear-groups)
target="$(mktemp /tmp/ws-lock-target.XXXXXX)"
holder=""
failures=0
cleanup() {
  if [ -n "$holder" ]; then kill "$holder" 2>/dev/null || true; wait "$holder" 2>/dev/null || true; fi
  timeout 60 "$testbed" down "$name" >/dev/null 2>&1 || true
  rm -f "$target" "$target.want" /tmp/ws-lock-attack-$$.err
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
  echo "FAILED: $*" >&2
  failures=$((failures + 1))
}
err=/tmp/ws-lock-attack-$$.err
# Runs `testbed.sh up NAME 1` within $1 seconds, then `down`; prints up's exit
# code (124: it hung, and was stopped by SIGTERM or 5 s later SIGKILL).
up_down() {
  local limit="$1" rc=0
  timeout -k 5 "$limit" "$testbed" up "$name" 1 >/dev/null 2>"$err" || rc=$?
  [ "$rc" -ne 137 ] || rc=124
  timeout 60 "$testbed" down "$name" >/dev/null 2>&1 || true
  echo "$rc"
}

# A root-owned file of 29 bytes that nobody may write.
printf 'root-owned, 29 bytes of data\n' >"$target"
chmod 0644 "$target"
cp "$target" "$target.want"

# 1. A symlink at the old lock path, planted by nobody: root's up must not
#    truncate (or otherwise open) the file it points at.
"${as_nobody[@]}" ln -s "$target" "$old_lock"
[ "$(stat -c %U "$old_lock")" = nobody ] || fail "could not plant the symlink as nobody"
rc="$(up_down 60)"
[ "$rc" -eq 0 ] || fail "up failed (exit $rc) with a symlink planted at $old_lock: $(cat "$err")"
cmp -s "$target" "$target.want" ||
  fail "up through the symlink at $old_lock changed the root-owned $target ($(stat -c %s "$target") bytes, was 29)"
cp "$target.want" "$target"
rm -f "$old_lock"

# 2. A FIFO there: opening it for writing blocks until a reader comes; up must
#    neither hang nor fail. Also through `run` (what rl-run.sh --hosts uses).
"${as_nobody[@]}" mkfifo -m 0666 "$old_lock"
rc="$(up_down 20)"
[ "$rc" -ne 124 ] || fail "up hung on a FIFO planted at $old_lock (killed after 20 s)"
[ "$rc" -eq 124 ] || [ "$rc" -eq 0 ] || fail "up failed (exit $rc) with a FIFO at $old_lock: $(cat "$err")"
rc=0
timeout -k 5 20 "$testbed" run 1 -- true >/dev/null 2>"$err" || rc=$?
[ "$rc" -ne 137 ] || rc=124
[ "$rc" -ne 124 ] || fail "run (rl-run.sh --hosts) hung on a FIFO planted at $old_lock (killed after 20 s)"
[ "$rc" -eq 124 ] || [ "$rc" -eq 0 ] || fail "run failed (exit $rc) with a FIFO at $old_lock: $(cat "$err")"
rm -f "$old_lock"

# 3. A lock file of nobody's, held by nobody: up must not wait for it.
"${as_nobody[@]}" sh -c "umask 0; : >'$old_lock'"
# (One process, the lock's fd in it: killing it releases the lock, and no
# child is left holding the test's output open.)
"${as_nobody[@]}" bash -c 'exec 8>>"$1" && flock -x 8 && exec sleep 120' holder "$old_lock" \
  </dev/null >/dev/null 2>&1 &
holder=$!
for _ in $(seq 1 50); do
  if ! flock -n "$old_lock" true 2>/dev/null; then break; fi
  sleep 0.1
done
rc="$(up_down 45)"
[ "$rc" -eq 0 ] || fail "a flock on $old_lock held by nobody denied the bed (exit $rc): $(cat "$err")"
kill "$holder" 2>/dev/null || true
wait "$holder" 2>/dev/null || true
holder=""
rm -f "$old_lock"

# 4. The lock's own directory: made by root, 0700; a bed then works again.
rm -rf "$new_dir"
rc="$(up_down 60)"
[ "$rc" -eq 0 ] || fail "up failed (exit $rc) with no planted files: $(cat "$err")"
if [ -d "$new_dir" ] && [ ! -L "$new_dir" ]; then
  [ "$(stat -c '%u %a' "$new_dir")" = "0 700" ] ||
    fail "$new_dir is $(stat -c '%U %a' "$new_dir"), not root's with mode 700"
  for f in "$new_dir"/*; do
    [ -e "$f" ] || continue
    [ "$(stat -c '%u %F' "$f")" = "0 regular empty file" ] && [ "$(stat -c %a "$f")" = 600 ] ||
      fail "$f is $(stat -c '%U %F %a' "$f"), not root's empty regular file with mode 600"
  done
else
  fail "up made no lock directory $new_dir"
fi

# 5. A lock directory that is not root's own: made by nobody (as if /run were
#    writable to it), group/world-writable, or a symlink: up refuses it, naming
#    it, and writes nothing through it.
refused() {  # refused WHAT: up must fail naming $new_dir
  local rc
  rc="$(up_down 20)"
  if [ "$rc" -eq 0 ]; then
    fail "up took its lock in $new_dir ($1)"
  elif [ "$rc" -eq 124 ]; then
    fail "up hung with $new_dir $1"
  elif ! grep -q "$new_dir" "$err"; then
    fail "up failed with $new_dir $1 but did not name it: $(cat "$err")"
  fi
}
rm -rf "$new_dir"
mkdir -m 0755 "$new_dir"
chown nobody "$new_dir"
"${as_nobody[@]}" ln -s "$target" "$new_dir/testbed.lock"
refused "owned by nobody"
cmp -s "$target" "$target.want" || fail "up wrote $target through a symlink in nobody's $new_dir"
rm -rf "$new_dir"
mkdir -m 0777 "$new_dir"
refused "writable by everyone"
rm -rf "$new_dir"
mkdir -m 0770 "$new_dir"
refused "writable by its group"
rm -rf "$new_dir"
mkdir -m 0700 /run/ws-elsewhere
ln -s /run/ws-elsewhere "$new_dir"
refused "a symlink"
rm -f "$new_dir"
rm -rf /run/ws-elsewhere

# 6. In root's own directory, a lock that is not a regular file (only root
#    could put one there): refused at once, never opened.
mkdir -m 0700 "$new_dir"
mkfifo -m 0600 "$new_dir/testbed.lock"
rc="$(up_down 20)"
[ "$rc" -ne 124 ] || fail "up hung on a FIFO at $new_dir/testbed.lock"
[ "$rc" -ne 0 ] || fail "up took a FIFO at $new_dir/testbed.lock as its lock"
rm -f "$new_dir/testbed.lock"
ln -s "$target" "$new_dir/testbed.lock"
rc="$(up_down 20)"
[ "$rc" -ne 0 ] || fail "up took a symlink at $new_dir/testbed.lock as its lock"
cmp -s "$target" "$target.want" || fail "up wrote $target through a symlink at $new_dir/testbed.lock"
rm -rf "$new_dir"

# 7. A lock left readable to others in a root directory others may enter (an
#    admin's 0755 /run/weightsync): up takes it back to mode 600.
mkdir -m 0755 "$new_dir"
install -m 0644 /dev/null "$new_dir/testbed.lock"
rc="$(up_down 60)"
[ "$rc" -eq 0 ] || fail "up failed (exit $rc) with a 0755 $new_dir: $(cat "$err")"
[ "$(stat -c %a "$new_dir/testbed.lock")" = 600 ] ||
  fail "up left $new_dir/testbed.lock at mode $(stat -c %a "$new_dir/testbed.lock") (others could hold its flock)"
rm -rf "$new_dir"

if ip netns list | grep -q "^$name-h"; then fail "namespaces of $name are left"; fi
[ "$failures" -eq 0 ] || { echo "testbed lock attack: $failures failure(s)" >&2; exit 1; }
echo "testbed lock attack: ok"
