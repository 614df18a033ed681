# Helpers shared by every Shoal target.

# Warnings for Shoal's own code (never for generated code).
function(shoal_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter
    -Wno-missing-field-initializers)
  if(SHOAL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# shoal_cc_test(NAME foo_test SRCS foo_test.cc DEPS lib... LABELS unit [TIMEOUT s])
# Builds a GoogleTest binary and registers it with ctest under the given labels.
function(shoal_cc_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SRCS})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  shoal_warnings(${T_NAME})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "SHOAL_CLI=${CMAKE_BINARY_DIR}/bin/shoal")
endfunction()
