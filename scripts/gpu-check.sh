#!/usr/bin/env bash
# The GPU check in one command, for a bare GPU machine (docs/gpu.md): unpack
# the carried Debian packages (.gpu-debs/, scripts/fetch-gpu-packages.sh)
# into a private prefix; configure for CUDA sm_90 with the PyTorch package's
# libtorch; build only what the check needs; run every [cuda] test, the
# conformance suite's device cases and compute-sanitizer over the device
# tests; measure the four figures against their limits; run a short RL loop
# with --device cuda, sync and async.
#
# Each stage runs under its own `timeout`, capped by what is left of the
# whole run's budget (GPU_CHECK_BUDGET, default 480 s); a failing stage does
# not stop the later ones. Logs, a summary and one JSON (gpu-check.json,
# scripts/gpu_check_report.py) go to $OUT (at most 8 files); the summary is
# printed last. Exit 0 only when every stage passed and every figure is
# within its limit.
#
# --dry-run (no GPU; CI runs it after the plain build): unpacks the packages
# and checks their libraries' needs, configures a build against the prefix
# and /usr/local/cuda and checks every dependency came from the prefix,
# compiles the CUDA objects there, and runs against the plain build
# (WEIGHTSYNC_BUILD_DIR, default build/, which must have CUDA on) what needs
# no GPU: the device tests, which skip visibly; the refusals of
# `--gpu on` and `--device cuda`; the --help of every program the full run
# calls, with the options it passes. Stages are marked "dry-run".
#
# Usage: scripts/gpu-check.sh [--dry-run] [--out DIR] [--jobs N] [--torch-prefix DIR]
#        scripts/gpu-check.sh --list-stages
# Environment: OUT (default out/gpu-check), GPU_CHECK_WORK (scratch, default
# /tmp/ws-gpu-check), GPU_CHECK_BUDGET, WEIGHTSYNC_BUILD_DIR (dry run).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode=full
out="${OUT:-$root/out/gpu-check}"
jobs="$(nproc)"
torch_prefix=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) mode=dry-run; shift ;;
    --out) out="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --torch-prefix) torch_prefix="$2"; shift 2 ;;
    --list-stages) mode=list; shift ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

# Stage: name, bound in seconds (full run), log file. The order is the JSON's
# (scripts/gpu_check_report.py STAGES; tests/gpu/gpu_check_report_test.sh).
stages=(
  "preflight 30 setup.log"
  "unpack 30 setup.log"
  "configure 90 setup.log"
  "build 300 build.log"
  "cuda-tests 60 tests.log"
  "conformance-device 90 tests.log"
  "figures 150 figures.log"
  "rl-loop 150 rl.log"
  "sanitizer 90 sanitizer.log"
)
if [ "$mode" = list ]; then
  for s in "${stages[@]}"; do echo "${s%% *}"; done
  exit 0
fi

work="${GPU_CHECK_WORK:-/tmp/ws-gpu-check}"
budget="${GPU_CHECK_BUDGET:-480}"
debs="$root/.gpu-debs"
prefix="$work/prefix"
python="python3"
[ -x /usr/bin/python3 ] && [ "$mode" = dry-run ] && python=/usr/bin/python3
if [ "$mode" = full ]; then
  build="$root/build-gpu"        # configured against the prefix, built here
  run_build="$build"             # what the tests and figures run
else
  build="$root/build-gpu-dry"    # configured against the prefix; CUDA objects only
  run_build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"
