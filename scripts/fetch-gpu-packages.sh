#!/usr/bin/env bash
# Downloads (apt-get download, no install) every Debian package the GPU
# machine lacks, listed in scripts/gpu-packages.txt, into .gpu-debs/ (git-
# ignored), for scripts/gpu-check.sh to unpack there into a private prefix.
# The GPU machine has no package registry; the device tool carries the folder
# (`carry: [".gpu-debs"]`, docs/gpu.md). Limits: the .debs at most
# GPU_DEBS_MAX_MIB (default 64) MiB, and the folder plus the repository's
# files (what the device tool sends) at most 64 MiB; over either it fails
# and says by how much.
# Idempotent: a package whose .deb is already there is not fetched again;
# .debs of packages no longer listed are removed.
# Usage: scripts/fetch-gpu-packages.sh [--dir DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/.gpu-debs"
case "${1:-}" in
  --dir) dir="$2" ;;
  -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
  "") ;;
  *) echo "fetch-gpu-packages: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac
max_mib="${GPU_DEBS_MAX_MIB:-64}"
tree_max_mib=64
mapfile -t packages < <(sed 's/#.*//' "$root/scripts/gpu-packages.txt" | tr -s ' \t' '\n' | sed '/^$/d')
[ "${#packages[@]}" -gt 0 ] || { echo "fetch-gpu-packages: scripts/gpu-packages.txt lists nothing" >&2; exit 1; }
mkdir -p "$dir"

have() { compgen -G "$dir/${1}_*.deb" >/dev/null; }
missing=()
for p in "${packages[@]}"; do have "$p" || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "fetch-gpu-packages: downloading ${#missing[@]} packages into $dir"
  # apt-get download runs as _apt where it can; a folder it cannot write makes it warn, not fail.
  if ! (cd "$dir" && apt-get download -q "${missing[@]}" 2>"$dir/.apt-errors" >/dev/null); then
    echo "fetch-gpu-packages: apt-get download failed; running apt-get update once and retrying"
    apt-get update -qq
    (cd "$dir" && apt-get download -q "${missing[@]}" >/dev/null) ||
      { echo "fetch-gpu-packages: apt-get download failed for: ${missing[*]}" >&2; exit 1; }
  fi
  rm -f "$dir/.apt-errors"
fi
# Exactly the listed packages, one .deb each.
for f in "$dir"/*.deb; do
  name="$(basename "$f")"; name="${name%%_*}"
  printf '%s\n' "${packages[@]}" | grep -qx "$name" || { echo "fetch-gpu-packages: removing $name (not listed)"; rm -f "$f"; }
done
for p in "${packages[@]}"; do
  n=$(compgen -G "$dir/${p}_*.deb" | wc -l)
  [ "$n" -eq 1 ] || { echo "fetch-gpu-packages: $n .deb files for $p in $dir (want 1)" >&2; exit 1; }
done

debs_bytes=$(du -cb "$dir"/*.deb | tail -1 | cut -f1)
debs_mib=$(( (debs_bytes + 1048575) / 1048576 ))
if [ "$debs_bytes" -gt $((max_mib * 1048576)) ]; then
  echo "fetch-gpu-packages: the packages take $debs_mib MiB, over the limit of $max_mib MiB" >&2
  exit 1
fi
# What the device tool sends: tracked and untracked-not-ignored files, plus this folder.
tree_bytes=0
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  tree_bytes=$(cd "$root" && git ls-files -z --cached --others --exclude-standard |
               xargs -0 -r du -cb 2>/dev/null | awk '$2 == "total" { s += $1 } END { print s + 0 }')
fi
total=$((tree_bytes + debs_bytes))
if [ "$total" -gt $((tree_max_mib * 1048576)) ]; then
  echo "fetch-gpu-packages: the working tree ($((tree_bytes / 1048576)) MiB) and the packages ($debs_mib MiB)" \
       "come to $((total / 1048576)) MiB, over the device tool's $tree_max_mib MiB" >&2
  exit 1
fi
echo "fetch-gpu-packages: ${#packages[@]} packages, $debs_mib MiB in $dir" \
     "(with the working tree: $(( (total + 1048575) / 1048576 )) of $tree_max_mib MiB)"
