/*
 * The routing rule (policy/router.h): a token's choosing key by hand (a choose bias, groups
 * by their best two under sigmoid and by their best under softmax, ties, NaN), the same as
 * a ranking of all experts, its top-k from logits; and on every kind of router the engine
 * computes, the gate predictor applied to a layer's own router input chooses exactly the
 * experts the engine chose.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine/forward/forward.h"
#include "engine/model/model.h"
#include "engine/plan/plan.h"
#include "engine/synth/mkmodel.h"
#include "policy/modules.h"
#include "policy/predict_common.h"
#include "policy/router.h"
#include "vmm/error.h"

static int same_keys(const float *a, const float *b, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (!(a[i] == b[i]))
            return 0;
    return 1;
}

/* Sigmoid, 4 groups of 2, 2 kept, probabilities p and a choose bias:
 *   p + bias = (.9, .1 | .6, .5 | .3, .05 | .3, .55)
 *   groups by their best two: 1.0, 1.1, .35, .85: groups 1 and 0 are kept.
 * Top-3 of the key (0, 2, 3); without groups it would be (0, 2, 7), by p (0, 4, 2). */
static void test_key_groups(void)
{
    static const float p[8] = {.9f, .1f, .6f, .5f, .8f, .05f, .3f, .3f};
    static const float b1[8] = {0, 0, 0, 0, -.5f, 0, 0, .25f};
    const float *bias[2] = {NULL, b1};
    mvm_router r = {.choose_bias = bias, .sigmoid = 1, .n_group = 4, .n_group_used = 2};
    CHECK(mvm_router_keyed(&r, 0) && mvm_router_keyed(&r, 1));
    float key[8], group[4];
    mvm_router_key(&r, 1, p, 8, key, group);
    const float want[8] = {.9f, .1f, .6f, .5f, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK(same_keys(key, want, 8));
    uint32_t idx[3];
    CHECK(mvm_predict_topk(key, 8, 3, idx) == 3 && idx[0] == 0 && idx[1] == 2 && idx[2] == 3);
    /* As a ranking: groups 2 and 3 (p + bias .3, .05, .3, .55) below the lowest kept key,
     * .1, in their order. */
    mvm_router_rank_key(&r, 1, p, 8, key, group);
    CHECK(same_keys(key, want, 4));
    CHECK(key[4] < .1f && key[5] < .1f && key[6] < .1f && key[7] < .1f);
    CHECK(key[7] > key[4] && key[4] == key[6] && key[6] > key[5]);
    r.n_group = 1; /* one group: no limit */
    mvm_router_key(&r, 1, p, 8, key, group);
    CHECK(mvm_predict_topk(key, 8, 3, idx) == 3 && idx[0] == 0 && idx[1] == 2 && idx[2] == 7);
    r.choose_bias = NULL;
    CHECK(!mvm_router_keyed(&r, 1));
    mvm_router_key(&r, 1, p, 8, key, group); /* no bias, no groups: p itself */
    CHECK(same_keys(key, p, 8));
    mvm_router_rank_key(&r, 1, p, 8, key, group);
    CHECK(same_keys(key, p, 8));
    const float *none[2] = {NULL, NULL}; /* rows without a bias: not keyed */
    r.choose_bias = none;
    CHECK(!mvm_router_keyed(&r, 0) && !mvm_router_keyed(&r, 1));
}

/* Two groups, one kept: (.7, 0) against (.6, .5). Sigmoid ranks them by their best two
 * (.7 < 1.1), softmax by their best (.7 > .6). Equal groups keep the lower; a NaN ranks
 * lowest. */
static void test_key_rules(void)
{
    static const float p[4] = {.7f, 0, .6f, .5f};
    mvm_router r = {.sigmoid = 1, .n_group = 2, .n_group_used = 1};
    float key[4], group[2];
    mvm_router_key(&r, 0, p, 4, key, group);
    CHECK(key[0] == -INFINITY && key[1] == -INFINITY && key[2] == .6f && key[3] == .5f);
    r.sigmoid = 0;
    mvm_router_key(&r, 0, p, 4, key, group);
    CHECK(key[0] == .7f && key[1] == 0 && key[2] == -INFINITY && key[3] == -INFINITY);
    static const float tie[4] = {.5f, .5f, .5f, .5f};
    for (int s = 0; s < 2; s++) {
        r.sigmoid = s;
        mvm_router_key(&r, 0, tie, 4, key, group);
        CHECK(key[0] == .5f && key[1] == .5f && key[2] == -INFINITY && key[3] == -INFINITY);
    }
    const float bad[4] = {NAN, .2f, .3f, .1f}; /* group 0: NaN and .2, lower than .4 */
    r.sigmoid = 1;
    mvm_router_key(&r, 0, bad, 4, key, group);
    CHECK(key[0] == -INFINITY && key[1] == -INFINITY && key[2] == .3f && key[3] == .1f);
    r.sigmoid = 0; /* softmax: .2 against .3 */
    mvm_router_key(&r, 0, bad, 4, key, group);
    CHECK(key[0] == -INFINITY && key[2] == .3f);
}

/* From logits: (2, 0, 1, -1). Unkeyed, sigmoid or softmax, the top-2 is the logits' (0, 2)
 * and they are left as they were; a choose bias of .5 on expert 1 lifts its sigmoid (.5)
 * above expert 0's (.88); under softmax (.64, .09, .24, .03) it lifts 1 above 2 only. */
static void test_pick(void)
{
    static const float logits[4] = {2, 0, 1, -1};
    static const float b[4] = {0, .5f, 0, 0};
    const float *bias[1] = {b};
    float x[4], scratch[8];
    uint32_t idx[2];
    for (int s = 0; s < 2; s++) {
        mvm_router r = {.sigmoid = s};
        memcpy(x, logits, sizeof x);
        CHECK(mvm_router_pick(&r, 0, x, 4, 2, idx, scratch) == 2 && idx[0] == 0 && idx[1] == 2);
        CHECK(memcmp(x, logits, sizeof x) == 0);
        r.choose_bias = bias;
        memcpy(x, logits, sizeof x);
        CHECK(mvm_router_pick(&r, 0, x, 4, 2, idx, scratch) == 2);
        CHECK(s ? idx[0] == 1 && idx[1] == 0 : idx[0] == 0 && idx[1] == 1);
    }
    mvm_router r = {0};
    float sm[4] = {2, 0, 1, -1};
    mvm_router_probs(&r, sm, 4);
    CHECK(fabsf(sm[0] + sm[1] + sm[2] + sm[3] - 1) < 1e-6f && fabsf(sm[0] - .6439f) < 1e-4f);
    r.sigmoid = 1;
    float sg[2] = {0, 2};
    mvm_router_probs(&r, sg, 2);
    CHECK(sg[0] == .5f && fabsf(sg[1] - .8808f) < 1e-4f);
}

/* ---- the engine's choice ---------------------------------------------------------------- */

static char dir[64];

typedef struct agree {
    void *gate, *plain;          /* the gate predictor with the model's rule, and without */
    uint32_t checked, wrong, plain_wrong;
} agree;

/* Layer l's record: its router input, given to the predictor as if from layer l-1, must
 * give the engine's choice (the route module is none: selected is the router's). */
static void on_route(void *ctx, const mvm_route_record *r)
{
    agree *a = ctx;
    if (r->layer == 0)
        return;
    mvm_pstep st = {.layer = r->layer - 1, .n_tok = 1, .hidden = r->hidden};
    void *self[2] = {a->gate, a->plain};
    for (int i = 0; i < 2; i++) {
        float out[64];
        if (mvm_predict_gate.predict(self[i], &st, r->layer, out) != 1) {
            a->wrong++;
            continue;
        }
        uint32_t hits = 0;
        for (uint32_t k = 0; k < r->k; k++)
            hits += out[r->selected[k]] == 1;
        float sum = 0;
        for (uint32_t e = 0; e < r->n_expert; e++)
            sum += out[e];
        int ok = hits == r->k && sum == (float)r->k;
        if (i == 0)
            a->wrong += !ok;
        else
            a->plain_wrong += !ok;
    }
    a->checked++;
}

/* preset/arch, 4 MoE layers of 16 experts, top-4: 48 positions through the engine on the
 * host backend. keyed: the model chooses otherwise than by its logits, so the predictor
 * without the rule must miss some choices (or this test could not tell). */
static void check_agrees(mvm_pool *pool, const char *preset, const char *arch, int keyed)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, preset, arch);
    mvm_model_spec s = mvm_preset_find(preset, arch)->spec;
    s.type = MVM_W_F32;
    s.n_layer = 4 + s.ds.n_dense;
    s.n_expert = 16;
    s.n_expert_used = 4;
    s.seed = 3;
    CHECK_ST(mvm_mkmodel_write(&s, path, pool, NULL, NULL), MVM_OK);
    mvm_space_desc d;
    mvm_space_desc_init(&d);
    d.backend = MVM_BACKEND_HOST;
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    mvm_model_router mr = {0};
    CHECK_ST(mvm_model_load(path, &(mvm_load_args){.desc = &d, .pool = pool}, &m), MVM_OK);
    if (m)
        CHECK_ST(mvm_model_router_init(m, 1, &mr), MVM_OK);
    if (m && mr.r.weights)
        CHECK_ST(mvm_ctx_create(m, pool, 64, 8, NULL, &c), MVM_OK);
    agree a = {0};
    mvm_router plain = {.weights = mr.r.weights, .logit_bias = mr.r.logit_bias};
    if (c) {
        const mvm_pshape sh = {.n_layers = m->hp.n_layer, .n_experts = m->hp.n_expert,
                               .top_k = m->hp.n_expert_used, .n_embd = m->hp.n_embd};
        mvm_pinit in = {.shape = &sh, .router = &mr.r};
        CHECK_ST(mvm_predict_gate.create(&in, &a.gate), MVM_OK);
        in.router = &plain;
        CHECK_ST(mvm_predict_gate.create(&in, &a.plain), MVM_OK);
    }
    if (a.gate && a.plain) {
        mvm_ctx_set_route_observer(c, on_route, &a);
        int32_t tok[48]; /* spread over the vocabulary: 7919 is prime */
        for (uint32_t i = 0; i < 48; i++)
            tok[i] = (int32_t)((i * 7919u + 3) % m->hp.n_vocab);
        CHECK_ST(mvm_ctx_eval(c, tok, 48, NULL, 0), MVM_OK);
    }
    CHECK(a.checked == 48 * 3);
    CHECK(a.wrong == 0);
    CHECK(keyed ? a.plain_wrong > 0 : a.plain_wrong == 0);
    if (a.wrong || (keyed != (a.plain_wrong > 0)))
        fprintf(stderr, "  %s %s, %s kernels: %u of %u routings predicted wrong (%u without "
                "the rule)\n", preset, arch, mvm_k_simd_name(mvm_k_simd_current()), a.wrong,
                a.checked, a.plain_wrong);
    if (a.gate)
        mvm_predict_gate.destroy(a.gate);
    if (a.plain)
        mvm_predict_gate.destroy(a.plain);
    mvm_ctx_free(c);
    mvm_model_router_free(&mr);
    mvm_model_free(m);
    unlink(path);
}