fi
mkdir -p "$out" "$work"
rm -f "$out"/*.log "$out/summary.txt" "$out/gpu-check.json" "$work/stages.tsv" "$work/facts.env"
rm -rf "$work"/bench-*.json "$work"/rl-* "$work"/step-* "$work"/trainer-step  # a rerun must not report the last run's figures
export GPU_CHECK_MODE="$mode" GPU_CHECK_ROOT="$root" GPU_CHECK_WORK="$work" GPU_CHECK_PREFIX="$prefix"
export GPU_CHECK_BUILD="$build" GPU_CHECK_RUN_BUILD="$run_build" GPU_CHECK_JOBS="$jobs" GPU_CHECK_DEBS="$debs"
export GPU_CHECK_TORCH_PREFIX="$torch_prefix" GPU_CHECK_PYTHON="$python"

# What the full run builds, and the tests it selects (ctest -R).
# The libtorch targets first: their precompiled header and trainer_main.cc are
# the build's critical path (docs/gpu.md, "Time budget").
export GPU_CHECK_TARGETS="trainer generator zorplex-sft ws_loop_tests weightsync-info ws_integration_tests \
ws_conformance ws_test_peer ws_test_relay weightsync-bench weightsync-relay"
# Tests at a time in the full run (16 cores; one GPU shared); serial in the dry run.
export GPU_CHECK_CTEST_JOBS=8
[ "$mode" = dry-run ] && GPU_CHECK_CTEST_JOBS=1
export GPU_CHECK_CUDA_TESTS='CUDA|cuda|device publish|on a GPU|--gpu|--device cuda'
export GPU_CHECK_CUDA_TESTS_MIN=16
export GPU_CHECK_CONFORMANCE='^conformance (ucx-[a-z-]+|shm|tcp): pulls into CUDA memory$|^conformance cuda-ipc: '
export GPU_CHECK_CONFORMANCE_COUNT=17
# Skips that are right on a GPU machine too: CUDA slots carry no checksum; the
# start-up refusal tests of --device cuda skip where a GPU is usable.
export GPU_CHECK_ALLOWED_SKIPS='cuda-ipc: checksum mismatch detection|--device cuda without a usable GPU'

# ---- helpers (exported for the stages, which run under `timeout bash -c`) ----
say() { echo "[$(date -u +%H:%M:%S)] $*"; }
fact() { echo "$1=$2" >>"$GPU_CHECK_WORK/facts.env"; }
dry() { [ "$GPU_CHECK_MODE" = dry-run ]; }
# Library paths of the prefix (UCX finds its transport modules through UCX_MODULE_DIR).
use_prefix() {
  local lib="$GPU_CHECK_PREFIX/usr/lib/x86_64-linux-gnu"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export UCX_MODULE_DIR="$lib/ucx" PATH="$GPU_CHECK_PREFIX/usr/bin:$PATH"
}
# ctest_selection LABEL REGEX MIN [EXACT]: runs the tests REGEX selects in the
# run build (skipping conformance when LABEL is cuda-tests); at least MIN (or
# exactly EXACT) must be selected, and on the GPU none may be skipped beyond
# the allowed ones.
ctest_selection() {
  local label="$1" regex="$2" min="$3" exact="${4:-}" listed n log rc skipped bad
  local exclude=(-E '^conformance|via-relay')
  [ "$label" = conformance ] && exclude=(-E 'via-relay|^conformance verbs:')
  listed="$(cd "$GPU_CHECK_RUN_BUILD" && ctest -N -R "$regex" "${exclude[@]}")"
  n="$(echo "$listed" | sed -n 's/^Total Tests: //p')"
  echo "$label: ${n:-0} tests selected"
  if [ -n "$exact" ] && [ "${n:-0}" -ne "$exact" ]; then
    echo "$label: expected exactly $exact tests (the selection is wrong):"; echo "$listed"; return 1
  fi
  [ "${n:-0}" -ge "$min" ] || { echo "$label: expected at least $min tests:"; echo "$listed"; return 1; }
  log="$GPU_CHECK_WORK/ctest-$label.txt"
  (cd "$GPU_CHECK_RUN_BUILD" && ctest -R "$regex" "${exclude[@]}" -j "$GPU_CHECK_CTEST_JOBS" --output-on-failure \
     --timeout 120) | tee "$log"
  rc=${PIPESTATUS[0]}
  skipped="$(grep -E '\*\*\*Skipped|Not Run' "$log" | sed 's/.*Test *#[0-9]*: //')"
  if ! dry; then
    bad="$(echo "$skipped" | sed '/^$/d' | grep -Ev "$GPU_CHECK_ALLOWED_SKIPS" || true)"
    [ -z "$bad" ] || { echo "$label: skipped on the GPU machine (a device case that did not run):"; echo "$bad"; rc=1; }
  else
    echo "$label: skipped here (no GPU): $(echo "$skipped" | sed '/^$/d' | wc -l) of ${n:-0}"
  fi
  return "$rc"
}
# deb_extract DEB DIR: dpkg-deb -x, or its data member through ar and tar where dpkg is missing.
deb_extract() {
  if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$1" "$2"; return; fi
  local member
  member="$(ar t "$1" | grep '^data\.tar')" || return 1
  case "$member" in
    *.xz) ar p "$1" "$member" | tar -xJ -C "$2" ;;
    *.zst) ar p "$1" "$member" | tar --zstd -x -C "$2" ;;
    *.gz) ar p "$1" "$member" | tar -xz -C "$2" ;;
    *) ar p "$1" "$member" | tar -x -C "$2" ;;
  esac
}
export -f say fact dry use_prefix ctest_selection deb_extract

stage_preflight() {
  local missing=()
  say "machine: $(uname -m), $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), $(nproc) cores"
  ldd --version 2>&1 | head -1
  # dpkg-deb, or ar and tar to unpack a .deb without it.
  for tool in c++ cmake ctest ninja nvcc readelf timeout dpkg-deb; do
    if command -v "$tool" >/dev/null || { [ "$tool" = nvcc ] && [ -x /usr/local/cuda/bin/nvcc ]; } ||
       { [ "$tool" = c++ ] && command -v g++ >/dev/null; } ||
       { [ "$tool" = dpkg-deb ] && command -v ar >/dev/null && command -v tar >/dev/null; }; then
      echo "$tool: $(command -v "$tool" || echo "(an alternative)")"
    else
      missing+=("$tool")
    fi
  done
  { c++ --version || g++ --version; } 2>&1 | head -1; cmake --version | head -1
  local nvcc; nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  "$nvcc" --version 2>&1 | tail -2
  fact cuda_toolkit "$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  fact cuda_root "$(dirname "$(dirname "$(readlink -f "$nvcc")")")"
  fact os "$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  fact glibc "$(ldd --version 2>&1 | head -1 | awk '{print $NF}')"
  fact cores "$(nproc)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
    fact device "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
  else
    echo "nvidia-smi: not found"; dry || missing+=(nvidia-smi)
  fi
  if command -v compute-sanitizer >/dev/null; then
    compute-sanitizer --version | tail -1
  else
    echo "compute-sanitizer: not found"; dry || missing+=(compute-sanitizer)
  fi
  local torch
  if torch="$("$GPU_CHECK_PYTHON" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.utils.cmake_prefix_path)' 2>&1)"; then
    echo "python3 torch (version, CUDA, usable, CMake prefix): $torch"
    fact torch "${torch%% *}"
  else
    echo "python3 has no torch: $torch"; dry || missing+=("python3 torch")
  fi
  [ ${#missing[@]} -eq 0 ] || { echo "preflight: missing: ${missing[*]}"; return 1; }
  echo "preflight: ok"
}

stage_unpack() {
  local p n f lib
  rm -rf "$GPU_CHECK_PREFIX" && mkdir -p "$GPU_CHECK_PREFIX"
  mapfile -t packages < <(sed 's/#.*//' "$GPU_CHECK_ROOT/scripts/gpu-packages.txt" | tr -s ' \t' '\n' | sed '/^$/d')
  for p in "${packages[@]}"; do
    n=$(compgen -G "$GPU_CHECK_DEBS/${p}_*.deb" | wc -l)
    [ "$n" -eq 1 ] || { echo "unpack: no .deb for $p in $GPU_CHECK_DEBS (run scripts/fetch-gpu-packages.sh here, and carry .gpu-debs)"; return 1; }
  done
  for f in "$GPU_CHECK_DEBS"/*.deb; do deb_extract "$f" "$GPU_CHECK_PREFIX" || { echo "unpack: $f failed"; return 1; }; done
  echo "unpack: ${#packages[@]} packages into $GPU_CHECK_PREFIX ($(du -sh "$GPU_CHECK_PREFIX" | cut -f1))"
  # Relocate what names /usr: UCX's CMake targets and the pkg-config files.
  lib="$GPU_CHECK_PREFIX/usr/lib/x86_64-linux-gnu"
  sed -i "s|^set(prefix \"/usr\")|set(prefix \"$GPU_CHECK_PREFIX/usr\")|" "$lib/cmake/ucx/ucx-targets.cmake"
  grep -q "$GPU_CHECK_PREFIX" "$lib/cmake/ucx/ucx-targets.cmake" || { echo "unpack: could not relocate UCX's CMake files"; return 1; }
  find "$GPU_CHECK_PREFIX" -name '*.pc' -exec sed -i "s|=/usr|=$GPU_CHECK_PREFIX/usr|" {} +
  # Every library and program unpacked must find what it needs in the prefix
  # or in the base runtime every image with a compiler has.
  local base='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s|libz)\.so'
  local provided needed lacking=""
  provided="$(find "$GPU_CHECK_PREFIX" -name 'lib*.so*' -printf '%f\n' | sort -u)"
  while IFS= read -r f; do
    for needed in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      [[ "$needed" =~ $base ]] && continue
      echo "$provided" | grep -qxF "$needed" || lacking+="$needed (needed by ${f#"$GPU_CHECK_PREFIX"/})"$'\n'
    done
  done < <(find "$GPU_CHECK_PREFIX/usr/lib" "$GPU_CHECK_PREFIX/usr/bin" -type f \( -name '*.so*' -o -perm -u+x \) 2>/dev/null)
  if [ -n "$lacking" ]; then
    echo "unpack: libraries the prefix lacks (add their packages to scripts/gpu-packages.txt):"
    echo "$lacking" | sort -u
    return 1
  fi
  echo "unpack: every library's needs are in the prefix or the base runtime"
}

stage_configure() {
  local cuda_root torch_args=() cache dep value bad=0
  cuda_root="$(sed -n 's/^cuda_root=//p' "$GPU_CHECK_WORK/facts.env" | tail -1)"
  [ -n "$cuda_root" ] || cuda_root=/usr/local/cuda
  if dry; then
    :  # Debian's CPU libtorch (libtorch-dev) is found where it is installed
  else
    local tp="$GPU_CHECK_TORCH_PREFIX"
    [ -n "$tp" ] || tp="$("$GPU_CHECK_PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')" || return 1
    torch_args=(-DTorch_DIR="$tp/Torch")
    echo "configure: libtorch from $tp"
  fi
  # The build folder is kept: a rerun on the same (warm) machine rebuilds
  # only what changed (the device tool keeps ignored build outputs).
  # No CUDA sources are compiled; this keeps libtorch's CMake from probing the GPU for them.
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
  cmake -S "$GPU_CHECK_ROOT" -B "$GPU_CHECK_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DCMAKE_PREFIX_PATH="$GPU_CHECK_PREFIX/usr" -DOPENSSL_ROOT_DIR="$GPU_CHECK_PREFIX/usr" \
    -DCUDAToolkit_ROOT="$cuda_root" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_TORCH=ON -DWEIGHTSYNC_WITH_UCX=ON -DWEIGHTSYNC_WITH_VERBS=OFF \
    -DWEIGHTSYNC_WITH_PYTHON=OFF -DWEIGHTSYNC_WITH_METRICS=OFF -DWEIGHTSYNC_BUILD_EXAMPLES=OFF \
    "${torch_args[@]}" ${GPU_CHECK_CMAKE_ARGS:-} || return 1
  # Every dependency must come from the prefix, not from this machine's /usr
  # (the GPU machine has none of them).
  cache="$GPU_CHECK_BUILD/CMakeCache.txt"
  for dep in fmt_DIR ucx_DIR Catch2_DIR nlohmann_json_DIR cppzmq_DIR XXHASH_INCLUDE_DIR XXHASH_LIBRARY \
             ZSTD_INCLUDE_DIR ZSTD_LIBRARY OPENSSL_INCLUDE_DIR OPENSSL_CRYPTO_LIBRARY ZeroMQ_LIBRARY; do
    value="$(sed -n "s/^$dep:[A-Z]*=//p" "$cache")"
    case "$value" in
      "$GPU_CHECK_PREFIX"/*) echo "configure: $dep = $value" ;;
      *) echo "configure: $dep = '$value' is not in the prefix $GPU_CHECK_PREFIX"; bad=1 ;;
    esac
  done
  echo "configure: CUDA from $cuda_root, $(sed -n 's/^Torch_DIR:[A-Z]*=//p' "$cache" | head -1) for libtorch"
  return $bad
}

stage_build() {
  use_prefix  # the linker resolves the carried libraries' own needs through it
  if dry; then
    # The CUDA objects, compiled against the prefix's headers and the toolkit.
    local objects
    objects="$(ninja -C "$GPU_CHECK_BUILD" -t targets all | sed -n 's/^\([^:]*\(src\/cuda\/\|cuda_ipc\/\|cuda_limits\|device_publish\|device_backend\)[^:]*\.o\): .*/\1/p' | sort -u)"
    [ "$(echo "$objects" | sed '/^$/d' | wc -l)" -ge 5 ] || { echo "build: found too few CUDA objects: $objects"; return 1; }
    echo "build: $(echo "$objects" | wc -l) CUDA objects:"; echo "$objects"
    # Each object's own compile command only (ninja would first build every
    # library the test and bench objects' targets link, in order).
    local o
    for o in $objects; do mkdir -p "$GPU_CHECK_BUILD/$(dirname "$o")"; done
    for o in $objects; do ninja -C "$GPU_CHECK_BUILD" -t commands "$o" | tail -1; done >"$GPU_CHECK_WORK/cuda-objects.sh"
    (cd "$GPU_CHECK_BUILD" && tr '\n' '\0' <"$GPU_CHECK_WORK/cuda-objects.sh" |
       xargs -0 -P "$GPU_CHECK_JOBS" -I{} bash -c '{}') || { echo "build: a CUDA object failed to compile"; return 1; }
    for o in $objects; do [ -s "$GPU_CHECK_BUILD/$o" ] || { echo "build: $o was not written"; return 1; }; done
    echo "build: compiled $(echo "$objects" | wc -l) CUDA objects"
    # The full run's targets must exist in this configuration.
    local t
    for t in $GPU_CHECK_TARGETS; do
      ninja -C "$GPU_CHECK_BUILD" -t query "$t" >/dev/null 2>&1 || { echo "build: no target $t"; return 1; }
    done
    echo "build: the full run's targets exist: $GPU_CHECK_TARGETS"
  else
    # shellcheck disable=SC2086
    ninja -C "$GPU_CHECK_BUILD" -j "$GPU_CHECK_JOBS" $GPU_CHECK_TARGETS
  fi
}

