# mlcd_add_test(NAME name SOURCES a.cc ... [LIBS lib ...] [LABELS unit|integration ...]
#               [TIMEOUT seconds])
# Builds a GoogleTest binary linked with gtest_main and registers it with CTest. Every test
# gets MLCD_BIN_DIR (where the service binaries are) and MLCD_SOURCE_DIR as definitions, and
# MLCD_NO_BLAS_TUNING=1 in its environment so results never depend on the CPU's BLAS kernels.
function(mlcd_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT MLCD_BUILD_TESTS)
    return()
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_compile_options(${T_NAME} PRIVATE ${MLCD_WARNINGS})
  target_compile_definitions(${T_NAME} PRIVATE
    MLCD_BIN_DIR="${CMAKE_BINARY_DIR}/bin" MLCD_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} mlcd_testing GTest::gtest_main)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES
    TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
    ENVIRONMENT "MLCD_NO_BLAS_TUNING=1;OMP_NUM_THREADS=2")
endfunction()
