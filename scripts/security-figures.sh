#!/usr/bin/env bash
# The figures for docs/security.md (raw results: docs/perf/security-figures.md):
# runs weightsync-crowd-bench's scenarios (crowd, flood) from a built tree and
# prints its table. With --old-too it also exports a git commit (--old-ref, default
# HEAD), builds the same tool against that commit's library and runs it there, for a
# before/after comparison.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/security-figures.sh [--old-too [--old-ref REF]] [--out DIR] [-- weightsync-crowd-bench options]

Runs build/bench/weightsync-crowd-bench (the build directory is WEIGHTSYNC_BUILD_DIR,
default build/) with the default scenarios (crowd over tcp, then flood; a few minutes on
2 cores) and prints its table. Build it first:
  WEIGHTSYNC_BUILD_DIR=build scripts/build.sh --target weightsync-crowd-bench

  --old-too   also export git REF to $OLD_SRC (default /tmp/old-src), copy the tool's
              sources and CMake lines into it, build it in $OLD_BUILD (default
              /tmp/old-build, -DWEIGHTSYNC_WITH_TORCH=OFF -DWEIGHTSYNC_WITH_CUDA=OFF) and run
              it there after the work tree's run.
  --old-ref REF  the "old" commit for --old-too (default HEAD; the thread-per-connection
              server is 29a1b40, the commit before the event-loop server)
  --out DIR   where the tables, JSON files and publisher logs go (default /tmp/security-figures)
  --help      this text
Everything after -- goes to weightsync-crowd-bench (see its --help), e.g.
  scripts/security-figures.sh -- --scenario flood --tries 10
EOF
}

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"
old_src="${OLD_SRC:-/tmp/old-src}"
old_build="${OLD_BUILD:-/tmp/old-build}"
out="/tmp/security-figures"
old_too=0
old_ref=HEAD
while [ $# -gt 0 ]; do
  case "$1" in
    --old-too) old_too=1; shift ;;
    --old-ref) [ $# -ge 2 ] || { echo "--old-ref needs a commit" >&2; exit 2; }; old_ref="$2"; shift 2 ;;
    --out) [ $# -ge 2 ] || { echo "--out needs a directory" >&2; exit 2; }; out="$2"; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

bin="$build/bench/weightsync-crowd-bench"
if [ ! -x "$bin" ]; then
  echo "no $bin: build it first with" >&2
  echo "  WEIGHTSYNC_BUILD_DIR=$build scripts/build.sh --target weightsync-crowd-bench" >&2
  exit 1
fi
mkdir -p "$out"

build_old() {
  # Re-export only into an empty directory or one this script exported before.
  if [ -e "$old_src" ] && [ -n "$(ls -A "$old_src")" ] && [ ! -f "$old_src/.security-figures-export" ]; then
    echo "$old_src exists and was not made by this script; set OLD_SRC to another directory" >&2
    exit 1
  fi
  rm -rf "$old_src"
  mkdir -p "$old_src"
  git -C "$root" archive "$old_ref" | tar -x -C "$old_src"
  touch "$old_src/.security-figures-export"
  cp "$root"/bench/crowd_*.cc "$root"/bench/crowd_*.h "$old_src/bench/"
  if ! grep -q 'weightsync-crowd-bench' "$old_src/bench/CMakeLists.txt"; then
    # The tool's block of bench/CMakeLists.txt: from its comment to the end of its target_link_libraries.
    awk '/^# weightsync-crowd-bench:/ {on = 1}
         on {print}
         on && /^target_link_libraries\(weightsync-crowd-bench/ {tl = 1}
         on && tl && /\)[[:space:]]*$/ {exit}' "$root/bench/CMakeLists.txt" >"$out/crowd-cmake-block.txt"
    { echo; cat "$out/crowd-cmake-block.txt"; } >>"$old_src/bench/CMakeLists.txt"
  fi
  generator=()
  if [ ! -f "$old_build/CMakeCache.txt" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
  cmake -S "$old_src" -B "$old_build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DWEIGHTSYNC_WITH_TORCH=OFF -DWEIGHTSYNC_WITH_CUDA=OFF >"$out/old-configure.log"
  cmake --build "$old_build" --target weightsync-crowd-bench -j"$(nproc)" >"$out/old-build.log"
}

if [ "$old_too" = 1 ]; then
  git -C "$root" rev-parse --verify --quiet "$old_ref^{commit}" >/dev/null || {
    echo "--old-ref $old_ref is not a commit" >&2
    exit 2
  }
  if git -C "$root" diff --quiet "$old_ref" -- libweightsync; then
    echo "warning: libweightsync at $old_ref is the same as in the work tree: old and new will measure" \
      "the same code (the thread-per-connection server is at 29a1b40: --old-ref 29a1b40)" >&2
  fi
  echo "== building $old_ref ($(git -C "$root" rev-parse --short "$old_ref")) in $old_build" >&2
  build_old
fi

echo "== $(nproc) cores; load: $(uptime)" | tee "$out/machine.txt"
echo "== new code: $bin" >&2
mkdir -p "$out/new-logs"
"$bin" --label "new (work tree at $(git -C "$root" rev-parse --short HEAD))" --json "$out/new.json" --log-dir "$out/new-logs" "$@" 2>"$out/new.stderr" |
  tee "$out/new.txt"
if [ "$old_too" = 1 ]; then
  echo "== load: $(uptime)" | tee -a "$out/machine.txt"
  echo "== old code: $old_build/bench/weightsync-crowd-bench" >&2
  mkdir -p "$out/old-logs"
  "$old_build/bench/weightsync-crowd-bench" --label "old ($(git -C "$root" rev-parse --short "$old_ref"))" --json "$out/old.json" \
    --log-dir "$out/old-logs" "$@" 2>"$out/old.stderr" | tee "$out/old.txt"
fi
echo "== results in $out (tables *.txt, every run *.json, progress *.stderr, publisher logs *-logs/)" >&2
