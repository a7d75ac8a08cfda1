#!/usr/bin/env bash
# The installed weightsync.pc, used as an outside Makefile-style project would:
#   pkg_config_consumer.sh PREFIX LIBDIR CONSUMER_SOURCE WORK VERSION [SANITIZE]
# PREFIX: an installed prefix (cmake --install --prefix PREFIX); LIBDIR: its
# CMAKE_INSTALL_LIBDIR (relative); CONSUMER_SOURCE: examples/consumer/main.cc;
# WORK: a scratch directory (emptied); VERSION: the expected --modversion;
# SANITIZE: the sanitizer list the library was built with (may be empty).
# Checks, against PREFIX and then against a copy of it (relocation):
# --modversion, --variable=prefix/libdir/includedir name that prefix, every
# -I/-L of `pkg-config --cflags --libs weightsync` lies inside it, and main.cc
# compiled with `$CXX main.cc $(pkg-config --cflags --libs weightsync)` runs
# (LD_LIBRARY_PATH=libdir), prints "consumer: ok" and loads that prefix's
# libweightsync (ldd). Ends with "pkg-config consumer: ok".
set -uo pipefail

fail() { echo "pkg-config consumer: FAILED: $*" >&2; exit 1; }

[ $# -ge 5 ] || fail "usage: $0 PREFIX LIBDIR CONSUMER_SOURCE WORK VERSION [SANITIZE]"
prefix_arg=$1 libdir_rel=$2 source=$3 work=$4 version=$5 sanitize=${6:-}
cxx=${CXX:-c++}

command -v pkg-config >/dev/null || fail "pkg-config is not installed"
command -v "$cxx" >/dev/null || fail "no C++ compiler ($cxx)"
[ -f "$source" ] || fail "consumer source $source does not exist"
case "$libdir_rel" in /*) fail "LIBDIR '$libdir_rel' is absolute: the .pc file is not relocatable then" ;; esac
prefix=$(realpath -e "$prefix_arg" 2>/dev/null) || fail "installed prefix $prefix_arg does not exist"
[ -f "$prefix/$libdir_rel/pkgconfig/weightsync.pc" ] ||
  fail "$prefix/$libdir_rel/pkgconfig/weightsync.pc is not installed"

case "$work" in /*) ;; *) fail "WORK must be an absolute path, got '$work'" ;; esac
{ rm -rf "$work" && mkdir -p "$work"; } || fail "cannot make the work directory $work"

sanitize_flags=()
[ -n "$sanitize" ] && sanitize_flags=("-fsanitize=$sanitize")

# check LABEL PREFIX: every check against the prefix PREFIX (an absolute, real path).
check() {
  local label=$1 want=$2 out
  export PKG_CONFIG_PATH="$want/$libdir_rel/pkgconfig"
  # Only this prefix: no weightsync.pc from the system may answer instead.
  export PKG_CONFIG_LIBDIR="$PKG_CONFIG_PATH"
  unset PKG_CONFIG_SYSROOT_DIR

  out=$(timeout 20 pkg-config --modversion weightsync 2>&1) ||
    fail "[$label] pkg-config --modversion weightsync: $out"
  [ "$out" = "$version" ] || fail "[$label] --modversion is '$out', want '$version'"

  local got_prefix got_real
  got_prefix=$(timeout 20 pkg-config --variable=prefix weightsync 2>&1) ||
    fail "[$label] pkg-config --variable=prefix weightsync: $got_prefix"
  got_real=$(realpath -e "$got_prefix" 2>/dev/null) ||
    fail "[$label] prefix variable '$got_prefix' names no existing directory"
  [ "$got_real" = "$want" ] ||
    fail "[$label] prefix variable '$got_prefix' resolves to '$got_real', want '$want'"

  local libdir libdir_real
  libdir=$(timeout 20 pkg-config --variable=libdir weightsync 2>&1) ||
    fail "[$label] pkg-config --variable=libdir weightsync: $libdir"
  libdir_real=$(realpath -e "$libdir" 2>/dev/null) ||
    fail "[$label] libdir variable '$libdir' names no existing directory"
  [ "$libdir_real" = "$want/$libdir_rel" ] ||
    fail "[$label] libdir variable '$libdir' resolves to '$libdir_real', want '$want/$libdir_rel'"

  local flags
  flags=$(timeout 20 pkg-config --cflags --libs weightsync 2>&1) ||
    fail "[$label] pkg-config --cflags --libs weightsync: $flags"
  echo "[$label] pkg-config --cflags --libs weightsync: $flags"
  # Every -I and -L must be a directory inside this prefix.
  local flag dir n_inc=0 n_lib=0
  for flag in $flags; do
    case "$flag" in
      -I*) dir=${flag#-I}; n_inc=$((n_inc + 1)) ;;
      -L*) dir=${flag#-L}; n_lib=$((n_lib + 1)) ;;
      *) continue ;;
    esac
    dir=$(realpath -e "$dir" 2>/dev/null) || fail "[$label] $flag names no existing directory"
    case "$dir/" in "$want"/*) ;; *) fail "[$label] $flag is outside the prefix $want" ;; esac
  done
  { [ "$n_inc" -ge 1 ] && [ "$n_lib" -ge 1 ]; } || fail "[$label] flags '$flags' lack an -I or an -L"
  local includedir
  includedir=$(timeout 20 pkg-config --variable=includedir weightsync 2>&1) ||
    fail "[$label] pkg-config --variable=includedir weightsync: $includedir"
  [ -f "$includedir/weightsync/weightsync.h" ] ||
    fail "[$label] includedir '$includedir' has no weightsync/weightsync.h"

  local exe="$work/$label/ws_pkg_consumer" log
  mkdir -p "$work/$label" || fail "[$label] cannot make $work/$label"
  # shellcheck disable=SC2086  # the flags are a list of arguments
  log=$(timeout 120 "$cxx" "${sanitize_flags[@]}" -o "$exe" "$source" $flags 2>&1) ||
    fail "[$label] compiling $source with '$cxx ${sanitize_flags[*]} $flags' failed:
$log"

  local run_out rc
  run_out=$(LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 60 "$exe" 2>&1)
  rc=$?
  [ "$rc" -eq 0 ] || fail "[$label] running the consumer (LD_LIBRARY_PATH=$libdir) exited $rc:
$run_out"
  printf '%s\n' "$run_out" | grep -q '^consumer: ok' ||
    fail "[$label] the consumer printed no 'consumer: ok' line:
$run_out"
  echo "[$label] $run_out"
  # The program must load the library of this prefix, not another one.
  local loaded
  loaded=$(LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 20 ldd "$exe" 2>&1 |
           awk '$1 ~ /^libweightsync\.so/ { print $3 }')
  [ -n "$loaded" ] || fail "[$label] ldd shows no libweightsync for $exe"
  loaded=$(realpath -e "$loaded" 2>/dev/null) || fail "[$label] ldd names a libweightsync that does not exist"
  case "$loaded" in "$want"/*) ;; *) fail "[$label] the consumer loads $loaded, not the one under $want" ;; esac
}

check installed "$prefix"

# Relocation: the whole prefix copied elsewhere must work from its new place.
copy="$work/relocated-prefix"
cp -a "$prefix" "$copy" || fail "copying $prefix to $copy failed"
copy=$(realpath -e "$copy") || fail "the copy $copy does not exist"
check relocated "$copy"

rm -rf "$work"
echo "pkg-config consumer: ok"
