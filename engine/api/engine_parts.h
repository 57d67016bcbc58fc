/*
 * The engine's parts, for `moevm run`, which needs more than the public API
 * (include/moevm/engine.h) offers: it opens and fills the model itself, since the
 * distributed mode places the experts between the two (each rank loads those it holds) and
 * its expert servers make no engine at all; and its report, its routing trace and the
 * distributed mode read the model and the inference context, whose statistics and hooks the
 * public API summarises or leaves out. Not exported from libmoevm.
 */
#ifndef MVM_ENGINE_API_ENGINE_PARTS_H
#define MVM_ENGINE_API_ENGINE_PARTS_H

#include "engine/forward/forward.h"
#include "moevm/engine.h"

/* An engine over model m, opened and filled by the caller (plan.h's mvm_plan_space, then
 * mvm_model_load_experts), computing on pool: the tokenizer, the chat template and the
 * context of mvm_engine_load, made from p (whose model, threads, gpu_budget, cpu_moe and
 * progress the caller has applied: not read). m and pool stay the caller's, to free after
 * the engine. vocab_optional: a model whose vocabulary cannot be read loads all the same,
 * for token ids in and out (mvm_engine_tokenize then fails saying why, pieces are empty). */
mvm_status mvm_engine_adopt(const mvm_engine_params *p, mvm_pool *pool, mvm_model *m,
                            int vocab_optional, mvm_engine **out);
mvm_model *mvm_engine_model(const mvm_engine *e);
mvm_ctx *mvm_engine_ctx(const mvm_engine *e);
/* 0 for a model adopted without its vocabulary. */
int mvm_engine_has_vocab(const mvm_engine *e);

#endif
