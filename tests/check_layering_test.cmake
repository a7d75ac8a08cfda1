# Proves that check_layering.cmake catches what it is for: copies
# libweightsync/src and libweightsync/include to a scratch folder, plants one
# violation (CASE), runs the check on the copy, and fails unless the check
# fails naming the planted file (or, for CASE=clean, passes). Run as:
#   cmake -DSRC=<libweightsync/src> -DWORK=<scratch dir> -DCASE=<case> -P check_layering_test.cmake
# Cases:
#   clean           nothing planted: the copy passes (the others fail because
#                   of their plant, not because of the copy)
#   upward          ring/slot_ring.cc includes "publisher/server.h"
#   relative        ring/slot_ring.h includes "../publisher/server.h"
#   sideways        cuda/device_backend.cc includes "ring/slot_ring.h" (same layer)
#   public_upper    transport/registry.cc includes "weightsync/subscriber.h"
#   public_vocab    weightsync/layout.h includes "weightsync/publisher.h"
#   public_internal weightsync/status.h includes "common/env.h"
#   new_folder      a folder src/newarea/ that is in no layer
#   new_root        a source folder libweightsync/tools/ the check does not cover
cmake_minimum_required(VERSION 3.24)
if(NOT SRC OR NOT WORK OR NOT CASE)
  message(FATAL_ERROR "usage: cmake -DSRC=<libweightsync/src> -DWORK=<dir> -DCASE=<case> -P check_layering_test.cmake")
endif()
get_filename_component(SRC "${SRC}" ABSOLUTE)
get_filename_component(here "${CMAKE_CURRENT_LIST_FILE}" DIRECTORY)

set(copy "${WORK}/${CASE}/libweightsync")
file(REMOVE_RECURSE "${WORK}/${CASE}")
file(MAKE_DIRECTORY "${copy}")
file(COPY "${SRC}/" DESTINATION "${copy}/src")
file(COPY "${SRC}/../include/" DESTINATION "${copy}/include")

# plant(<file under the copy> <line>): appends an include line.
function(plant file line)
  if(NOT EXISTS "${copy}/${file}")
    message(FATAL_ERROR "cannot plant into ${file}: no such file in the tree (update this test)")
  endif()
  file(APPEND "${copy}/${file}" "\n${line}\n")
endfunction()

set(expect "")  # regular expression the check's failure must match
if(CASE STREQUAL "clean")
elseif(CASE STREQUAL "upward")
  plant(src/ring/slot_ring.cc "#include \"publisher/server.h\"")
  set(expect "ring/slot_ring.cc: #include \"publisher/server.h\"")
elseif(CASE STREQUAL "relative")
  plant(src/ring/slot_ring.h "#include \"../publisher/server.h\"")
  set(expect "ring/slot_ring.h: #include \"../publisher/server.h\"")
elseif(CASE STREQUAL "sideways")
  plant(src/cuda/device_backend.cc "#include \"ring/slot_ring.h\"")
  set(expect "cuda/device_backend.cc: #include \"ring/slot_ring.h\" .*same layer")
elseif(CASE STREQUAL "public_upper")
  plant(src/transport/registry.cc "#include \"weightsync/subscriber.h\"")
  set(expect "transport/registry.cc: #include \"weightsync/subscriber.h\"")
elseif(CASE STREQUAL "public_vocab")
  plant(include/weightsync/layout.h "#include \"weightsync/publisher.h\"")
  set(expect "include/weightsync/layout.h: #include \"weightsync/publisher.h\"")
elseif(CASE STREQUAL "public_internal")
  plant(include/weightsync/status.h "#include \"common/env.h\"")
  set(expect "include/weightsync/status.h: #include \"common/env.h\"")
elseif(CASE STREQUAL "new_folder")
  file(WRITE "${copy}/src/newarea/thing.h" "#pragma once\n#include \"common/log.h\"\n")
  set(expect "src/newarea/ is in no layer")
elseif(CASE STREQUAL "new_root")
  file(WRITE "${copy}/tools/tool.cc" "#include \"publisher/server.h\"\n")
  set(expect "libweightsync/tools/ is a source folder this check does not cover")
else()
  message(FATAL_ERROR "unknown CASE '${CASE}'")
endif()

execute_process(COMMAND "${CMAKE_COMMAND}" "-DSRC=${copy}/src" -P "${here}/check_layering.cmake"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(said "${out}${err}")
if(CASE STREQUAL "clean")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the check fails on an unchanged copy of the tree:\n${said}")
  endif()
  message(STATUS "layering check: an unchanged copy passes")
  return()
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "the check passed with a planted violation (${CASE}):\n${said}")
endif()
# Joined lines: CMake wraps long messages.
string(REGEX REPLACE "\n[ \t]*" " " flat "${said}")
if(NOT flat MATCHES "${expect}")
  message(FATAL_ERROR "the check failed, but without naming the planted violation (${CASE}: '${expect}'):\n${said}")
endif()
message(STATUS "layering check: caught the planted violation (${CASE}):\n${said}")
