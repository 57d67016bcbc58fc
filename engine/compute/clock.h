/* The engine's clock: monotonic seconds, for the rates it prints and the times it fits. */
#ifndef MVM_ENGINE_COMPUTE_CLOCK_H
#define MVM_ENGINE_COMPUTE_CLOCK_H

#include <time.h>

static inline double mvm_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