stage_cuda_tests() {
  local rc=0 b="$GPU_CHECK_RUN_BUILD" out
  use_prefix
  if dry; then
    "$b/tools/weightsync-info" --json >"$GPU_CHECK_WORK/info.json" || return 1
    grep -q '"cuda"' "$GPU_CHECK_WORK/info.json" || { echo "weightsync-info --json has no cuda"; return 1; }
    grep -q 'WEIGHTSYNC_WITH_CUDA:STRING=\(AUTO\|ON\)' "$b/CMakeCache.txt" &&
      grep -q '^CUDA_CUDART:FILEPATH=/' "$b/CMakeCache.txt" || { echo "the build in $b has no CUDA"; return 1; }
  fi
  ctest_selection cuda-tests "$GPU_CHECK_CUDA_TESTS" "$GPU_CHECK_CUDA_TESTS_MIN" || rc=1
  # The [cuda] Catch2 cases that return early without a device say "not run":
  # on the GPU none may; here every one must (a visible skip, not a silent pass).
  for t in "$b/tests/ws_integration_tests" "$b/tests/rl/ws_loop_tests"; do
    out="$("$t" "[cuda]" --warn NoTests 2>&1)" || { echo "$out"; rc=1; }
    n="$(echo "$out" | grep -c 'not run\|no usable\|cannot be used\|no CUDA' || true)"
    if dry; then
      [ "$n" -gt 0 ] || { echo "$t [cuda]: passed without a GPU and said nothing about it"; rc=1; }
      echo "$t [cuda]: skips visibly here ($n messages)"
    else
      echo "$out" | tail -3
      echo "$out" | grep -q 'not run\|no CUDA here' && { echo "$t [cuda]: a case did not run on the GPU"; rc=1; }
    fi
  done
  return $rc
}

