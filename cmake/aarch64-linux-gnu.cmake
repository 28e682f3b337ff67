# Cross build for aarch64 (the DGX Spark's Grace CPU) with Debian's cross compiler against
# Debian's arm64 packages unpacked into one folder (scripts/arm64-root.sh): the sysroot here,
# the library root of qemu-user when the binaries run, whose CPU model (QEMU_CPU, set by the
# tests) decides which SIMD targets (NEON, SVE, SVE2) they can take.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

if(DEFINED ENV{SHARDQ_ARM64_ROOT})
  set(SHARDQ_ARM64_ROOT "$ENV{SHARDQ_ARM64_ROOT}")
else()
  set(SHARDQ_ARM64_ROOT /opt/shardq/arm64-root)
endif()
if(NOT EXISTS "${SHARDQ_ARM64_ROOT}/usr/include/aarch64-linux-gnu")
  message(FATAL_ERROR "no arm64 root at ${SHARDQ_ARM64_ROOT}: run scripts/arm64-root.sh (scripts/deps.sh does)")
endif()
set(CMAKE_SYSROOT "${SHARDQ_ARM64_ROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Loader, libc and every library from the root, the same packages' versions throughout (the
# cross toolchain's own older loader with a newer libc made pthread_create loop forever).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L "${SHARDQ_ARM64_ROOT}")

# pkg-config, and FindMPI's and FindHDF5's compiler wrappers (mpicc, h5cc), are the host's and
# answer with x86-64 paths: pkg-config reads the root's files, MPI is named here, and HDF5 is
# found by its Debian folder in the root.
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${SHARDQ_ARM64_ROOT}")
set(ENV{PKG_CONFIG_LIBDIR} "${SHARDQ_ARM64_ROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${SHARDQ_ARM64_ROOT}/usr/share/pkgconfig")
set(MPI_SKIP_COMPILER_WRAPPER TRUE)
set(MPI_C_HEADER_DIR "${SHARDQ_ARM64_ROOT}/usr/lib/aarch64-linux-gnu/openmpi/include")
set(MPI_C_LIB_NAMES mpi)
set(MPI_mpi_LIBRARY "${SHARDQ_ARM64_ROOT}/usr/lib/aarch64-linux-gnu/libmpi.so")
set(HDF5_ROOT /usr/lib/aarch64-linux-gnu/hdf5/serial)
