# Cross build for aarch64 (the DGX Spark's Grace CPU) with Debian's cross compiler and
# multiarch (:arm64) libraries; the binaries run here under qemu-user, whose CPU model
# (QEMU_CPU, set by the test) decides which SIMD targets (NEON, SVE, SVE2) they can take.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# Loader and libraries both from Debian's arm64 multiarch packages (/lib/aarch64-linux-gnu),
# which the tests' libraries come from: the cross sysroot's older loader with the multiarch
# libc made pthread_create loop forever.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
