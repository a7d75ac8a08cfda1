# Configures and builds examples/consumer against an installed weightsync, as
# an outside project would: cmake -DSOURCE=... -DBUILD=... -DPREFIX=... -P this
file(REMOVE_RECURSE "${BUILD}")
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${BUILD}" "-DCMAKE_PREFIX_PATH=${PREFIX}"
                RESULT_VARIABLE configure_rc)
if(NOT configure_rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer against ${PREFIX} failed")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD}" RESULT_VARIABLE build_rc)
if(NOT build_rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed")
endif()
