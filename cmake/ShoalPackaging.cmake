# Install rules and the CMake package (find_package(shoal)).
#
# A user's program links shoal::shoal, from the build tree
# (-Dshoal_DIR=<build>) or from an install prefix (CMAKE_PREFIX_PATH=<prefix>).
# shoal is a static library over one static library per folder (see
# src/CMakeLists.txt), so those and their static dependencies (shoal_proto,
# shoal_scheduling, shoal_accel, ...) are exported with it: the user's link
# needs them. Protobuf, Abseil and OpenSSL come back through find_dependency in
# shoalConfig.cmake. Collective groups are shoal::collective (shoal_collective,
# exported under that name); it brings Gloo back the same way.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SHOAL_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/shoal)

install(TARGETS shoal shoal_cli_lib shoal_launch shoal_worker shoal_api shoal_agent
                shoal_head shoal_head_client shoal_rpc shoal_common shoal_proto
                shoal_scheduling shoal_accel shoal_dashboard shoal_sim
                shoal_presentation shoal_object_store shoal_object_plane
                shoal_collective
  EXPORT shoalTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS shoal_cli
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/shoal
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")

install(EXPORT shoalTargets
  NAMESPACE shoal::
  DESTINATION ${SHOAL_INSTALL_CMAKEDIR})
export(EXPORT shoalTargets
  NAMESPACE shoal::
  FILE ${CMAKE_BINARY_DIR}/shoalTargets.cmake)

write_basic_package_version_file(
  ${CMAKE_BINARY_DIR}/shoalConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)

# One template, two configs. The build tree's targets still name the
# header-only CLI11 and nlohmann_json (linked as $<BUILD_INTERFACE:...>), so
# only that config looks them up; an installed Shoal does not need them.
set(SHOAL_CONFIG_FOR_BUILD_TREE TRUE)
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/shoalConfig.cmake.in
  ${CMAKE_BINARY_DIR}/shoalConfig.cmake
  INSTALL_DESTINATION ${CMAKE_BINARY_DIR}
  INSTALL_PREFIX ${CMAKE_BINARY_DIR})

set(SHOAL_CONFIG_FOR_BUILD_TREE FALSE)
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/shoalConfig.cmake.in
  ${CMAKE_BINARY_DIR}/install/shoalConfig.cmake
  INSTALL_DESTINATION ${SHOAL_INSTALL_CMAKEDIR})
install(FILES
  ${CMAKE_BINARY_DIR}/install/shoalConfig.cmake
  ${CMAKE_BINARY_DIR}/shoalConfigVersion.cmake
  DESTINATION ${SHOAL_INSTALL_CMAKEDIR})
