#!/usr/bin/env bash
# The Python package after `cmake --install --prefix P`, used as an outside
# user would: from a directory outside the source and build trees, with only
# PYTHONPATH pointing into P, `import weightsync` must load the extension and
# find libweightsync.so in P (relative RPATH), and do a real publish and pull;
# the vllm.general_plugins entry point must be found in P.
# Then the same from a copy of P elsewhere (the prefix is relocatable).
# Usage: python_import.sh PYTHON PREFIX SITE_DIR   (SITE_DIR relative to PREFIX)
set -euo pipefail
python="$1" prefix="$2" site="$3"
fail() { echo "python import: FAILED: $*" >&2; exit 1; }
[ -f "$prefix/$site/weightsync/__init__.py" ] || fail "no $prefix/$site/weightsync/__init__.py: was it installed?"
ls "$prefix/$site/weightsync/"_weightsync*.so >/dev/null 2>&1 || fail "no extension module in $prefix/$site/weightsync"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
check() {  # check PREFIX: import from it, publish and pull, report where things came from
  local p="$1"
  (cd "$work" && env -u LD_LIBRARY_PATH PYTHONPATH="$p/$site" timeout 60 "$python" - "$p" <<'PY'
import os, sys
import weightsync
prefix = os.path.realpath(sys.argv[1])
where = os.path.realpath(weightsync.__file__)
assert where.startswith(prefix + os.sep), f"imported {where}, not from {prefix}"
libs = [l.split()[-1] for l in open("/proc/self/maps") if "libweightsync.so" in l]
assert libs and all(os.path.realpath(l).startswith(prefix + os.sep) for l in libs), f"libweightsync from {set(libs)}"
layout = weightsync.Layout([("w", "float32", [1024]), ("b", "int64", [3])])
with weightsync.Publisher(layout) as pub, weightsync.Subscriber(pub.address) as sub:
    image = bytearray(os.urandom(layout.total_bytes))
    pub.publish_bytes(image, 1)
    out = bytearray(layout.total_bytes)
    got = sub.pull(out)
    assert got.version == 1
    for t in layout:
        assert out[t.offset:t.offset + t.nbytes] == image[t.offset:t.offset + t.nbytes]
# vLLM finds the backend through the installed entry point (weightsync-<version>.dist-info).
from importlib.metadata import entry_points
eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "weightsync"]
assert [e.value for e in eps] == ["weightsync.vllm_plugin:register"], f"vllm.general_plugins: {eps}"
declared_in = os.path.realpath(str(eps[0].dist.locate_file("weightsync")))
assert declared_in.startswith(prefix + os.sep), f"entry point declared in {declared_in}, not in {prefix}"
assert eps[0].load()() is False  # register(): no vLLM here, nothing registered, no error
print("imported weightsync", weightsync.__version__, "from", os.path.dirname(where), "with", sorted(set(libs))[0])
PY
  ) || fail "import from $p"
}
check "$prefix"
cp -a "$prefix" "$work/moved"
check "$work/moved"
echo "python import: ok"
