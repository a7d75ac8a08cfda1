# weightsync_tristate(NAME DOC): a cache option taking AUTO, ON or OFF.
function(weightsync_tristate name doc)
  set(${name} AUTO CACHE STRING "${doc}: AUTO, ON or OFF")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${name}}" value)
  if(NOT value MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${name}=${${name}}: use AUTO, ON or OFF")
  endif()
endfunction()

# weightsync_resolve(NAME FOUND PACKAGE WHAT): sets WEIGHTSYNC_HAVE_<suffix>
# from an AUTO/ON/OFF option and whether its dependency was found. ON with the
# dependency missing stops the configure and names the Debian package.
function(weightsync_resolve name found package what)
  string(REPLACE "WEIGHTSYNC_WITH_" "" suffix "${name}")
  string(TOUPPER "${${name}}" value)
  set(have OFF)
  if(value STREQUAL "ON" AND NOT found)
    message(FATAL_ERROR "${name}=ON but ${what} was not found. Install it: "
                        "apt-get install --no-install-recommends ${package} (or configure with ${name}=OFF)")
  elseif(NOT value STREQUAL "OFF" AND found)
    set(have ON)
  endif()
  set(WEIGHTSYNC_HAVE_${suffix} ${have} PARENT_SCOPE)
  set_property(GLOBAL APPEND PROPERTY WEIGHTSYNC_SUMMARY "${name}=${${name}} -> ${have}")
endfunction()

function(weightsync_print_summary)
  get_property(lines GLOBAL PROPERTY WEIGHTSYNC_SUMMARY)
  message(STATUS "weightsync ${PROJECT_VERSION} configuration:")
  foreach(line IN LISTS lines)
    message(STATUS "  ${line}")
  endforeach()
  message(STATUS "  tests=${WEIGHTSYNC_BUILD_TESTS} examples=${WEIGHTSYNC_BUILD_EXAMPLES} bench=${WEIGHTSYNC_BUILD_BENCH}")
endfunction()

# weightsync_use_torch_pch(TARGET): TARGET compiles with the precompiled
# <torch/torch.h> that ws_policy makes (rl/policy/CMakeLists.txt). libtorch's
# headers were about half the compile time of every file that includes them
# (docs/build.md); one precompiled header shared by every torch target saves
# that without a header compiled per target. The flags that matter to GCC's
# precompiled headers (-std, -O, -g, -fPIC) are the same for all these targets;
# where one differed GCC would fall back to the plain header, and -Winvalid-pch
# says so in the build log. WEIGHTSYNC_TORCH_PCH=OFF turns it off.
function(weightsync_use_torch_pch target)
  if(WEIGHTSYNC_TORCH_PCH AND TARGET ws_policy AND NOT target STREQUAL "ws_policy")
    target_precompile_headers(${target} REUSE_FROM ws_policy)
    target_compile_options(${target} PRIVATE -Winvalid-pch)
  endif()
endfunction()