stage_conformance() {
  use_prefix
  ctest_selection conformance "$GPU_CHECK_CONFORMANCE" 1 "$GPU_CHECK_CONFORMANCE_COUNT"
}

stage_sanitizer() {
  local b="$GPU_CHECK_RUN_BUILD" rc=0 cs=(compute-sanitizer --tool memcheck --target-processes all --error-exitcode 99)
  use_prefix
  if dry; then cs=(); echo "sanitizer: no compute-sanitizer here; the same commands without it"; fi
  # The device cases of the integration tests, a cuda_ipc pull (device slots,
  # device-to-device) and a staged pull into CUDA memory over shm.
  local cmds=("$b/tests/ws_integration_tests [cuda]"
              "$b/tests/ws_conformance --transport cuda_ipc --require-cuda [bitexact]"
              "$b/tests/ws_conformance --transport shm --require-cuda [cuda]")
  for c in "${cmds[@]}"; do
    # shellcheck disable=SC2086
    set -- $c
    echo "sanitizer: ${cs[*]} $*"
    "${cs[@]}" "$@" --warn NoTests; r=$?
    if dry && [ "$r" -eq 77 ]; then echo "sanitizer: skipped (77) without a device, as expected"; continue; fi
    [ "$r" -eq 0 ] || { echo "sanitizer: exit $r"; rc=1; }
  done
  return $rc
}

