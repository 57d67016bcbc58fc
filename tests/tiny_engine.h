/*
 * A tiny Qwen3-MoE model (mkmodel's "tiny" preset: random weights, a trained vocabulary)
 * written to a temporary file and loaded on the host backend, for tests that need a real
 * vocabulary (grammars, the sampler's DRY breakers). The file is gone once loaded.
 */
#ifndef MVM_TESTS_TINY_ENGINE_H
#define MVM_TESTS_TINY_ENGINE_H

#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "engine/compute/pool.h"
#include "engine/synth/mkmodel.h"
#include "moevm/engine.h"

/* The engine, or NULL after a failed CHECK. */
static inline mvm_engine *tiny_engine(void)
{
    char path[] = "/tmp/moevm_tiny_XXXXXX";
    int fd = mkstemp(path);
    mvm_model_spec spec = mvm_preset_find("tiny", "qwen3moe")->spec;
    CHECK(fd >= 0);
    mvm_pool *pool = NULL;
    mvm_engine *e = NULL;
    CHECK_ST(mvm_pool_create(1, NULL, &pool), MVM_OK);
    CHECK_ST(mvm_mkmodel_write(&spec, path, pool, NULL, NULL), MVM_OK);
    mvm_pool_destroy(pool);
    setenv("MOEVM_BACKEND", "host", 1);
    CHECK_ST(mvm_engine_load(&(mvm_engine_params){.model = path, .threads = 1}, &e), MVM_OK);
    unlink(path);
    if (fd >= 0)
        close(fd);
    return e;
}

#endif
