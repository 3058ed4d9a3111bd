# Finds libfabric (Debian: libfabric-dev) and defines libfabric::libfabric.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_LIBFABRIC QUIET libfabric)
endif()
find_path(LIBFABRIC_INCLUDE_DIR rdma/fabric.h HINTS ${PC_LIBFABRIC_INCLUDE_DIRS} ${LIBFABRIC_ROOT}/include)
find_library(LIBFABRIC_LIBRARY NAMES fabric HINTS ${PC_LIBFABRIC_LIBRARY_DIRS} ${LIBFABRIC_ROOT}/lib)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(libfabric REQUIRED_VARS LIBFABRIC_LIBRARY LIBFABRIC_INCLUDE_DIR)
if(libfabric_FOUND AND NOT TARGET libfabric::libfabric)
  add_library(libfabric::libfabric UNKNOWN IMPORTED)
  set_target_properties(libfabric::libfabric PROPERTIES
    IMPORTED_LOCATION ${LIBFABRIC_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${LIBFABRIC_INCLUDE_DIR})
endif()
mark_as_advanced(LIBFABRIC_INCLUDE_DIR LIBFABRIC_LIBRARY)
