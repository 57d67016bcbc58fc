/*
 * Waiting by spinning first: for the threads whose wake-up from a sleep costs more than the
 * wait itself (engine/compute/pool.c's workers; vmm's migration worker and the threads that
 * wait on it). A futex wake of a sleeping thread cost 18-30 us on the development VM
 * (bench/cpu/pool_wake.c); a step's misses are ordered for the device in about as long.
 */
#ifndef MVM_VMM_SPIN_H
#define MVM_VMM_SPIN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define mvm_cpu_relax() _mm_pause()
#elif defined(__aarch64__)
/* AArch64 has no PAUSE, and YIELD is a no-op on cores without SMT (every Neoverse): with it,
 * or nothing, a spin's first rounds would pass in about a microsecond. ISB stalls the front
 * end for a few tens of cycles, the nearest to PAUSE; Arm advises it, and Rust's spin_loop
 * hint emits it. Not measured here (no ARM machine). */
#define mvm_cpu_relax() __asm__ volatile("isb" ::: "memory")
#else
#define mvm_cpu_relax() ((void)0)
#endif

/* A monotonic clock in nanoseconds (the spins' deadlines, the space's stats' times). */
static inline uint64_t mvm_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Spins until *seq differs from seen or the clock passes until_ns (mvm_clock_ns):
 * pauses for some microseconds, then yields the core between looks. Returns whether *seq
 * changed. */
bool mvm_spin_until(const atomic_uint *seq, unsigned seen, uint64_t until_ns);

/* Waits on cv for *seq to move on from its value now, mu held on entry and on return:
 * spinning without mu until until_ns first (none when it has passed), then asleep on cv,
 * until the CLOCK_MONOTONIC time `deadline` where one is given (cv made for that clock).
 * The writers change *seq under mu before they signal cv. May return early (a spurious
 * wake-up): the caller checks its condition again. Returns ETIMEDOUT past the deadline,
 * else 0. */
int mvm_spin_then_wait(pthread_mutex_t *mu, pthread_cond_t *cv, const atomic_uint *seq,
                       uint64_t until_ns, const struct timespec *deadline);

#endif
