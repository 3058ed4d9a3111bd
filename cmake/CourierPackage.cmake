# The CMake package of an installed Courier: find_package(Courier) gives
#   Courier::courier     libcourier and its public headers (include/courier/)
#   Courier::abi         the plugin ABI headers alone (what a plugin links)
#   courier_add_backend  the helper Courier's own backends are built with
# all installed into <libdir>/cmake/Courier, with nothing but paths relative
# to the install prefix (the prefix can be moved).
include(CMakePackageConfigHelpers)

set(COURIER_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Courier)

install(TARGETS courier_abi EXPORT CourierTargets)
install(EXPORT CourierTargets
  NAMESPACE Courier::
  DESTINATION ${COURIER_PACKAGE_DIR})

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/CourierConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/CourierConfig.cmake
  INSTALL_DESTINATION ${COURIER_PACKAGE_DIR})
# 0.x: a minor release may change the C++ API (semantic versioning makes no
# promise below 1.0), so find_package(Courier 0.1) accepts 0.1.z only.
# Plugins are not bound by this: they speak the plugin ABI, versioned apart
# (docs/plugin-abi.md), and load into any Courier of the same ABI major.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/cmake/CourierConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)

install(FILES
    ${PROJECT_BINARY_DIR}/cmake/CourierConfig.cmake
    ${PROJECT_BINARY_DIR}/cmake/CourierConfigVersion.cmake
    ${PROJECT_SOURCE_DIR}/cmake/CourierBackend.cmake
    ${PROJECT_SOURCE_DIR}/cmake/FindDLPack.cmake
  DESTINATION ${COURIER_PACKAGE_DIR})
