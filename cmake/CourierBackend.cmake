# courier_add_backend(KIND NAME SOURCES... [LIBS ...])
#
# Builds libcourier-<KIND>-<NAME>.so as a MODULE (a dlopen-only plugin) into
# COURIER_PLUGIN_OUTPUT_DIR and installs it into <libdir>/courier. Plugins
# depend on the ABI headers (Courier::abi) only, never on libcourier.
#
# The same file serves two contexts:
#   - Courier's own tree, where the top-level CMakeLists.txt sets
#     COURIER_PLUGIN_OUTPUT_DIR to build/lib/courier;
#   - a backend built out of tree against an installed Courier
#     (find_package(Courier) includes this file): plugins then go to the
#     project's own <build>/lib/courier, unless it sets
#     COURIER_PLUGIN_OUTPUT_DIR itself. Point COURIER_BACKEND_PATH there.
include_guard(GLOBAL)
include(GNUInstallDirs)

function(courier_add_backend kind name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  if(NOT kind MATCHES "^(nic|gpu)$")
    message(FATAL_ERROR "courier_add_backend(${kind} ${name}): KIND must be nic or gpu")
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "courier_add_backend(${kind} ${name}): no SOURCES given")
  endif()
  set(output_dir "${COURIER_PLUGIN_OUTPUT_DIR}")
  if(NOT output_dir)
    set(output_dir "${CMAKE_BINARY_DIR}/lib/courier")
  endif()
  set(target courier-${kind}-${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME courier-${kind}-${name}
    PREFIX lib
    LIBRARY_OUTPUT_DIRECTORY "${output_dir}"
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_link_libraries(${target} PRIVATE Courier::abi ${ARG_LIBS})
  if(NOT COURIER_SANITIZE)  # sanitizer runtimes resolve only in the executable
    target_link_options(${target} PRIVATE -Wl,--no-undefined)
  endif()
  install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/courier)
endfunction()