/* At every SIMD level this CPU has: the engine's router matmul sums in another order at
 * each, and the choices must still agree (the routers' margins dwarf the rounding). */
static void test_engine_agrees(void)
{
    mvm_pool *pool = NULL;
    CHECK_ST(mvm_pool_create(2, NULL, &pool), MVM_OK);
    for (int level = 0; level <= (int)mvm_k_simd_detect(); level++) {
        if (mvm_k_simd_use((enum mvm_simd)level) != 0)
            continue; /* the pool's threads are idle between evaluations */
        check_agrees(pool, "tiny", "qwen3moe", 0);   /* softmax */
        check_agrees(pool, "tiny", "gpt-oss", 0);    /* softmax of biased logits */
        check_agrees(pool, "tiny-v2", "deepseek2", 1); /* softmax in groups */
        check_agrees(pool, "tiny-v3", "deepseek2", 1); /* sigmoid + bias in groups */
        check_agrees(pool, "tiny-k2", "deepseek2", 1); /* sigmoid + bias */
        check_agrees(pool, "tiny", "glm4moe", 1);    /* sigmoid + bias */
        check_agrees(pool, "tiny", "minimax-m2", 1); /* sigmoid + bias */
    }
    mvm_k_simd_use(mvm_k_simd_detect());
    mvm_pool_destroy(pool);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/moevm-router-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_key_groups);
    RUN(test_key_rules);
    RUN(test_pick);
    RUN(test_engine_agrees);
    rmdir(dir);
    TEST_END();
}
