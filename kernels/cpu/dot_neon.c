/*
 * The 64-bit ARM level every AArch64 CPU has (Advanced SIMD, ARMv8.0): neon.h's kernels for
 * every weight type.
 */
#include "kernels/cpu/dispatch.h"

#if defined(__aarch64__)
#include "kernels/cpu/neon.h"

MVM_K_LEVEL(mvm_k_level_neon, , neon_dotn_float, neon_dotn_blocks,
            neon_downn_float, neon_downn_blocks, neon_dotn_blocks, neon_downn_blocks,
            neon_axpy_float, NULL, NULL, NULL, NULL, NULL, NULL, NULL)

#endif
