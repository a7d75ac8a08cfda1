# Sourced by the run scripts (rl-run.sh, demo.sh, weights-demo.sh), never run:
#   . "$root/scripts/run-secret.sh"; ws_run_secret DIR PREFIX
# Gives the processes a run starts a shared secret, so that no other local
# user can connect to them (without a secret a publisher serves only its own
# uid; with one, whoever knows it). If WEIGHTSYNC_SECRET is set (even empty:
# "no secret") it is kept as it is. Otherwise a random per-run secret (32
# bytes from /dev/urandom, hex) is written to DIR/secret, mode 0600, and
# exported for the children; the file lets you attach another process:
#   WEIGHTSYNC_SECRET="$(cat DIR/secret)" build/bin/generator ...
# The secret travels in the environment, never on a command line (which any
# user can read in ps).
ws_run_secret() {
  local dir="$1" prefix="$2"
  if [ -n "${WEIGHTSYNC_SECRET+set}" ]; then
    if [ -z "$WEIGHTSYNC_SECRET" ]; then
      echo "$prefix: WEIGHTSYNC_SECRET is set but empty: no secret, so only this user ($(id -un)) can connect"
    else
      echo "$prefix: using WEIGHTSYNC_SECRET from the environment"
    fi
    return 0
  fi
  local secret
  secret="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
  if [ "${#secret}" -ne 64 ]; then
    echo "$prefix: cannot read 32 random bytes from /dev/urandom" >&2
    return 1
  fi
  mkdir -p "$dir"
  rm -f "$dir/secret"
  (umask 077 && set -C && printf '%s\n' "$secret" > "$dir/secret")
  chmod 600 "$dir/secret"
  export WEIGHTSYNC_SECRET="$secret"
  echo "$prefix: per-run secret in $dir/secret (mode 0600); attach another process with" \
    "WEIGHTSYNC_SECRET=\"\$(cat $dir/secret)\""
}