stage_figures() {
  local b="$GPU_CHECK_RUN_BUILD" bench="$GPU_CHECK_RUN_BUILD/bench/weightsync-bench" rc=0 help opt
  use_prefix
  help="$("$bench" --help)" || return 1
  for opt in --quick --gpu --transports --sizes --readers --compute-rounds --json --iperf3-seconds; do
    echo "$help" | grep -q -- "$opt" || { echo "figures: weightsync-bench has no $opt"; rc=1; }
  done
  if dry; then
    local msg
    msg="$("$bench" --quick --gpu on --transports shm --json "$GPU_CHECK_WORK/bench-gpu.json" 2>&1)"; r=$?
    echo "$msg"
    [ "$r" -eq 2 ] && echo "$msg" | grep -q -- "--gpu on, but" ||
      { echo "figures: --gpu on without a GPU: exit $r, expected 2 with the reason"; rc=1; }
    # The report reads a real bench JSON: the one the cuda-tests stage's
    # "--gpu auto" test wrote gives three figures not measured, with its reason.
    local auto="$b/tests/bench-work/gpu-auto.json"
    if [ -f "$auto" ]; then
      printf 'figures\tpass\t1\t1\tfigures.log\t\n' >"$GPU_CHECK_WORK/figures-probe.tsv"
      "$GPU_CHECK_PYTHON" "$GPU_CHECK_ROOT/scripts/gpu_check_report.py" compose --mode full \
        --stages "$GPU_CHECK_WORK/figures-probe.tsv" --facts /dev/null --bench-gpu "$auto" \
        --out "$GPU_CHECK_WORK/figures-probe.json" &&
      "$GPU_CHECK_PYTHON" -c 'import json, sys
f = json.load(open(sys.argv[1]))["figures"]
gpu = [f[n] for n in ("publish_from_device", "staged_pull", "cuda_ipc")]
assert all(x["status"] == "not-measured" and "CUDA" in x.get("why", "") for x in gpu), gpu
print("figures: the bench JSON of --gpu auto reads as not measured:", gpu[0]["why"])' "$GPU_CHECK_WORK/figures-probe.json" ||
        { echo "figures: the report could not read $auto"; rc=1; }
    else
      echo "figures: no $auto (the cuda-tests stage writes it)"; rc=1
    fi
    return $rc
  fi
  # One run: the GPU rows at 64 MiB beside their cudaMemcpy limits (three
  # figures), and the host rows with 1 and 2 readers, each with the
  # publisher's compute loop running against it alone (the fourth: 2 readers
  # pulling every version). Not --quick: its 1 GiB checkpoint baseline costs
  # time the budget does not have.
  "$bench" --gpu on --transports shm,tcp --sizes 64MiB --readers 1,2 --compute-rounds 5 --iperf3-seconds 1 \
    --checkpoint-dir "$GPU_CHECK_WORK" --json "$GPU_CHECK_WORK/bench-gpu.json" || rc=1
  return $rc
}

