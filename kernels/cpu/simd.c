/*
 * SIMD level detection and selection. The level's table of hot kernels is chosen once (at
 * load, by a constructor, or by mvm_k_simd_use before threads start) and read by every
 * kernel call, so dispatch costs one indirect call per row or per expert group.
 *
 * Detection on x86 reads cpuid and XCR0 directly rather than __builtin_cpu_supports: clang
 * 14's does not know "f16c", and the XCR0 test (the OS saves the YMM / ZMM state across
 * context switches) is then explicit rather than left to each compiler's runtime. On 64-bit
 * ARM it reads the hardware capabilities Linux gives every process (getauxval), which say
 * what the CPU and the kernel both support.
 */
#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

const struct mvm_k_level *mvm_k_kernels = &mvm_k_level_scalar;
static enum mvm_simd current = MVM_SIMD_SCALAR;

static const struct mvm_k_level *const levels[MVM_SIMD_COUNT] = {
    [MVM_SIMD_SCALAR] = &mvm_k_level_scalar,
#if defined(__x86_64__) || defined(__i386__)
    [MVM_SIMD_AVX2] = &mvm_k_level_avx2,
    [MVM_SIMD_AVXVNNI] = &mvm_k_level_avxvnni,
    [MVM_SIMD_AVX512] = &mvm_k_level_avx512,
    [MVM_SIMD_AVX512VNNI] = &mvm_k_level_avx512vnni,
#elif defined(__aarch64__)
    [MVM_SIMD_NEON] = &mvm_k_level_neon,
    [MVM_SIMD_DOTPROD] = &mvm_k_level_dotprod,
#endif
};

#if defined(__x86_64__) || defined(__i386__)
/* XCR0 bits: 1 SSE, 2 AVX (YMM upper halves), 5-7 AVX-512 (opmasks, ZMM upper halves,
 * ZMM16-31). */
#define XCR0_AVX 0x06u
#define XCR0_AVX512 0xE6u
/* cpuid leaf 7 sub-leaf 1, EAX: AVX-VNNI (cpuid.h's bit_AVXVNNI, which older headers lack) */
#define CPUID_7_1_AVXVNNI (1u << 4)

static unsigned xcr0(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return lo;
}

/* The levels this CPU has, a bit each. They do not nest: AVX-VNNI (Intel from Alder Lake on,
 * AMD from Zen 5) is not implied by AVX-512 VNNI (a Zen 4, an Ice Lake Xeon lack it). */
static unsigned cpu_levels(void)
{
    unsigned a, b, c1, d, has = 1u << MVM_SIMD_SCALAR;
    /* xgetbv is only defined once the OS has set CR4.OSXSAVE. */
    if (!__get_cpuid(1, &a, &b, &c1, &d) || !(c1 & bit_OSXSAVE))
        return has;
    const unsigned xcr = xcr0();
    unsigned b7, c7, a71 = 0;
    if (!__get_cpuid_count(7, 0, &a, &b7, &c7, &d))
        return has;
    const unsigned max7 = a; /* the highest sub-leaf of leaf 7 */
    const unsigned need1 = bit_AVX | bit_FMA | bit_F16C;
    if ((c1 & need1) != need1 || !(b7 & bit_AVX2) || (xcr & XCR0_AVX) != XCR0_AVX)
        return has;
    has |= 1u << MVM_SIMD_AVX2;
    if (max7 >= 1 && __get_cpuid_count(7, 1, &a71, &b, &c1, &d) && (a71 & CPUID_7_1_AVXVNNI))
        has |= 1u << MVM_SIMD_AVXVNNI;
    /* DQ too: the AVX-512 level is compiled for it, and every CPU with BW and VL has it. */
    const unsigned need7 = bit_AVX512F | bit_AVX512BW | bit_AVX512VL | bit_AVX512DQ;
    if ((b7 & need7) != need7 || (xcr & XCR0_AVX512) != XCR0_AVX512)
        return has;
    has |= 1u << MVM_SIMD_AVX512;
    if (c7 & bit_AVX512VNNI)
        has |= 1u << MVM_SIMD_AVX512VNNI;
    return has;
}
#elif defined(__aarch64__)
/* asm/hwcap.h's bits, for C libraries whose headers lack them */
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1ul << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1ul << 20)
#endif

static unsigned cpu_levels(void)
{
    const unsigned long hw = getauxval(AT_HWCAP);
    unsigned has = 1u << MVM_SIMD_SCALAR;
    if (hw & HWCAP_ASIMD)
        has |= 1u << MVM_SIMD_NEON;
    if ((hw & HWCAP_ASIMD) && (hw & HWCAP_ASIMDDP))
        has |= 1u << MVM_SIMD_DOTPROD;
    return has;
}
#else
static unsigned cpu_levels(void)
{
    return 1u << MVM_SIMD_SCALAR;
}
#endif

enum mvm_simd mvm_k_simd_detect(void)
{
    const unsigned has = cpu_levels();
    int best = MVM_SIMD_SCALAR;
    for (int lv = 0; lv < MVM_SIMD_COUNT; lv++)
        if (has >> lv & 1 && levels[lv])
            best = lv;
    return (enum mvm_simd)best;
}

/* A build has its own architecture's levels only (the others' entries are NULL). */
int mvm_k_simd_has(enum mvm_simd level)
{
    return (unsigned)level < MVM_SIMD_COUNT && levels[level] && cpu_levels() >> level & 1;
}

int mvm_k_simd_use(enum mvm_simd level)
{
    if (!mvm_k_simd_has(level))
        return -1;
    mvm_k_kernels = levels[level];
    current = level;
    return 0;
}

enum mvm_simd mvm_k_simd_current(void)
{
    return current;
}

const char *mvm_k_simd_name(enum mvm_simd level)
{
    static const char *const names[MVM_SIMD_COUNT] = {
        "scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "neon", "dotprod"};
    return (unsigned)level < MVM_SIMD_COUNT ? names[level] : "unknown";
}

/* The default, mvm_k_simd_detect(), in place before main() and before any thread. */
__attribute__((constructor)) static void select_best(void)
{
    mvm_k_simd_use(mvm_k_simd_detect());
}
