# Finds rdma-core's ibverbs (Debian: libibverbs-dev) and defines IBVerbs::verbs.
find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
find_library(IBVERBS_LIBRARY NAMES ibverbs)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(IBVerbs REQUIRED_VARS IBVERBS_LIBRARY IBVERBS_INCLUDE_DIR)
if(IBVerbs_FOUND AND NOT TARGET IBVerbs::verbs)
  add_library(IBVerbs::verbs UNKNOWN IMPORTED)
  set_target_properties(IBVerbs::verbs PROPERTIES
    IMPORTED_LOCATION ${IBVERBS_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${IBVERBS_INCLUDE_DIR})
endif()
mark_as_advanced(IBVERBS_INCLUDE_DIR IBVERBS_LIBRARY)
