# Finds libtorch, in one of two flavours (docs/torch-builds.md):
#   - Debian's CPU libtorch 1.13 (libtorch-dev), the default;
#   - the `torch` wheel's libtorch 2.x (CUDA build), when Torch_DIR points at the wheel's
#     share/cmake/Torch (scripts/setup.sh with MLCD_TORCH=pip does that).
# Sets MLCD_TORCH_PIP (ON for the wheel) and leaves TORCH_LIBRARIES for the worker's targets.
#
# What collides between the wheel and Debian's packages, and how it is resolved here:
#   - libraries and configs: Debian's libtorch.so and Caffe2 config sit in system directories
#     that find_library / find_package search before the wheel's; the wheel's lib/ goes first
#     on CMAKE_LIBRARY_PATH and Caffe2_DIR is set (never CMAKE_PREFIX_PATH: that would also
#     pick the wheel's bin/protoc over Debian's).
#   - headers: the wheel ships an old copy of protobuf's headers in include/google/, which would
#     shadow Debian's (our generated .pb.h need Debian's 3.21); the torch targets get a copy of
#     the include tree without google/ (symbolic links, in the build dir).
#   - NCCL: the wheel's c10d headers declare ProcessGroupNCCL only under USE_C10D_NCCL, and
#     <nccl.h> must be the one of the NCCL the wheel links (nvidia/nccl/include).
#   - std::filesystem: the wheel's libtorch.so exports a copy of it; libstdc++ is linked first
#     (below) so that programs bind to libstdc++'s.
#   - OpenMP and the C++ ABI: the wheel is built with the new C++ ABI, as Debian is, and ships
#     its own libgomp.so.1 under the same soname as GCC's; a process loads one of them (the
#     first found on the RUNPATH), which both torch and FAISS/OpenBLAS then use.
set(MLCD_TORCH_PIP OFF)
if(Torch_DIR AND NOT Torch_DIR MATCHES "^/usr/")
  set(MLCD_TORCH_PIP ON)
  get_filename_component(MLCD_TORCH_ROOT "${Torch_DIR}/../../.." ABSOLUTE)
  list(PREPEND CMAKE_LIBRARY_PATH "${MLCD_TORCH_ROOT}/lib")
  # TorchConfig finds its Caffe2 config through PATHS, which come after the system's (Debian's
  # 1.13 Caffe2 config would win): point at the wheel's directly.
  set(Caffe2_DIR "${MLCD_TORCH_ROOT}/share/cmake/Caffe2" CACHE PATH "Caffe2 config of the torch wheel" FORCE)
endif()

find_package(Torch REQUIRED)
message(STATUS "mlcd: libtorch ${Torch_VERSION} from ${TORCH_INSTALL_PREFIX}; CUDA worker: ${MLCD_WITH_CUDA}")

# Debian's Caffe2 config creates an imported `gflags` target without a location.
if(TARGET gflags)
  get_target_property(mlcd_gflags_location gflags IMPORTED_LOCATION)
  if(NOT mlcd_gflags_location)
    find_library(MLCD_GFLAGS_LIBRARY gflags REQUIRED)
    set_target_properties(gflags PROPERTIES IMPORTED_LOCATION ${MLCD_GFLAGS_LIBRARY})
  endif()
endif()

if(MLCD_TORCH_PIP)
  # The wheel's libtorch.so exports its own (older, statically linked) copy of std::filesystem;
  # with libtorch first among a program's libraries, the dynamic linker binds our
  # std::filesystem calls to that copy, which crashes (remove_all jumps to address 0). Naming
  # libstdc++ first makes its own definitions win for every program of this build.
  add_link_options("LINKER:--push-state,--no-as-needed" "-lstdc++" "LINKER:--pop-state")
  set(mlcd_torch_include ${CMAKE_BINARY_DIR}/torch-include)
  file(MAKE_DIRECTORY ${mlcd_torch_include})
  file(GLOB mlcd_torch_include_entries RELATIVE ${MLCD_TORCH_ROOT}/include ${MLCD_TORCH_ROOT}/include/*)
  foreach(entry ${mlcd_torch_include_entries})
    if(NOT entry STREQUAL "google")
      file(CREATE_LINK ${MLCD_TORCH_ROOT}/include/${entry} ${mlcd_torch_include}/${entry} SYMBOLIC)
    endif()
  endforeach()
  foreach(target torch torch_cpu torch_cuda c10 c10_cuda)
    if(TARGET ${target})
      get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
      if(dirs)
        string(REPLACE "${MLCD_TORCH_ROOT}/include" "${mlcd_torch_include}" dirs "${dirs}")
        set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${dirs}")
      endif()
    endif()
  endforeach()
  if(MLCD_WITH_CUDA)
    get_filename_component(mlcd_site_packages "${MLCD_TORCH_ROOT}/.." ABSOLUTE)
    set(MLCD_NCCL_INCLUDE_DIR ${mlcd_site_packages}/nvidia/nccl/include)
  endif()
endif()
