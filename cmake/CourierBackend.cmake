# courier_add_backend(KIND NAME SOURCES... [LIBS ...])
#
# Builds libcourier-<KIND>-<NAME>.so as a MODULE (a dlopen-only plugin) into
# build/lib/courier and installs it into <libdir>/courier. Plugins depend on
# the ABI headers only, never on libcourier.
function(courier_add_backend kind name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  set(target courier-${kind}-${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME courier-${kind}-${name}
    PREFIX lib
    LIBRARY_OUTPUT_DIRECTORY ${COURIER_PLUGIN_OUTPUT_DIR}
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_link_libraries(${target} PRIVATE courier_abi ${ARG_LIBS})
  if(NOT COURIER_SANITIZE)  # sanitizer runtimes resolve only in the executable
    target_link_options(${target} PRIVATE -Wl,--no-undefined)
  endif()
  install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/courier)
endfunction()
