/*
 * Routing traces recorded by `moevm run --trace-out`: JSON Lines, the input of the
 * simulator (docs/trace-format.md). A header line describes the model; then one line per
 * (token, MoE layer) with the router's probabilities over all experts, the selected experts
 * and the weights the router gave them.
 */
#ifndef MVM_TOOLS_TRACE_OUT_H
#define MVM_TOOLS_TRACE_OUT_H

#include <stdint.h>

#include "engine/forward/forward.h"
#include "engine/model/model.h"

typedef struct mvm_trace_out mvm_trace_out;

/* Creates `path` and writes the header. with_hidden: every record also carries the layer's
 * router input ("hidden"), for predictor training (large: n_embd numbers per record). */
mvm_status mvm_trace_open(const char *path, const mvm_model *m, int with_hidden,
                          mvm_trace_out **out);
/* Records from now on belong to request `req`. */
void mvm_trace_set_request(mvm_trace_out *t, uint32_t req);
/* An mvm_route_fn (forward.h): ctx is the mvm_trace_out. A record the route module
 * changed also carries what ran ("ran", "ran_weights"). */
void mvm_trace_route(void *ctx, const mvm_route_record *r);
/* Flushes and closes; MVM_ERR_BACKEND if any write failed (disk full...). NULL is a no-op. */
mvm_status mvm_trace_close(mvm_trace_out *t);

#endif
