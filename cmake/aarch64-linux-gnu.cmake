# Cross-compiling for 64-bit ARM Linux (Grace, Graviton, Ampere) on a Debian x86-64 host with
# multiarch arm64 libraries (tests/cross/aarch64.sh installs them): everything but the CUDA
# parts, whose toolkit here is the host's. Tests run under qemu-user
# (CMAKE_CROSSCOMPILING_EMULATOR), against the multiarch root's arm64 C library
# (libc6:arm64, the one the binaries link against): with the cross toolchain's own copy in
# /usr/aarch64-linux-gnu (Debian 12's libc6-arm64-cross 2.36-8) every pthread_create + join
# hangs under qemu-user 7.2, where the multiarch 2.36-9+deb12u14 does not.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
# the host's CUDA toolkit and Open MPI wrappers are x86-64
set(CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit ON)
set(CMAKE_DISABLE_FIND_PACKAGE_MPI ON)
