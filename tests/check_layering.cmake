# Dependencies inside libweightsync point one way (issue 14, finding 8; issue
# 31): every folder of libweightsync/src has a place in ONE ordered list of
# layers, and a file may include only headers of its own folder and of the
# layers below it. Run as:
#   cmake -DSRC=<libweightsync/src> -P check_layering.cmake
# Fails, naming every offending file and include, when a folder reaches up or
# sideways, when a folder under src/ (or a source folder beside src/ and
# include/) is not in the list, or when a public header breaks its own rules.
# tests/check_layering_test.cmake plants violations in a copy of the tree and
# checks that this script catches each.
#
# The order, bottom first ("<" separates layers; the folders of one layer,
# "," separated, may not include each other), read off the include graph:
#
#   common                    status, env, logging, checksums, the byte codec,
#                             random ids: used by everything, includes nothing.
#   memory, layout            memory: host buffers, shared regions, SlotMemory.
#                             layout: WeightLayout (encoded with common/'s
#                             byte codec).
#   cuda, ring, net           cuda: the CUDA runtime, device slot memory and the
#                             DeviceBackend (staging engine, async copier);
#                             over memory/. ring: the slot ring (its lease ids
#                             from common/random.h) and read plans (ReadPiece);
#                             over memory/. net: sockets, the record layer,
#                             peer identity. Independent of each other.
#   wire                      frames and control messages, over net/ sockets.
#   auth                      handshakes, integrity, signing, Mac: they speak
#                             wire/ messages over net/.
#   transport, delta          transport: the data channels and servers (its
#                             sub-folders tcp/ shm/ ucx/ verbs/ cuda_ipc/ count
#                             as transport/) and StagingChannel: over auth/
#                             (data connections authenticate), cuda/ (cuda_ipc,
#                             staging engines), ring/ (the slots served, read
#                             plans), wire/ and net/. delta: codec, store and
#                             apply: over ring/ (SlotRing, ReadPiece) and wire/
#                             (kMaxDeltaChainApplied, a protocol bound). Neither
#                             includes the other (delta_apply used to take
#                             transport/'s ReadPiece and wire/'s DeltaMsg).
#   publisher, subscriber     the two ends, composing everything below; they
#                             talk to each other only over the wire.
#   narrow, sharding, relay,  built on the ends: NarrowingPublisher wraps a
#   settings, staged          Publisher (weightsync/narrow.h includes
#                             weightsync/publisher.h); routing plans are made
#                             of subscriber.h's Destinations and TensorSlices
#                             (weightsync/sharding.h includes it); a relay is a
#                             Subscriber feeding a Publisher through its
#                             internals (publisher/publisher_core.h);
#                             describe_settings() reports what the publisher's
#                             and the subscriber's resolution would give
#                             (publisher/publisher_settings.h,
#                             subscriber/subscriber_settings.h); staged
#                             updates are a Subscriber pulling into buffers
#                             it owns (subscriber/destination_plan.h).
#   fp8                       e4m3 blocks in flight: Fp8Publisher is made of
#                             narrow/'s ConvertingPublisher (its staging and
#                             converter thread) and keeps some tensors in
#                             bfloat16 with narrow.h's kernels.
#   metrics                   the /metrics endpoint: reads the stats() of
#                             publishers, subscribers, groups, relays and
#                             staged updates at scrape time, so it sits on
#                             top of all of them (weightsync/metrics.h).
#
# Public headers (libweightsync/include/weightsync/*.h) are vocabulary that any
# folder may include, except those listed in `public_homes`: they belong to the
# layer that implements them and count as that folder's headers (so only it
# and the layers above may include them). weightsync.h, the umbrella, belongs
# to no layer: no library folder includes it. A public header never includes
# src/ internals, and one that includes a listed header must itself be listed,
# at that header's layer or above (so a vocabulary header cannot carry an
# upper layer in with it). weightsync/settings.h stays vocabulary although
# settings/ implements its describe_settings(): common/settings_table.h uses
# its types (no layer below settings/ calls the function).
#
# A new folder under src/ makes this check fail until it is placed in `order`.
# So does a new folder beside src/ and include/ in libweightsync/ (a library
# source folder this script does not yet cover). tools/ at the repository root
# links the installed library only (weightsync::weightsync: no src/ include
# path), so its compile already keeps it to the public headers.
cmake_minimum_required(VERSION 3.24)
if(NOT SRC)
  message(FATAL_ERROR "usage: cmake -DSRC=<libweightsync/src> [-DINCLUDE=<libweightsync/include>] -P check_layering.cmake")
endif()
get_filename_component(SRC "${SRC}" ABSOLUTE)
if(NOT INCLUDE)
  get_filename_component(INCLUDE "${SRC}/../include" ABSOLUTE)
endif()
get_filename_component(LIBROOT "${SRC}/.." ABSOLUTE)

