# mlcd_add_test(NAME name SOURCES a.cc ... [LIBS lib ...] [LABELS unit|integration ...]
#               [TIMEOUT seconds])
# Builds a GoogleTest binary linked with gtest_main and registers it with CTest. Every test
# gets MLCD_BIN_DIR (where the service binaries are) and MLCD_SOURCE_DIR as definitions, and
# MLCD_NO_BLAS_TUNING=1 in its environment so results never depend on the CPU's BLAS kernels.
#
# The tests named in MLCD_SANITIZE_TESTS also get the label `sanitize`: the unit tests of the
# threaded parts (prefetch queue and the rest of common/, the label store's storage, the
# coordinator's persisted state and gang scheduler), which scripts/run_sanitizer_tests.sh
# builds and runs under ASan+UBSan and under TSan. They need no torch, so a sanitizer build
# compiles only them.
set(MLCD_SANITIZE_TESTS common_test labelstore_storage_test coordinator_state_test)
# The tests named in MLCD_ASAN_TESTS get the label `asan`: the suites without torch that run
# the real service binaries (label store, clusterd, coordinator, mlcdctl) over gRPC, and the
# dataset index (libarchive walking real tars, read back by offset, mlcdctl dataset) and the
# generated datasets (`mlcdctl dataset make`: the drawing, PNG and tar writing), which the
# ASan + UBSan build runs too (the binaries they start are built with ASan as well). TSan
# leaves them out: gRPC's own synchronisation is invisible to it in Debian's uninstrumented
# library. clusterd_integration_test is not among them: its metrics scrapes overflowed the fixed
# 100 KiB thread stack of Debian's civetweb (glibc's printf under ASan's interceptor); since
# then no process uses civetweb, but the suite has not been run under ASan since.
# The tests named in MLCD_TORCH2_TESTS get the label `torch2`: the worker's suites that
# scripts/run_torch2_tests.sh builds against the torch wheel's libtorch 2.x (CUDA, NCCL) and
# runs on the CPU.
set(MLCD_TORCH2_TESTS worker_vit_test worker_collectives_test worker_partial_fc_test
    worker_loss_check_test worker_data_test worker_prefetcher_test worker_train_test
    worker_train_step_test worker_contrastive_loss_test worker_partial_fc_device_test
    worker_grad_sync_test worker_label_heads_test worker_label_head_objective_test
    worker_augment_test worker_pseudo_label_order_test)
set(MLCD_ASAN_TESTS labelstore_service_test labelstore_cli_test clusterd_test
    coordinator_job_spec_test coordinator_protocol_test dataset_index_test dataset_make_test)
# Sanitizer runtime options for every test of a sanitizer build: stop at the first report;
# TSan's suppressions name the uninstrumented libraries whose own synchronisation it cannot
# see (tests/sanitizers/tsan.supp). The glibc malloc tuning tests are left out there: a
# sanitizer brings its own allocator, which has no mmap or trim threshold.
set(MLCD_SANITIZER_ENV
    "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1"
    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
    "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${CMAKE_SOURCE_DIR}/tests/sanitizers/tsan.supp"
    "GTEST_FILTER=-MallocEnvTest.*")

# The Python of the interop tests: the pip flavour's virtual environment (scripts/setup.sh with
# MLCD_TORCH=pip makes it, with the packages of scripts/interop-requirements.txt).
set(MLCD_INTEROP_PYTHON "${CMAKE_SOURCE_DIR}/build-torch2/venv/bin/python3" CACHE FILEPATH
    "Python with torch, transformers, safetensors, tensorboard and grpcio-tools (interop tests)")

# The Python of the pytest suites (label unit): Debian's, with python3-pytest, python3-grpcio,
# python3-protobuf and python3-yaml (scripts/setup.sh installs them).
set(MLCD_PYTEST_PYTHON /usr/bin/python3 CACHE FILEPATH
    "Python of the pytest suites (with pytest, grpcio, protobuf and PyYAML)")

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
  if(T_NAME IN_LIST MLCD_SANITIZE_TESTS)
    list(APPEND T_LABELS sanitize)
  endif()
  if(T_NAME IN_LIST MLCD_ASAN_TESTS)
    list(APPEND T_LABELS asan)
  endif()
  if(T_NAME IN_LIST MLCD_TORCH2_TESTS)
    list(APPEND T_LABELS torch2)
  endif()
  set(env "MLCD_NO_BLAS_TUNING=1" "OMP_NUM_THREADS=2")
  # The interop tests (label `interop`) drive the Python side from the pip flavour's venv
  # (transformers, safetensors, tensorboard, grpcio-tools: scripts/interop-requirements.txt);
  # the main CTest run leaves them out and scripts/run_interop_tests.sh runs them.
  if("interop" IN_LIST T_LABELS)
    list(APPEND env "MLCD_INTEROP_PYTHON=${MLCD_INTEROP_PYTHON}")
  endif()
  if(MLCD_SANITIZE)
    list(APPEND env ${MLCD_SANITIZER_ENV})
  endif()
  set_tests_properties(${T_NAME} PROPERTIES
    TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}" ENVIRONMENT "${env}")
endfunction()
