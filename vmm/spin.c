/* Waiting by spinning first (see spin.h). */
#include "vmm/spin.h"

#include <sched.h>

/* Pauses before the first yield: about ten microseconds (a PAUSE is 40-140 cycles). */
#define PAUSE_ROUNDS 256

bool mvm_spin_until(const atomic_uint *seq, unsigned seen, uint64_t until_ns)
{
    for (unsigned round = 0;; round++) {
        if (atomic_load_explicit(seq, memory_order_acquire) != seen)
            return true;
        if (round % 16 == 0 && mvm_clock_ns() >= until_ns)
            return false;
        if (round < PAUSE_ROUNDS)
            mvm_cpu_relax();
        else
            sched_yield();
    }
}

int mvm_spin_then_wait(pthread_mutex_t *mu, pthread_cond_t *cv, const atomic_uint *seq,
                       uint64_t until_ns, const struct timespec *deadline)
{
    const unsigned seen = atomic_load_explicit(seq, memory_order_acquire);
    if (mvm_clock_ns() < until_ns) {
        pthread_mutex_unlock(mu);
        bool changed = mvm_spin_until(seq, seen, until_ns);
        pthread_mutex_lock(mu);
        if (changed || atomic_load_explicit(seq, memory_order_acquire) != seen)
            return 0;
    }
    return deadline ? pthread_cond_timedwait(cv, mu, deadline) : pthread_cond_wait(cv, mu);
}
