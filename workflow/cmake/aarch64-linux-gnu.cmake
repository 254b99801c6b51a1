# ladder: cross-build for the emulated aarch64 lane with Debian's gcc-aarch64-linux-gnu.
# Programs (cmake, ninja) come from the build machine; libraries and headers from the sysroot.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# Guest executables are linked non-PIE: they load at one fixed address under every QEMU. QEMU 11's
# static-pie qemu-aarch64 places a PIE guest at a new address in every run (measured: start_code
# 0x7fc6ef7e0000, then 0x7f2f485e0000; `setarch -R` does not fix it), while the dispatch ledger
# filters QEMU's exec log by kernel entry addresses read before the run. Compiles are unchanged.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-no-pie")