stage_rl_loop() {
  local b="$GPU_CHECK_RUN_BUILD" rc=0 run
  use_prefix
  export WEIGHTSYNC_BUILD_DIR="$b" OPENBLAS_NUM_THREADS=1
  for t in "$b/bin/trainer" "$b/bin/generator"; do
    "$t" --help | grep -q -- "--device" || { echo "rl-loop: $t has no --device"; rc=1; }
  done
  "$GPU_CHECK_ROOT/scripts/rl-run.sh" --help | grep -q -- "--device" || { echo "rl-loop: rl-run.sh has no --device"; rc=1; }
  "$GPU_CHECK_PYTHON" "$GPU_CHECK_ROOT/scripts/trainer_step_figure.py" --help | grep -q -- "--device" ||
    { echo "rl-loop: trainer_step_figure.py has no --device"; rc=1; }
  if dry; then
    (cd "$b" && ctest -R 'device cuda without a usable GPU' --output-on-failure) || rc=1
    # The fourth figure's run, on the CPU with a tiny policy: the script, the
    # trainer's --synthetic-groups and the relays work together, and the
    # report reads their JSON as a measured figure.
    "$b/rl/zorplex-sft" --out "$GPU_CHECK_WORK/rl-start" --d-model 32 --layers 1 --heads 2 --d-ff 64 \
      --max-seq-len 384 --batch 4 --steps 2 >/dev/null || return 1
    "$GPU_CHECK_PYTHON" "$GPU_CHECK_ROOT/scripts/trainer_step_figure.py" --build "$b" \
      --start "$GPU_CHECK_WORK/rl-start" --out "$GPU_CHECK_WORK/trainer-step" --steps 4 --groups 2 \
      --group-size 4 --pairs 1 --threads 1 --run-timeout 60 || rc=1
    printf 'rl-loop\tpass\t1\t1\trl.log\t\n' >"$GPU_CHECK_WORK/step-probe.tsv"
    "$GPU_CHECK_PYTHON" "$GPU_CHECK_ROOT/scripts/gpu_check_report.py" compose --mode full \
      --stages "$GPU_CHECK_WORK/step-probe.tsv" --facts /dev/null \
      --trainer-step "$GPU_CHECK_WORK/trainer-step/trainer-step.json" --out "$GPU_CHECK_WORK/step-probe.json" &&
    "$GPU_CHECK_PYTHON" -c 'import json, sys
f = json.load(open(sys.argv[1]))["figures"]["trainer_step"]
assert f["status"] in ("pass", "fail") and f["value"] > 0, f
print("rl-loop: the trainer-step JSON reads as measured: %.3f (on this CPU; judged on the GPU only)" % f["value"])' \
      "$GPU_CHECK_WORK/step-probe.json" || { echo "rl-loop: the report could not read the trainer-step JSON"; rc=1; }
    return $rc
  fi
  # The fourth figure first (a stage cut short loses the RL loops, not it):
  # the trainer's step (synthetic groups, the default policy size) with 2
  # relays pulling every version over tcp, against none.
  "$b/rl/zorplex-sft" --out "$GPU_CHECK_WORK/step-start" --batch 4 --steps 2 >/dev/null || return 1
  "$GPU_CHECK_PYTHON" "$GPU_CHECK_ROOT/scripts/trainer_step_figure.py" --build "$b" --device cuda \
    --start "$GPU_CHECK_WORK/step-start" --out "$GPU_CHECK_WORK/trainer-step" --steps 16 --groups 8 \
    --group-size 8 --pairs 2 --readers 2 --transport tcp --run-timeout 60 || rc=1
  "$b/rl/zorplex-sft" --out "$GPU_CHECK_WORK/rl-start" --d-model 32 --layers 1 --heads 2 --d-ff 64 \
    --max-seq-len 384 --batch 4 --steps 2 --log-every 1 || return 1
  for m in sync async; do
    run="$GPU_CHECK_WORK/rl-$m"
    rm -rf "$run"
    echo "rl-loop: $m, --device cuda"
    "$GPU_CHECK_ROOT/scripts/rl-run.sh" --start "$GPU_CHECK_WORK/rl-start" --out "$run" --mode "$m" --steps 3 \
      --prompts 2 --group-size 3 --batch-groups 4 --device cuda -- --idle-timeout 60 --round-timeout 30 || rc=1
    steps=$(grep -c '"event":"step"' "$run/trainer.jsonl" 2>/dev/null || echo 0)
    dev=$(grep -c '"device":"cuda"' "$run/trainer.jsonl" 2>/dev/null || echo 0)
    echo "rl-loop: $m: $steps steps, $dev publishes from the device"
    [ "$steps" -ge 3 ] && [ "$dev" -ge 3 ] || { echo "rl-loop: $m: expected 3 steps published from cuda"; rc=1; }
  done
  return $rc
}
export -f stage_preflight stage_unpack stage_configure stage_build stage_cuda_tests stage_conformance \
  stage_sanitizer stage_figures stage_rl_loop