set(order "common < memory, layout < cuda, ring, net < wire < auth < transport, delta < publisher, subscriber < narrow, sharding, relay, settings, staged < fp8, metrics")
# Public headers that belong to an upper layer: header=folder ("-": none).
set(public_homes
  "cuda.h=cuda"
  "transports.h=transport"
  "publisher.h=publisher"
  "adapter_publisher.h=publisher"
  "subscriber.h=subscriber"
  "subscriber_group.h=subscriber"
  "narrow.h=narrow"
  "fp8.h=fp8"
  "sharding.h=sharding"
  "rank_puller.h=sharding"
  "relay.h=relay"
  "staged_updates.h=staged"
  "metrics.h=metrics"
  "weightsync.h=-")
# The folders of libweightsync/ this script covers.
set(covered_roots src include)

set(problems "")

# ---- the order: folder -> layer index ----
string(REPLACE "<" ";" layers "${order}")
set(layer 0)
set(listed "")
foreach(group IN LISTS layers)
  string(STRIP "${group}" group)
  string(REPLACE "," ";" members "${group}")
  foreach(folder IN LISTS members)
    string(STRIP "${folder}" folder)
    if(DEFINED rank_${folder})
      string(APPEND problems "\n  '${folder}' is listed twice in the order")
    endif()
    set(rank_${folder} ${layer})
    set(peers_${layer} "${group}")
    list(APPEND listed "${folder}")
  endforeach()
  math(EXPR layer "${layer} + 1")
endforeach()

# ---- every folder under src/ is listed, and every listed folder exists ----
file(GLOB entries LIST_DIRECTORIES true RELATIVE "${SRC}" "${SRC}/*")
set(folders "")
foreach(entry IN LISTS entries)
  if(IS_DIRECTORY "${SRC}/${entry}")
    list(APPEND folders "${entry}")
    if(NOT DEFINED rank_${entry})
      string(APPEND problems "\n  src/${entry}/ is in no layer: place it in `order` (tests/check_layering.cmake)")
    endif()
  else()
    string(APPEND problems "\n  src/${entry} lies outside every folder: move it into the folder of its layer")
  endif()
endforeach()
foreach(folder IN LISTS listed)
  if(NOT folder IN_LIST folders)
    string(APPEND problems "\n  '${folder}' is in `order` but src/${folder}/ does not exist: remove it")
  endif()
endforeach()
file(GLOB entries LIST_DIRECTORIES true RELATIVE "${LIBROOT}" "${LIBROOT}/*")
foreach(entry IN LISTS entries)
  if(IS_DIRECTORY "${LIBROOT}/${entry}" AND NOT entry IN_LIST covered_roots)
    string(APPEND problems "\n  libweightsync/${entry}/ is a source folder this check does not cover: extend it")
  endif()
endforeach()

# ---- public headers: name -> home folder ----
foreach(entry IN LISTS public_homes)
  string(REPLACE "=" ";" pair "${entry}")
  list(GET pair 0 header)
  list(GET pair 1 home)
  set(home_${header} "${home}")
  if(NOT EXISTS "${INCLUDE}/weightsync/${header}")
    string(APPEND problems "\n  weightsync/${header} is in `public_homes` but does not exist: remove it")
  elseif(NOT home STREQUAL "-" AND NOT DEFINED rank_${home})
    string(APPEND problems "\n  weightsync/${header}'s home '${home}' is in no layer")
  endif()
endforeach()

# may_include(<out> <from folder> <to folder>): to is from, or a lower layer.
function(may_include out from to)
  if(from STREQUAL to)
    set(${out} TRUE PARENT_SCOPE)
  elseif(DEFINED rank_${from} AND DEFINED rank_${to} AND rank_${to} LESS rank_${from})
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# why(<out> <from> <to>): the reason a denied include is denied.
function(why out from to)
  if(DEFINED rank_${to} AND rank_${to} EQUAL rank_${from})
    set(${out} "same layer (${peers_${rank_${from}}}): they do not include each other" PARENT_SCOPE)
  else()
    set(${out} "${to}/ is above ${from}/" PARENT_SCOPE)
  endif()
endfunction()

