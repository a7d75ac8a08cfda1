# Dependencies inside libweightsync point one way (issue 14, finding 8):
# publisher/ and subscriber/ over transport/, over ring/ and memory/, over
# common/. Run as: cmake -DSRC=<libweightsync/src> -P check_layering.cmake
# Fails, naming every offending include, when a lower layer reaches up.
if(NOT SRC)
  message(FATAL_ERROR "usage: cmake -DSRC=<libweightsync/src> -P check_layering.cmake")
endif()

# layer directory -> include patterns it must not use
set(rules
  "transport|\"publisher/|\"subscriber/|weightsync/publisher\\.h|weightsync/subscriber\\.h"
  "ring|\"publisher/|\"subscriber/|\"transport/|weightsync/publisher\\.h|weightsync/subscriber\\.h"
  "memory|\"publisher/|\"subscriber/|\"transport/|\"ring/|\"cuda/|<cuda|weightsync/publisher\\.h"
  "common|\"publisher/|\"subscriber/|\"transport/|\"ring/|\"memory/|\"cuda/|<cuda")

set(violations "")
set(checked 0)
foreach(rule IN LISTS rules)
  string(REPLACE "|" ";" parts "${rule}")
  list(POP_FRONT parts layer)
  file(GLOB_RECURSE files "${SRC}/${layer}/*.h" "${SRC}/${layer}/*.cc")
  foreach(f IN LISTS files)
    math(EXPR checked "${checked} + 1")
    file(STRINGS "${f}" includes REGEX "^[ \t]*#[ \t]*include")
    foreach(line IN LISTS includes)
      foreach(pattern IN LISTS parts)
        if(line MATCHES "${pattern}")
          file(RELATIVE_PATH rel "${SRC}" "${f}")
          string(APPEND violations "\n  ${rel}: ${line}   (${layer}/ must not depend on this)")
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "layering: lower layers reach up:${violations}")
endif()
message(STATUS "layering ok: ${checked} files in transport/, ring/, memory/, common/ depend only downwards")
