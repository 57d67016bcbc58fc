/*
 * Admission: whether an expert that a step just ran from its home (on the CPU threads, or
 * read by the GPU in place) should now be loaded into the device cache, in the background.
 *
 * Why: an assign module that runs a miss where its bytes are (DALI's greedy, SMoE's split)
 * never asks for a load, so without admission nothing enters the cache but what a predictor
 * or DALI's replacement asks for, and with neither the cache stays empty and the GPU idles
 * (moevm sim --model-shape mixtral-8x7b --budget 50% --compare assign=greedy: 0% hits). A
 * cache inserts on a miss; here the insertion is a copy off the step's critical path, made
 * only while the copy engine has nothing else queued (predictions come first).
 *
 * The rule, from what the evict module observes: with room on the device, admit; without,
 * offer the module its usual candidates plus the expert, and admit unless the expert itself
 * is what it would evict first (an LRU admits every miss, an LFU only one used more often
 * than its least used resident, a score module one that scores higher). The engine
 * (engine/forward/residency.c) and the simulator (tools/sim.c) call the same function.
 */
#ifndef MVM_POLICY_ADMIT_H
#define MVM_POLICY_ADMIT_H

#include <stdbool.h>

#include "policy/policy.h"

/* x needs `need` more pages. cand[0..n) are the resident experts the module may evict
 * (not busy, not x), with room for one more entry: x is appended there. */
bool mvm_admit(const mvm_evict_ops *ev, void *self, const mvm_pview *v, uint32_t x,
               uint32_t need, uint32_t *cand, uint32_t n);

#endif