# ---- run the stages ----
started=$SECONDS
say "gpu-check ($mode): $root -> $out; budget ${budget} s"
for s in "${stages[@]}"; do
  read -r name bound log <<<"$s"
  left=$((budget - (SECONDS - started)))
  fn="stage_${name//-/_}"
  [ "$name" = conformance-device ] && fn=stage_conformance
  if [ "$left" -lt 5 ]; then
    status=not-run secs=0 note="the run's budget of $budget s was spent"
    [ "$bound" -gt 0 ] || bound=1
  else
    [ "$bound" -le "$left" ] || bound=$left
    say "== $name (bound ${bound} s)" | tee -a "$out/$log"
    t0=$SECONDS
    timeout -k 10 "$bound" bash -c "$fn" >>"$out/$log" 2>&1
    rc=$?
    secs=$((SECONDS - t0))
    case "$rc" in
      0) status=pass; [ "$mode" = dry-run ] && status=dry-run; note="" ;;
      124|137) status=timeout; note="stopped at its bound of $bound s" ;;
      *) status=fail; note="exit $rc; see $log" ;;
    esac
    say "== $name: $status in ${secs} s ${note:+($note)}" | tee -a "$out/$log"
    [ "$status" = fail ] || [ "$status" = timeout ] && tail -n 15 "$out/$log" | sed 's/^/    /'
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$secs" "$bound" "$log" "$note" >>"$work/stages.tsv"
done

