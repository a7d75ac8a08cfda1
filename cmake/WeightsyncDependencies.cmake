# Finds the library's required dependencies and the optional ones named by
# the WEIGHTSYNC_WITH_* options. Each missing required package stops the
# configure with the Debian package to install.
find_package(Threads REQUIRED)

find_package(fmt CONFIG QUIET)
if(NOT fmt_FOUND)
  message(FATAL_ERROR "fmt not found: apt-get install --no-install-recommends libfmt-dev")
endif()

find_package(OpenSSL QUIET COMPONENTS Crypto)
if(NOT OpenSSL_FOUND)
  message(FATAL_ERROR "OpenSSL not found: apt-get install --no-install-recommends libssl-dev")
endif()

find_path(XXHASH_INCLUDE_DIR xxhash.h)
find_library(XXHASH_LIBRARY xxhash)
if(NOT XXHASH_INCLUDE_DIR OR NOT XXHASH_LIBRARY)
  message(FATAL_ERROR "xxHash not found: apt-get install --no-install-recommends libxxhash-dev")
endif()
add_library(weightsync_xxhash INTERFACE IMPORTED)
target_include_directories(weightsync_xxhash INTERFACE "${XXHASH_INCLUDE_DIR}")
target_link_libraries(weightsync_xxhash INTERFACE "${XXHASH_LIBRARY}")

find_path(ZSTD_INCLUDE_DIR zstd.h)
find_library(ZSTD_LIBRARY zstd)
if(NOT ZSTD_INCLUDE_DIR OR NOT ZSTD_LIBRARY)
  message(FATAL_ERROR "zstd not found: apt-get install --no-install-recommends libzstd-dev")
endif()
add_library(weightsync_zstd INTERFACE IMPORTED)
target_include_directories(weightsync_zstd INTERFACE "${ZSTD_INCLUDE_DIR}")
target_link_libraries(weightsync_zstd INTERFACE "${ZSTD_LIBRARY}")

# Optional parts. Their code arrives with later issues; the options and the
# dependency checks are in place so that turning one ON fails loudly today.
set(_found OFF)
if(NOT WEIGHTSYNC_WITH_UCX STREQUAL "OFF")
  find_package(ucx CONFIG QUIET)
  set(_found ${ucx_FOUND})
endif()
weightsync_resolve(WEIGHTSYNC_WITH_UCX "${_found}" "libucx-dev" "UCX")

set(_found OFF)
if(NOT WEIGHTSYNC_WITH_VERBS STREQUAL "OFF")
  find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
  find_library(IBVERBS_LIBRARY ibverbs)
  if(IBVERBS_INCLUDE_DIR AND IBVERBS_LIBRARY)
    set(_found ON)
  endif()
endif()
weightsync_resolve(WEIGHTSYNC_WITH_VERBS "${_found}" "libibverbs-dev" "libibverbs")

set(_found OFF)
if(NOT WEIGHTSYNC_WITH_CUDA STREQUAL "OFF")
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  set(_found ${CUDAToolkit_FOUND})
endif()
weightsync_resolve(WEIGHTSYNC_WITH_CUDA "${_found}" "nvidia-cuda-toolkit (or the CUDA Toolkit in /usr/local/cuda)" "the CUDA Toolkit")

set(_found OFF)
if(NOT WEIGHTSYNC_WITH_TORCH STREQUAL "OFF")
  find_package(Torch QUIET)
  set(_found ${Torch_FOUND})
endif()
weightsync_resolve(WEIGHTSYNC_WITH_TORCH "${_found}" "libtorch-dev libopenblas0-pthread" "libtorch")

# The Python package (python/): pybind11 against one interpreter. Debian's
# /usr/bin/python3 by default, since that is where python3-torch installs
# (a pyenv or venv python3 earlier on PATH would not see it); set
# Python3_EXECUTABLE to build for another.
set(_found OFF)
if(NOT WEIGHTSYNC_WITH_PYTHON STREQUAL "OFF")
  if(NOT Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "The Python the weightsync package is built for")
  endif()
  find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
  if(Python3_FOUND)
    set(PYBIND11_FINDPYTHON ON)
    find_package(pybind11 CONFIG QUIET)
    set(_found ${pybind11_FOUND})
  endif()
endif()
weightsync_resolve(WEIGHTSYNC_WITH_PYTHON "${_found}" "pybind11-dev python3-dev" "pybind11 and the Python 3 headers")
# The Prometheus /metrics endpoint (weightsync/metrics.h): prometheus-cpp's
# exposition (core) served by libmicrohttpd (src/metrics/http_server.h says
# why not prometheus-cpp's civetweb server).
set(_found OFF)
if(NOT WEIGHTSYNC_WITH_METRICS STREQUAL "OFF")
  find_package(prometheus-cpp CONFIG QUIET)
  find_path(MICROHTTPD_INCLUDE_DIR microhttpd.h)
  find_library(MICROHTTPD_LIBRARY microhttpd)
  if(prometheus-cpp_FOUND AND TARGET prometheus-cpp::core AND MICROHTTPD_INCLUDE_DIR AND MICROHTTPD_LIBRARY)
    set(_found ON)
  endif()
endif()
weightsync_resolve(WEIGHTSYNC_WITH_METRICS "${_found}" "prometheus-cpp-dev libmicrohttpd-dev"
                   "prometheus-cpp and libmicrohttpd")
unset(_found)
