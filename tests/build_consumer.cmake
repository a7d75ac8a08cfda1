# Configures and builds examples/consumer against an installed weightsync, as
# an outside project would: cmake -DSOURCE=... -DBUILD=... -DPREFIX=... -P this
# With -DSANITIZE=list (a sanitizer build of weightsync) the consumer is built
# with the same sanitizers, since their runtime must come first.
file(REMOVE_RECURSE "${BUILD}")
set(extra)
if(SANITIZE)
  list(APPEND extra "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE}" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${BUILD}" "-DCMAKE_PREFIX_PATH=${PREFIX}" ${extra}
                RESULT_VARIABLE configure_rc)
if(NOT configure_rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer against ${PREFIX} failed")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD}" RESULT_VARIABLE build_rc)
if(NOT build_rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed")
endif()
