# Finds hwloc (Debian: libhwloc-dev) and defines Hwloc::hwloc.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_HWLOC QUIET hwloc)
endif()
find_path(HWLOC_INCLUDE_DIR hwloc.h HINTS ${PC_HWLOC_INCLUDE_DIRS})
find_library(HWLOC_LIBRARY NAMES hwloc HINTS ${PC_HWLOC_LIBRARY_DIRS})
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Hwloc REQUIRED_VARS HWLOC_LIBRARY HWLOC_INCLUDE_DIR)
if(Hwloc_FOUND AND NOT TARGET Hwloc::hwloc)
  add_library(Hwloc::hwloc UNKNOWN IMPORTED)
  set_target_properties(Hwloc::hwloc PROPERTIES
    IMPORTED_LOCATION ${HWLOC_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${HWLOC_INCLUDE_DIR})
endif()
mark_as_advanced(HWLOC_INCLUDE_DIR HWLOC_LIBRARY)