compose=("$python" "$root/scripts/gpu_check_report.py" compose --mode "$mode" --stages "$work/stages.tsv"
         --facts "$work/facts.env" --out "$out/gpu-check.json")
[ -f "$work/bench-gpu.json" ] && [ "$mode" = full ] && compose+=(--bench-gpu "$work/bench-gpu.json")
[ -f "$work/bench-gpu.json" ] && [ "$mode" = full ] && compose+=(--bench-compute "$work/bench-gpu.json")
for m in sync async; do [ -d "$work/rl-$m" ] && [ "$mode" = full ] && compose+=(--rl-dir "$work/rl-$m"); done
[ -f "$work/trainer-step/trainer-step.json" ] && [ "$mode" = full ] &&
  compose+=(--trainer-step "$work/trainer-step/trainer-step.json")
touch "$work/facts.env"
"${compose[@]}" || echo "gpu-check: composing the JSON failed"

{
  echo "gpu-check ($mode) on $(hostname), $(date -u +%FT%TZ), $((SECONDS - started)) s in all (budget $budget s)"
  printf '%-20s %-8s %6s %6s  %s\n' stage status secs bound note
  while IFS=$'\t' read -r n st se bo _ no; do printf '%-20s %-8s %6s %6s  %s\n' "$n" "$st" "$se" "$bo" "$no"; done <"$work/stages.tsv"
  "$python" - "$out/gpu-check.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("figures: no JSON (%s)" % e); sys.exit(0)
for n, f in sorted(r.get("figures", {}).items()):
    v = f.get("value")
    print("%-20s %-12s %s %s %s  %s" % (n, f.get("status"), "-" if v is None else "%.3f" % v, f.get("compare"),
                                        f.get("limit"), f.get("why", "")))
for n, run in sorted(r.get("rl_runs", {}).items()):
    print("rl %-17s %s" % (n, json.dumps(run, sort_keys=True)))
EOF
} >"$out/summary.txt"
"$python" "$root/scripts/gpu_check_report.py" validate "$out/gpu-check.json" --out-dir "$out" >>"$out/summary.txt" 2>&1
valid=$?
cat "$out/summary.txt"

[ "$valid" -eq 0 ] || exit 1
grep -qP '\t(fail|timeout|not-run)\t' "$work/stages.tsv" && exit 1
[ "$mode" = full ] && ! "$python" -c 'import json,sys; f=json.load(open(sys.argv[1]))["figures"]; sys.exit(0 if all(x["status"]=="pass" for x in f.values()) else 1)' "$out/gpu-check.json" && exit 1
exit 0
