# Finds the DLPack header (Debian: libdlpack-dev) and defines DLPack::DLPack.
# DLPACK_INCLUDE_DIR may point at a copy of the header elsewhere.
find_path(DLPACK_INCLUDE_DIR dlpack/dlpack.h)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(DLPack REQUIRED_VARS DLPACK_INCLUDE_DIR)
if(DLPack_FOUND AND NOT TARGET DLPack::DLPack)
  add_library(DLPack::DLPack INTERFACE IMPORTED)
  set_target_properties(DLPack::DLPack PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${DLPACK_INCLUDE_DIR})
endif()
mark_as_advanced(DLPACK_INCLUDE_DIR)