# classify(<file> <line> <kind var> <target var>): what an include line names.
# kind: internal (target: the src/ folder), public (target: the header's
# name), or none (a system or third-party header). Quoted includes resolve as
# the compiler does: beside the including file first, then from src/.
function(classify file line kind_out target_out)
  set(${kind_out} none PARENT_SCOPE)
  if(NOT line MATCHES "#[ \t]*include[ \t]*([<\"])([^>\"]+)[>\"]")
    return()
  endif()
  set(delim "${CMAKE_MATCH_1}")
  set(path "${CMAKE_MATCH_2}")
  set(resolved "")
  if(delim STREQUAL "\"")
    get_filename_component(dir "${file}" DIRECTORY)
    get_filename_component(beside "${path}" ABSOLUTE BASE_DIR "${dir}")
    if(EXISTS "${beside}" AND NOT IS_DIRECTORY "${beside}")
      set(resolved "${beside}")
    endif()
  endif()
  if(resolved STREQUAL "")
    get_filename_component(from_src "${path}" ABSOLUTE BASE_DIR "${SRC}")
    string(REGEX MATCH "^[^/]+" first "${path}")
    if(first STREQUAL "weightsync")
      get_filename_component(resolved "${path}" ABSOLUTE BASE_DIR "${INCLUDE}")
    elseif(delim STREQUAL "\"" AND IS_DIRECTORY "${SRC}/${first}")
      set(resolved "${from_src}")
    elseif(EXISTS "${from_src}" AND NOT IS_DIRECTORY "${from_src}")
      set(resolved "${from_src}")  # <folder/x.h> that is ours, not <net/if.h>
    endif()
  endif()
  if(resolved STREQUAL "")
    return()
  endif()
  string(FIND "${resolved}" "${SRC}/" at_src)
  string(FIND "${resolved}" "${INCLUDE}/weightsync/" at_include)
  if(at_src EQUAL 0)
    file(RELATIVE_PATH rel "${SRC}" "${resolved}")
    string(REGEX MATCH "^[^/]+" folder "${rel}")
    set(${kind_out} internal PARENT_SCOPE)
    set(${target_out} "${folder}" PARENT_SCOPE)
  elseif(at_include EQUAL 0)
    file(RELATIVE_PATH rel "${INCLUDE}/weightsync" "${resolved}")
    set(${kind_out} public PARENT_SCOPE)
    set(${target_out} "${rel}" PARENT_SCOPE)
  endif()
endfunction()

set(source_globs *.h *.hh *.hpp *.inc *.c *.cc *.cpp *.cu *.cuh *.in)

# ---- src/: every include of every file, by the including file's folder ----
set(checked 0)
foreach(folder IN LISTS folders)
  if(NOT DEFINED rank_${folder})
    continue()
  endif()
  set(globs "")
  foreach(g IN LISTS source_globs)
    list(APPEND globs "${SRC}/${folder}/${g}")
  endforeach()
  file(GLOB_RECURSE files ${globs})
  foreach(f IN LISTS files)
    math(EXPR checked "${checked} + 1")
    file(RELATIVE_PATH rel "${SRC}" "${f}")
    file(STRINGS "${f}" includes REGEX "^[ \t]*#[ \t]*include")
    foreach(line IN LISTS includes)
      classify("${f}" "${line}" kind target)
      string(STRIP "${line}" shown)
      if(kind STREQUAL "internal")
        may_include(ok "${folder}" "${target}")
        if(NOT ok)
          why(reason "${folder}" "${target}")
          string(APPEND problems "\n  ${rel}: ${shown}   (${reason})")
        endif()
      elseif(kind STREQUAL "public" AND DEFINED home_${target})
        if(home_${target} STREQUAL "-")
          string(APPEND problems "\n  ${rel}: ${shown}   (the umbrella header is for users, not for the library)")
        else()
          may_include(ok "${folder}" "${home_${target}}")
          if(NOT ok)
            why(reason "${folder}" "${home_${target}}")
            string(APPEND problems
                   "\n  ${rel}: ${shown}   (weightsync/${target} belongs to ${home_${target}}/; ${reason})")
          endif()
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()

# ---- include/weightsync/: no internals; listed headers carry their layer ----
file(GLOB_RECURSE public_files "${INCLUDE}/*")
foreach(f IN LISTS public_files)
  math(EXPR checked "${checked} + 1")
  file(RELATIVE_PATH rel "${INCLUDE}" "${f}")
  get_filename_component(name "${f}" NAME)
  string(REGEX REPLACE "\\.in$" "" name "${name}")
  file(STRINGS "${f}" includes REGEX "^[ \t]*#[ \t]*include")
  foreach(line IN LISTS includes)
    classify("${f}" "${line}" kind target)
    string(STRIP "${line}" shown)
    if(kind STREQUAL "internal")
      string(APPEND problems "\n  include/${rel}: ${shown}   (public headers never include src/)")
    elseif(kind STREQUAL "public" AND DEFINED home_${target} AND NOT home_${name} STREQUAL "-")
      if(NOT DEFINED home_${name})
        string(APPEND problems "\n  include/${rel}: ${shown}   (weightsync/${target} belongs to "
                               "${home_${target}}/: list weightsync/${name} in `public_homes` at that layer or above)")
      else()
        may_include(ok "${home_${name}}" "${home_${target}}")
        if(NOT ok)
          why(reason "${home_${name}}" "${home_${target}}")
          string(APPEND problems "\n  include/${rel}: ${shown}   (weightsync/${name} belongs to ${home_${name}}/, "
                                 "weightsync/${target} to ${home_${target}}/: ${reason})")
        endif()
      endif()
    endif()
  endforeach()
endforeach()

if(problems)
  message(FATAL_ERROR "layering: the order is ${order}; broken by:${problems}")
endif()
message(STATUS "layering ok: ${checked} files; ${order}")
