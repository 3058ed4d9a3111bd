# courier_feature(NAME PACKAGE DEBIAN_PACKAGE)
#
# Declares COURIER_WITH_<NAME> = AUTO | ON | OFF and resolves it into
# COURIER_HAVE_<NAME> (TRUE/FALSE):
#   AUTO  on when find_package(<PACKAGE>) succeeds, silently off otherwise;
#   ON    required: a missing package is a configure error naming the Debian package;
#   OFF   not built.
set(COURIER_FEATURE_SUMMARY "")

function(courier_feature name package debian_package)
  set(var COURIER_WITH_${name})
  set(${var} AUTO CACHE STRING "Build ${name} support: AUTO, ON or OFF")
  set_property(CACHE ${var} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${var}}" mode)
  if(NOT mode MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${var}='${${var}}' is not valid: use AUTO, ON or OFF")
  endif()
  set(have FALSE)
  if(NOT mode STREQUAL "OFF")
    find_package(${package} QUIET)
    if(${package}_FOUND)
      set(have TRUE)
    elseif(mode STREQUAL "ON")
      message(FATAL_ERROR
        "${var}=ON but ${package} was not found. Install the Debian package "
        "'${debian_package}' (apt-get install ${debian_package}) or set ${var}=OFF.")
    endif()
  endif()
  set(COURIER_HAVE_${name} ${have} PARENT_SCOPE)
  set(COURIER_FEATURE_SUMMARY "${COURIER_FEATURE_SUMMARY}  ${name}: ${mode} -> ${have}\n" PARENT_SCOPE)
endfunction()

function(courier_print_summary)
  message(STATUS "Courier optional parts (COURIER_WITH_*):\n${COURIER_FEATURE_SUMMARY}")
endfunction()
