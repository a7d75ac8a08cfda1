#!/usr/bin/env bash
# Installs the Debian packages weightsync needs to build, test and run its
# examples. Idempotent: does nothing (not even apt-get update) when they are
# all present. Usage: scripts/install-deps.sh [extra-package ...]
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config   # toolchain
  libfmt-dev                         # log formatting
  libssl-dev openssl                 # HMAC-SHA256, AES-GCM, Ed25519 signatures; the openssl command makes key pairs
  libxxhash-dev                      # end-to-end checksums (xxHash3)
  libzstd-dev                        # delta versions for slow links (zstd)
  catch2                             # the test framework (v2)
  libcli11-dev                       # command-line parsing in examples and tools
  libucx-dev                         # the UCX transport (one-sided ucp_get)
  libibverbs-dev                     # the ibverbs transport (RDMA READ); builds without a device
  prometheus-cpp-dev                 # the optional /metrics endpoint (weightsync/metrics.h): the exposition format
  libmicrohttpd-dev                  # ... and its HTTP server (src/metrics/http_server.h)
  libsystemd-dev                     # weightsync-relay: sd_notify (its /livez and /readyz use libmicrohttpd too)
  prometheus curl                    # its test: a real Prometheus scrapes a publisher and a subscriber
  nlohmann-json3-dev                 # JSON (bench, eval) and MessagePack (the trajectory channel)
  libzmq3-dev cppzmq-dev             # ZeroMQ: the generator -> trainer trajectory channel
  gnuplot-nox                        # weightsync-bench --plot
  ucx-utils iperf3                   # ucx_perftest and iperf3: the bench's same-run baselines
  iproute2                           # ip and tc: the multi-host test bed (scripts/testbed.sh)
  openmpi-bin libopenmpi-dev         # MPI_Bcast: weightsync-bench fanout's baseline (bench/mpi_bcast.c); mpirun launches the RL loop's test
  slurmctld slurmd slurm-client munge  # srun launches the RL loop's test under a real Slurm in the test bed (tests/rl/rl_launch_srun.sh)
  libtorch-dev libopenblas0-pthread  # the RL policy (rl/policy); OpenBLAS, or libtorch is ~30x slower
  pybind11-dev python3-dev           # the Python package (python/): pybind11 bindings
  python3-torch python3-numpy python3-pytest  # its tests (tests/python) and examples (examples/python)
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
