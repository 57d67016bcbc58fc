/*
 * The predict modules (policy/predict_*.c) and the learned predictor's file and trainer
 * (policy/predictor_mlp.c, predictor_train.c). Hand-worked cases: gate on a router whose
 * top-k is known per token; residual on a stream with a constant residual update, where it
 * must predict every next routing exactly while gate predicts none of them; learned on a
 * synthetic trace whose next-layer experts are a deterministic function of the previous
 * layer's experts and of the hidden state, where its held-out hit rate must be far above
 * the popularity baseline. Then the predictor file: a round trip (the module reproduces the
 * trainer's held-out hit rate exactly), every truncation and a set of corrupted fields
 * rejected, the shape checked; the cases where a module cannot predict; random invariants
 * of the shares.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "policy/modules.h"
#include "policy/predictor_mlp.h"

static mvm_cost no_cost; /* the predict modules take no costs */

static void *make(const mvm_predict_ops *ops, const mvm_pinit *in)
{
    void *self = NULL;
    CHECK_ST(ops->create(in, &self), MVM_OK);
    return self;
}

static int has(const char *needle) { return strstr(mvm_last_error(), needle) != NULL; }

/* A deterministic stream of uniforms in [0, 1). */
static double rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) * 0x1p-53;
}

/* A step of n tokens: hidden [n][D]; experts/weights only for the learned module. */
static mvm_pstep step_of(uint32_t layer, uint32_t n, const float *hidden, int32_t *experts,
                         float *weights)
{
    return (mvm_pstep){.layer = layer, .n_tok = n, .hidden = hidden, .experts = experts,
                       .weights = weights};
}

/* ---- gate: a hand-made router ------------------------------------------------------------
 * n_embd 2, E 4, top-2. Layer 1's router rows: e0 (1,0), e1 (0,1), e2 (-1,0), e3 (0,-1), so
 * the logits of h = (a, b) are (a, b, -a, -b). Three tokens:
 *   (1, .5)   -> (1, .5, -1, -.5)     top-2 {e0, e1}
 *   (-2, 1)   -> (-2, 1, 2, -1)       top-2 {e2, e1}
 *   (.1, -3)  -> (.1, -3, -.1, 3)     top-2 {e3, e0}
 * Counts e0 2, e1 2, e2 1, e3 1 of 3 tokens: out = (2/3, 2/3, 1/3, 1/3). */
static const float cross[8] = {1, 0, 0, 1, -1, 0, 0, -1};

/* rank (MoEpic's window order): the router's softmax per token, averaged, worked by hand for
 * gate and residual (before its warm-up: gate's). Tokens (1, .5) and (-2, 1): logits
 * (1, .5, -1, -.5) and (-2, 1, 2, -1). The oracle and speculative modules do not rank. */
static void test_rank_hand(void)
{
    const mvm_pshape sh = {.n_layers = 2, .n_experts = 4, .top_k = 2, .n_embd = 2};
    const float *routers[2] = {cross, cross};
    mvm_router rt = {.weights = routers};
    mvm_pinit in = {.shape = &sh, .cost = &no_cost, .router = &rt};
    const float h[4] = {1, .5f, -2, 1};
    const double z[2][4] = {{1, .5, -1, -.5}, {-2, 1, 2, -1}};
    double want[4] = {0};
    for (int t = 0; t < 2; t++) {
        double sum = 0;
        for (int e = 0; e < 4; e++)
            sum += exp(z[t][e]);
        for (int e = 0; e < 4; e++)
            want[e] += exp(z[t][e]) / sum / 2;
    }
    const mvm_predict_ops *ops[] = {&mvm_predict_gate, &mvm_predict_residual};
    for (size_t i = 0; i < 2; i++) {
        void *g = make(ops[i], &in);
        if (!g)
            continue;
        float out[4] = {7, 7, 7, 7};
        mvm_pstep st = step_of(0, 2, h, NULL, NULL);
        CHECK(ops[i]->rank(g, &st, 1, out) == 1);
        for (int e = 0; e < 4; e++)
            CHECK(fabs(out[e] - want[e]) < 1e-6);
        float poison[4] = {7, 7, 7, 7};
        st = step_of(0, 2, NULL, NULL, NULL);
        CHECK(ops[i]->rank(g, &st, 1, poison) == 0 && poison[0] == 7); /* no hidden state */
        ops[i]->destroy(g);
    }
    CHECK(mvm_predict_oracle.rank == NULL && mvm_predict_speculative.rank == NULL);
}

static void test_gate_hand(void)
{
    const mvm_pshape sh = {.n_layers = 2, .n_experts = 4, .top_k = 2, .n_embd = 2};
    const float *routers[2] = {cross, cross};
    mvm_router rt = {.weights = routers};
    mvm_pinit in = {.shape = &sh, .cost = &no_cost, .router = &rt};
    void *g = make(&mvm_predict_gate, &in);
    if (!g)
        return;
    const float h[6] = {1, .5f, -2, 1, .1f, -3};
    float out[4] = {7, 7, 7, 7};
    mvm_pstep st = step_of(0, 3, h, NULL, NULL);
    CHECK(mvm_predict_gate.predict(g, &st, 1, out) == 1);
    CHECK(out[0] == 2.0f / 3 && out[1] == 2.0f / 3 && out[2] == 1.0f / 3 && out[3] == 1.0f / 3);
    /* One token alone: its own top-2. */
    st.n_tok = 1;
    st.hidden = h + 2;
    CHECK(mvm_predict_gate.predict(g, &st, 1, out) == 1);
    CHECK(out[0] == 0 && out[1] == 1 && out[2] == 1 && out[3] == 0);

    /* Cannot predict: out untouched. */
    float poison[4] = {7, 7, 7, 7};
    st = step_of(0, 3, NULL, NULL, NULL);
    CHECK(mvm_predict_gate.predict(g, &st, 1, poison) == 0); /* no hidden state */
    st = step_of(0, 3, h, NULL, NULL);
    CHECK(mvm_predict_gate.predict(g, &st, 0, poison) == 0); /* target == layer */
    CHECK(mvm_predict_gate.predict(g, &st, 2, poison) == 0); /* target >= n_layers */
    CHECK(mvm_predict_gate.predict(g, &st, UINT32_MAX, poison) == 0);
    st = step_of(1, 3, h, NULL, NULL);
    CHECK(mvm_predict_gate.predict(g, &st, 1, poison) == 0); /* target before the step */
    st = step_of(0, 0, h, NULL, NULL);
    CHECK(mvm_predict_gate.predict(g, &st, 1, poison) == 0); /* no tokens */
    CHECK(poison[0] == 7 && poison[1] == 7 && poison[2] == 7 && poison[3] == 7);
    mvm_predict_gate.destroy(g);

    /* A missing router: that layer cannot be predicted. */
    const float *partial[2] = {cross, NULL};
    rt.weights = partial;
    g = make(&mvm_predict_gate, &in);
    st = step_of(0, 3, h, NULL, NULL);
    if (g) {
        CHECK(mvm_predict_gate.predict(g, &st, 1, poison) == 0);
        mvm_predict_gate.destroy(g);
    }
}

/* ---- speculative (SMoE §IV-C): the top-score experts of the next layer's input -----------
 * The same router (softmax). Next-layer inputs, their probabilities and S_{k+1} (the third):
 *   (2, .1)   logits (2, .1, -2, -.1): top-2 {e0, e1}; p1/p3 = e^.2 = 1.22, p0/p3 = e^2.1
 *   (.1, -3)  logits (.1, -3, -.1, 3): top-2 {e3, e0}; p0/p2 = e^.2, p3/p2 = e^3.1
 * so at α 0.3 only e0 of the first and e3 of the second are top-score; at α 0.2 all four
 * selections are. step->hidden (the layer's own input) plays no part. */
static mvm_status make_speculative(const char *args, void **self)
{
    static const mvm_pshape sh = {.n_layers = 3, .n_experts = 4, .top_k = 2, .n_embd = 2};
    static const float *routers[3] = {cross, cross, cross};
    static const mvm_router rt = {.weights = routers};
    mvm_pinit in = {.shape = &sh, .cost = &no_cost, .router = &rt, .params = {args}};
    *self = NULL;
    return mvm_predict_speculative.create(&in, self);
}

static void test_speculative_hand(void)
{
    const float next[4] = {2, .1f, .1f, -3}, own[4] = {-5, 0, 0, 5};
    void *sp = NULL;
    float out[4] = {7, 7, 7, 7};
    CHECK(mvm_predict_speculative.speculative && !mvm_predict_gate.speculative);
    CHECK_ST(make_speculative(NULL, &sp), MVM_OK); /* α 0.3 */
    mvm_pstep st = step_of(0, 2, own, NULL, NULL);
    st.next_hidden = next;
    CHECK(sp && mvm_predict_speculative.predict(sp, &st, 1, out) == 1);
    CHECK(out[0] == 0.5f && out[1] == 0 && out[2] == 0 && out[3] == 0.5f);
    st.n_tok = 1;
    CHECK(sp && mvm_predict_speculative.predict(sp, &st, 1, out) == 1);
    CHECK(out[0] == 1 && out[1] == 0 && out[2] == 0 && out[3] == 0);
    /* cannot predict, out untouched: no speculative pass ran, a layer other than the next,
     * no tokens */
    float poison[4] = {7, 7, 7, 7};
    st = step_of(0, 2, own, NULL, NULL);
    CHECK(sp && mvm_predict_speculative.predict(sp, &st, 1, poison) == 0);
    st.next_hidden = next;
    CHECK(sp && mvm_predict_speculative.predict(sp, &st, 2, poison) == 0);
    CHECK(sp && mvm_predict_speculative.predict(sp, &st, 0, poison) == 0);
    st.n_tok = 0;
    CHECK(sp && mvm_predict_speculative.predict(sp, &st, 1, poison) == 0);
    CHECK(poison[0] == 7 && poison[1] == 7 && poison[2] == 7 && poison[3] == 7);
    mvm_predict_speculative.destroy(sp);

    CHECK_ST(make_speculative("alpha=0.2", &sp), MVM_OK);
    st = step_of(1, 2, own, NULL, NULL);
    st.next_hidden = next;
    CHECK(sp && mvm_predict_speculative.predict(sp, &st, 2, out) == 1);
    CHECK(out[0] == 1 && out[1] == 0.5f && out[2] == 0 && out[3] == 0.5f);
    mvm_predict_speculative.destroy(sp);

    CHECK_ST(make_speculative("alpha=1.5", &sp), MVM_ERR_INVALID);
    CHECK(has("alpha=1.5 is not in [0, 1]"));
    CHECK_ST(make_speculative("beta=1", &sp), MVM_ERR_INVALID);
    CHECK(has("beta"));
    const mvm_pshape sh = {.n_layers = 3, .n_experts = 4, .top_k = 2, .n_embd = 2};
    mvm_pinit in = {.shape = &sh, .cost = &no_cost};
    CHECK_ST(mvm_predict_speculative.create(&in, &sp), MVM_ERR_INVALID);
    CHECK(has("router weights"));
}

/* gate, and residual before its warm-up, on layer 0's three tokens h[3][2] for layer 1:
 * out must be want. */
static void predicts_both(const mvm_pinit *in, const float *h, const float want[4])
{
    const mvm_predict_ops *ops[] = {&mvm_predict_gate, &mvm_predict_residual};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        void *p = make(ops[i], in);
        if (!p)
            continue;
        float out[4] = {7, 7, 7, 7};
        mvm_pstep st = step_of(0, 3, h, NULL, NULL);
        CHECK(ops[i]->predict(p, &st, 1, out) == 1);
        CHECK(out[0] == want[0] && out[1] == want[1] && out[2] == want[2] && out[3] == want[3]);
        ops[i]->destroy(p);
    }
}

/* A router bias (gpt-oss) shifts the logits before the top-k: the hand-made case above with
 * layer 1's bias (0, 0, 0, 2.5) (layer 0's row NULL: none). Logits plus bias:
 *   (1, .5, -1, 2)      top-2 {e3, e0}
 *   (-2, 1, 2, 1.5)     top-2 {e2, e3}
 *   (.1, -3, -.1, 5.5)  top-2 {e3, e0}
 * out = (2/3, 0, 1/3, 1), from gate and from residual before its warm-up.
 * A choose bias (DeepSeek-V3) of (0, 0, .5, 0) on a sigmoid router is added to the
 * sigmoids, which the logits' order does not show:
 *   (.731, .622, .269, .378) + bias: (.731, .622, .769, .378)  top-2 {e2, e0}
 *   (.119, .731, .881, .269)         (.119, .731, 1.381, .269) top-2 {e2, e1}
 *   (.525, .047, .475, .953)         (.525, .047, .975, .953)  top-2 {e2, e3}
 * out = (1/3, 1/3, 1, 1/3); by the logits alone it would be test_gate_hand's, and with
 * the bias added to the logits (1/3, 2/3, 2/3, 1/3). */
static void test_router_bias(void)
{
    const mvm_pshape sh = {.n_layers = 2, .n_experts = 4, .top_k = 2, .n_embd = 2};
    const float *routers[2] = {cross, cross};
    static const float b1[4] = {0, 0, 0, 2.5f};
    const float *bias[2] = {NULL, b1};
    mvm_router rt = {.weights = routers, .logit_bias = bias};
    mvm_pinit in = {.shape = &sh, .cost = &no_cost, .router = &rt};
    const float h[6] = {1, .5f, -2, 1, .1f, -3};
    static const float want[4] = {2.0f / 3, 0, 1.0f / 3, 1};
    predicts_both(&in, h, want);
    static const float c1[4] = {0, 0, .5f, 0};
    const float *choose[2] = {NULL, c1};
    rt = (mvm_router){.weights = routers, .choose_bias = choose, .sigmoid = 1};
    static const float want_chosen[4] = {1.0f / 3, 1.0f / 3, 1, 1.0f / 3};
    predicts_both(&in, h, want_chosen);
}

static void test_create_errors(void)
{
    const mvm_pshape sh = {.n_layers = 2, .n_experts = 4, .top_k = 2, .n_embd = 2};
    const float *routers[2] = {cross, cross};
    mvm_pinit in = {.shape = &sh, .cost = &no_cost};
    void *self = (void *)&in;
    CHECK_ST(mvm_predict_gate.create(&in, &self), MVM_ERR_INVALID);
    CHECK(self == NULL);
    CHECK(has("predict gate: needs the model's router weights (give a GGUF model)"));
    CHECK_ST(mvm_predict_residual.create(&in, &self), MVM_ERR_INVALID);
    CHECK(has("predict residual") && has("router weights"));
    CHECK_ST(mvm_predict_learned.create(&in, &self), MVM_ERR_INVALID);
    CHECK(has("predict learned: no predictor weights (train one with `moevm train-predictor`, "
              "pass --predictor FILE)"));
    const mvm_router biases_only = {.sigmoid = 1}; /* the engine's, when no module asked */
    in.router = &biases_only;
    CHECK_ST(mvm_predict_gate.create(&in, &self), MVM_ERR_INVALID);
    CHECK_ST(mvm_predict_residual.create(&in, &self), MVM_ERR_INVALID);
    mvm_router rt = {.weights = routers};
    in.router = &rt;
    in.params.text = "x=1";
    CHECK_ST(mvm_predict_gate.create(&in, &self), MVM_ERR_INVALID);
    CHECK(has("predict gate") && has("'x'"));
    in.params.text = "warmup=-1";
    CHECK_ST(mvm_predict_residual.create(&in, &self), MVM_ERR_INVALID);
    CHECK(has("warmup"));
    in.params.text = "max_tokens=0";
    CHECK_ST(mvm_predict_residual.create(&in, &self), MVM_ERR_INVALID);
    CHECK(has("max_tokens"));
    in.params.text = "warmup=2.5";
    CHECK_ST(mvm_predict_residual.create(&in, &self), MVM_ERR_INVALID);
    in.params.text = NULL;
    const mvm_pshape bad = {.n_layers = 2, .n_experts = 4, .top_k = 5, .n_embd = 2};
    in.shape = &bad;
    CHECK_ST(mvm_predict_gate.create(&in, &self), MVM_ERR_INVALID);
    CHECK(has("top_k"));
}

/* ---- residual: a constant update ----------------------------------------------------------
 * n_embd 2, E 4, top-1, three layers, both routers the cross above (logits of (a, b) are
 * (a, b, -a, -b)). Each token: h0 = (1 + u, v) with u in [0, 1), v in [-.4, .4]; then
 * h1 = h0 + (-3, 0) and h2 = h1 + (0, -3). The true routings:
 *   layer 1, h1 = (u - 2, v):      logits (u-2, v, 2-u, -v), 2-u >= 1 > |v|      -> e2
 *   layer 2, h2 = (u - 2, v - 3):  (u-2, v-3, 2-u, 3-v), 3-v >= 2.6 > 2 >= 2-u  -> e3
 * Gate from layer 0: h0's logits (1+u, v, -1-u, -v) -> e0 for target 1 and for target 2;
 * gate from layer 1 to 2: h1's -> e2. All wrong. Residual once calibrated: the mean
 * residuals are exactly (-3, 0) and (0, -3), so h0 + r0 = h1, h0 + r0 + r1 = h2 and
 * h1 + r1 = h2: every prediction right. */
typedef struct stream {
    float h[3][64][2]; /* [layer][token][dim] */
} stream;

static void stream_fill(stream *s, uint32_t n, uint64_t *rng)
{
    for (uint32_t t = 0; t < n; t++) {
        s->h[0][t][0] = 1 + (float)rnd(rng);
        s->h[0][t][1] = (float)(rnd(rng) * .8 - .4);
        s->h[1][t][0] = s->h[0][t][0] - 3;
        s->h[1][t][1] = s->h[0][t][1];
        s->h[2][t][0] = s->h[1][t][0];
        s->h[2][t][1] = s->h[1][t][1] - 3;
    }
}

/* Observes n tokens (one batch) through layers 0, 1, 2. */
static void stream_observe(void *r, const stream *s, uint32_t n)
{
    for (uint32_t l = 0; l < 3; l++) {
        mvm_pstep st = step_of(l, n, &s->h[l][0][0], NULL, NULL);
        mvm_predict_residual.observe(r, &st);
    }
}

/* The expert a one-token prediction from `layer` to `target` puts first (4 when none). */
static uint32_t predicted(const mvm_predict_ops *ops, void *self, const float *h,
                          uint32_t layer, uint32_t target)
{
    float out[4] = {0};
    mvm_pstep st = step_of(layer, 1, h, NULL, NULL);
    if (ops->predict(self, &st, target, out) != 1)
        return 4;
    for (uint32_t e = 0; e < 4; e++)
        if (out[e] == 1)
            return e;
    return 4;
}

static void test_residual_constant(void)
{
    const mvm_pshape sh = {.n_layers = 3, .n_experts = 4, .top_k = 1, .n_embd = 2};
    const float *routers[3] = {cross, cross, cross};
    mvm_router rt = {.weights = routers};
    mvm_pinit in = {.shape = &sh, .cost = &no_cost, .router = &rt};
    void *r = make(&mvm_predict_residual, &in), *g = make(&mvm_predict_gate, &in);
    if (!r || !g)
        return;
    uint64_t rng = 1;
    static stream s;
    /* 15 tokens: below the warm-up of 16, residual still predicts as gate. */
    for (int i = 0; i < 15; i++) {
        stream_fill(&s, 1, &rng);
        CHECK(predicted(&mvm_predict_residual, r, s.h[0][0], 0, 1) == 0);
        stream_observe(r, &s, 1);
    }
    stream_fill(&s, 1, &rng);
    stream_observe(r, &s, 1); /* the 16th */
    int gate_right = 0, residual_wrong = 0;
    for (int i = 0; i < 50; i++) {
        stream_fill(&s, 1, &rng);
        residual_wrong += predicted(&mvm_predict_residual, r, s.h[0][0], 0, 1) != 2;
        residual_wrong += predicted(&mvm_predict_residual, r, s.h[0][0], 0, 2) != 3;
        residual_wrong += predicted(&mvm_predict_residual, r, s.h[1][0], 1, 2) != 3;
        gate_right += predicted(&mvm_predict_gate, g, s.h[0][0], 0, 1) == 2;
        gate_right += predicted(&mvm_predict_gate, g, s.h[0][0], 0, 2) == 3;
        gate_right += predicted(&mvm_predict_gate, g, s.h[1][0], 1, 2) == 3;
        stream_observe(r, &s, 1);
    }
    CHECK(residual_wrong == 0);
    CHECK(gate_right == 0);
    mvm_predict_residual.destroy(r);
    mvm_predict_gate.destroy(g);
}

/* Batches: max_tokens 4 and warm-up 8, batches of 8 tokens pair their first 4 each, so two
 * batches calibrate and one does not. Pairing needs layer l+1 right after l with the same
 * n_tok: steps that break it calibrate nothing. */
static void test_residual_pairing(void)
{
    const mvm_pshape sh = {.n_layers = 3, .n_experts = 4, .top_k = 1, .n_embd = 2};
    const float *routers[3] = {cross, cross, cross};
    mvm_router rt = {.weights = routers};
    mvm_pinit in = {.shape = &sh, .cost = &no_cost, .router = &rt,
                    .params = {"max_tokens=4,warmup=8"}};
    static stream s;
    uint64_t rng = 7;
    void *r = make(&mvm_predict_residual, &in);
    if (!r)
        return;
    /* and one whose layer-1 router has a bias (gpt-oss) large enough to win: it is added
     * to the calibrated correction, not lost in it */
    static const float b1[4] = {50, 0, 0, 0};
    const float *bias[3] = {NULL, b1, NULL};
    mvm_router rtb = {.weights = routers, .logit_bias = bias};
    mvm_pinit inb = in;
    inb.router = &rtb;
    void *rb = make(&mvm_predict_residual, &inb);
    stream_fill(&s, 8, &rng);
    stream_observe(r, &s, 8);
    CHECK(predicted(&mvm_predict_residual, r, s.h[0][0], 0, 1) == 0); /* 4 samples */
    stream_observe(r, &s, 8);
    CHECK(predicted(&mvm_predict_residual, r, s.h[0][0], 0, 1) == 2); /* 8 */
    if (rb) {
        stream_observe(rb, &s, 8);
        stream_observe(rb, &s, 8);
        CHECK(predicted(&mvm_predict_residual, rb, s.h[0][0], 0, 1) == 0);
        CHECK(predicted(&mvm_predict_residual, rb, s.h[1][0], 1, 2) == 3); /* no bias there */
        mvm_predict_residual.destroy(rb);
    }
    float out[4];
    mvm_pstep st = step_of(0, 8, &s.h[0][0][0], NULL, NULL);
    CHECK(mvm_predict_residual.predict(r, &st, 1, out) == 1);
    CHECK(out[0] == 0 && out[1] == 0 && out[2] == 1 && out[3] == 0);
    CHECK(predicted(&mvm_predict_residual, r, s.h[1][0], 1, 2) == 3); /* r1 too */
    mvm_predict_residual.destroy(r);

    r = make(&mvm_predict_residual, &in);
    if (!r)
        return;
    for (int i = 0; i < 20; i++) {
        mvm_pstep a = step_of(0, 2, &s.h[0][0][0], NULL, NULL);
        mvm_pstep b = step_of(1, 3, &s.h[1][0][0], NULL, NULL); /* other tokens */
        mvm_pstep c = step_of(0, 2, &s.h[0][0][0], NULL, NULL);
        mvm_pstep d = step_of(2, 2, &s.h[2][0][0], NULL, NULL); /* skips layer 1 */
        mvm_pstep e = step_of(0, 2, NULL, NULL, NULL);          /* no hidden state */
        mvm_pstep f = step_of(1, 2, &s.h[1][0][0], NULL, NULL);
        mvm_predict_residual.observe(r, &a);
        mvm_predict_residual.observe(r, &b);
        mvm_predict_residual.observe(r, &c);
        mvm_predict_residual.observe(r, &d);
        mvm_predict_residual.observe(r, &e);
        mvm_predict_residual.observe(r, &f);
    }
    CHECK(predicted(&mvm_predict_residual, r, s.h[0][0], 0, 1) == 0); /* still gate */
    CHECK(predicted(&mvm_predict_residual, r, s.h[1][0], 1, 2) == 2);
    mvm_predict_residual.destroy(r);
}

/* ---- learned: a synthetic trace with a learnable rule ------------------------------------
 * L 4, E 8, top-2, n_embd 16. Hidden states uniform in [-1, 1] per dimension, dimension 0
 * scaled by 3 (so the PCA keeps it). Layer 0 picks two distinct experts uniformly; layer
 * l+1's experts are layer l's shifted by s = 1 if h_l[0] > 0, else 4 (mod 8), same order and
 * weights (.6, .4). Every layer's experts are then about uniform (the popularity baseline
 * hits ~2/8), the previous layer's ids come back only when its two experts are s apart
 * (then one of them); the model must learn the rule, a function of the multi-hot and of one
 * PCA feature's sign. */
enum { SL = 4, SE = 8, SK = 2, SD = 16, SN = 1000 };

typedef struct synth {
    float hidden[SN][SL][SD];
    int32_t experts[SN][SL][SK];
    float weights[SN][SL][SK];
} synth;

/* The rule with shifts `up` (h_l[0] > 0) and `down` instead of 1 and 4. */
static void synth_fill_rule(synth *s, uint32_t n, uint64_t seed, int up, int down)
{
    uint64_t rng = seed;
    for (uint32_t t = 0; t < n; t++)
        for (int l = 0; l < SL; l++) {
            for (int i = 0; i < SD; i++)
                s->hidden[t][l][i] = (float)(2 * rnd(&rng) - 1) * (i == 0 ? 3 : 1);
            s->weights[t][l][0] = .6f;
            s->weights[t][l][1] = .4f;
            if (l == 0) { /* two distinct experts, uniformly */
                int a = (int)(rnd(&rng) * SE);
                s->experts[t][0][0] = a;
                s->experts[t][0][1] = (a + 1 + (int)(rnd(&rng) * (SE - 1))) % SE;
                continue;
            }
            int shift = s->hidden[t][l - 1][0] > 0 ? up : down;
            for (int j = 0; j < SK; j++)
                s->experts[t][l][j] = (s->experts[t][l - 1][j] + shift) % SE;
        }
}

static void synth_fill(synth *s, uint32_t n, uint64_t seed)
{
    synth_fill_rule(s, n, seed, 1, 4);
}

static mvm_predictor_data synth_data(const synth *s, uint32_t n)
{
    return (mvm_predictor_data){.n_layers = SL, .n_experts = SE, .top_k = SK, .n_embd = SD,
                                .n_tokens = n, .hidden = &s->hidden[0][0][0],
                                .experts = &s->experts[0][0][0],
                                .weights = &s->weights[0][0][0]};
}

static void synth_opts(mvm_predictor_train_opts *o)
{
    mvm_predictor_train_defaults(o);
    o->rank = 8;
    o->hidden = 32;
    o->epochs = 20;
    o->batch = 16;
    o->holdout = 0.25;
    o->seed = 42;
}

/* Held-out hit rate of the learned module itself on tokens [from, n), one token a step. */
static double module_hit(void *self, synth *s, uint32_t from, uint32_t n, uint32_t t)
{
    double hit = 0;
    for (uint32_t tok = from; tok < n; tok++) {
        float out[SE];
        mvm_pstep st = step_of(t - 1, 1, s->hidden[tok][t - 1], s->experts[tok][t - 1],
                               s->weights[tok][t - 1]);
        if (mvm_predict_learned.predict(self, &st, t, out) != 1)
            return -1;
        float sum = 0;
        for (int e = 0; e < SE; e++)
            sum += out[e];
        CHECK(sum == SK);
        for (int j = 0; j < SK; j++)
            hit += out[s->experts[tok][t][j]] / SK;
    }
    return hit / (n - from);
}

static void test_learned_synthetic(void)
{
    static synth s;
    synth_fill(&s, SN, 3);
    mvm_predictor_data d = synth_data(&s, SN);
    mvm_predictor_train_opts o;
    synth_opts(&o);
    mvm_predictor_eval ev[SL];
    void *blob = NULL;
    size_t size = 0;
    CHECK_ST(mvm_predictor_train(&d, &o, ev, &blob, &size), MVM_OK);
    if (!blob)
        return;
    CHECK(ev[0].n_train == 0 && ev[0].n_test == 0); /* no model for layer 0 */
    for (int t = 1; t < SL; t++) {
        fprintf(stderr, "  layer %d (%s, rank %u): loss %.4f, hit %.3f, previous layer %.3f, "
                "popularity %.3f\n", t, ev[t].kind ? "gated" : "shallow", ev[t].rank,
                ev[t].loss, ev[t].hit, ev[t].hit_prev, ev[t].hit_pop);
        CHECK(ev[t].n_train == 750 && ev[t].n_test == 250);
        CHECK(ev[t].hit > 0.9);
        CHECK(ev[t].hit_pop < 0.5);
        CHECK(ev[t].hit_prev < 0.5);
    }
    /* Groups of L = 4: ceil(.15·4) = 1 layer at each end; targets 1, 2 middle, 3 output. */
    CHECK(ev[1].kind == MVM_PREDICTOR_GATED && ev[1].rank == 8);
    CHECK(ev[2].kind == MVM_PREDICTOR_GATED && ev[3].kind == MVM_PREDICTOR_SHALLOW);
    CHECK(ev[3].rank == 4);

    /* The round trip: the module's predictions are the trainer's, to the last bit. */
    const mvm_pshape sh = {.n_layers = SL, .n_experts = SE, .top_k = SK, .n_embd = SD};
    mvm_pinit in = {.shape = &sh, .cost = &no_cost, .predictor = blob, .predictor_size = size};
    void *m = make(&mvm_predict_learned, &in);
    if (m) {
        for (uint32_t t = 1; t < SL; t++)
            CHECK(module_hit(m, &s, 750, SN, t) == ev[t].hit);
        /* A batch's shares are the mean of its tokens' single predictions. */
        float batch[SE], one[SE], mean[SE] = {0};
        float hid[5][SD];
        int32_t ex[5][SK];
        float w[5][SK];
        for (int i = 0; i < 5; i++) {
            memcpy(hid[i], s.hidden[500 + i][1], sizeof hid[i]);
            memcpy(ex[i], s.experts[500 + i][1], sizeof ex[i]);
            memcpy(w[i], s.weights[500 + i][1], sizeof w[i]);
            mvm_pstep one_st = step_of(1, 1, hid[i], ex[i], w[i]);
            CHECK(mvm_predict_learned.predict(m, &one_st, 2, one) == 1);
            for (int e = 0; e < SE; e++)
                mean[e] += one[e];
        }
        mvm_pstep st = step_of(1, 5, &hid[0][0], &ex[0][0], &w[0][0]);
        CHECK(mvm_predict_learned.predict(m, &st, 2, batch) == 1);
        for (int e = 0; e < SE; e++)
            CHECK(batch[e] == mean[e] / 5);

        /* Cannot predict: out untouched. */
        float poison[SE];
        for (int e = 0; e < SE; e++)
            poison[e] = 7;
        CHECK(mvm_predict_learned.predict(m, &st, 3, poison) == 0); /* not layer + 1 */
        CHECK(mvm_predict_learned.predict(m, &st, 1, poison) == 0);
        st.layer = 3;
        CHECK(mvm_predict_learned.predict(m, &st, 4, poison) == 0); /* past the last layer */
        st.layer = 1;
        st.hidden = NULL;
        CHECK(mvm_predict_learned.predict(m, &st, 2, poison) == 0);
        st.hidden = &hid[0][0];
        st.weights = NULL;
        CHECK(mvm_predict_learned.predict(m, &st, 2, poison) == 0);
        st.weights = &w[0][0];
        st.n_tok = 0;
        CHECK(mvm_predict_learned.predict(m, &st, 2, poison) == 0);
        for (int e = 0; e < SE; e++)
            CHECK(poison[e] == 7);
        mvm_predict_learned.destroy(m);
    }

    /* The shape must be the model's. */
    const mvm_pshape other = {.n_layers = SL, .n_experts = SE, .top_k = SK, .n_embd = SD + 1};
    in.shape = &other;
    void *self = NULL;
    CHECK_ST(mvm_predict_learned.create(&in, &self), MVM_ERR_INVALID);
    CHECK(self == NULL && has("trained for") && has("n_embd=16") && has("n_embd=17"));

    /* Every truncation is an error (strided here: the small blob below tries them all). */
    for (size_t n = 0; n < size; n += n < 64 || size - n < 64 ? 1 : 61) {
        mvm_predictor *p = NULL;
        CHECK_ST(mvm_predictor_parse(blob, n, &sh, &p), MVM_ERR_INVALID);
        CHECK(p == NULL);
    }
    free(blob);
}

/* ---- the file: truncations and corrupted fields ------------------------------------------ */

static void put32(uint8_t *b, size_t at, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[at + i] = (uint8_t)(v >> (8 * i));
}

/* Parses b with field `at` set to v; the status, b restored. */
static mvm_status parse_with(uint8_t *b, size_t size, size_t at, uint32_t v)
{
    uint8_t keep[4];
    memcpy(keep, b + at, 4);
    put32(b, at, v);
    mvm_predictor *p = NULL;
    mvm_status st = mvm_predictor_parse(b, size, NULL, &p);
    CHECK((st == MVM_OK) == (p != NULL));
    mvm_predictor_free(p);
    memcpy(b + at, keep, 4);
    return st;
}

static void test_file(void)
{
    /* A tiny model: L 3, E 4, top-1, n_embd 4, rank 2, hidden 3. ceil(.15·3) = 1 layer per
     * end group: target 1 is middle (gated, rank 2), target 2 output (shallow, rank 1).
     *   layer 1: 12 header bytes + 4·(mu 4 + proj 2·4 + W1 3·(2+4) + b1 3 + W3 9 + b3 3
     *            + W4 9 + b4 3 + Wg 3·2 + bg 3 + W2 4·3 + b2 4) = 12 + 4·82 = 340 bytes
     *   layer 2: 12 + 4·(mu 4 + proj 1·4 + W1 3·(1+4) + b1 3 + W2 12 + b2 4) = 12 + 4·42 = 180
     * the file 28 + 340 + 180 = 548. */
    static synth s;
    synth_fill(&s, 40, 5);
    float hidden[40][3][4];
    int32_t experts[40][3][1];
    float weights[40][3][1];
    for (int t = 0; t < 40; t++)
        for (int l = 0; l < 3; l++) {
            memcpy(hidden[t][l], s.hidden[t][l], sizeof hidden[t][l]);
            experts[t][l][0] = s.experts[t][l][0] % 4;
            weights[t][l][0] = 1;
        }
    mvm_predictor_data d = {.n_layers = 3, .n_experts = 4, .top_k = 1, .n_embd = 4,
                            .n_tokens = 40, .hidden = &hidden[0][0][0],
                            .experts = &experts[0][0][0], .weights = &weights[0][0][0]};
    mvm_predictor_train_opts o;
    mvm_predictor_train_defaults(&o);
    o.rank = 2;
    o.hidden = 3;
    o.epochs = 2;
    void *blob = NULL;
    size_t size = 0;
    CHECK_ST(mvm_predictor_train(&d, &o, NULL, &blob, &size), MVM_OK);
    CHECK(size == 548);
    if (!blob || size != 548) {
        free(blob);
        return;
    }
    uint8_t *b = blob;
    /* Deterministic: the same seed gives the same bytes, another seed others. */
    void *again = NULL;
    size_t size2 = 0;
    CHECK_ST(mvm_predictor_train(&d, &o, NULL, &again, &size2), MVM_OK);
    CHECK(again && size2 == size && memcmp(b, again, size) == 0);
    free(again);
    o.seed++;
    again = NULL;
    CHECK_ST(mvm_predictor_train(&d, &o, NULL, &again, &size2), MVM_OK);
    CHECK(again && size2 == size && memcmp(b, again, size) != 0);
    free(again);

    mvm_predictor *p = NULL;
    CHECK_ST(mvm_predictor_parse(b, size, NULL, &p), MVM_OK);
    if (p)
        CHECK(mvm_predictor_work(p) ==
              2 + 2 * 4 + 9 * 3 + 4); /* the larger layer's r + 2E + 9H, + D */
    mvm_predictor_free(p);

    for (size_t n = 0; n < size; n++) { /* every truncation */
        p = NULL;
        CHECK_ST(mvm_predictor_parse(b, n, NULL, &p), MVM_ERR_INVALID);
        CHECK(p == NULL && strncmp(mvm_last_error(), "predictor: ", 11) == 0);
    }
    uint8_t *longer = malloc(size + 1); /* a byte too many */
    if (longer) {
        memcpy(longer, b, size);
        longer[size] = 0;
        CHECK_ST(mvm_predictor_parse(longer, size + 1, NULL, &p), MVM_ERR_INVALID);
        CHECK(has("1 bytes after the last layer"));
        free(longer);
    }
    CHECK_ST(mvm_predictor_parse(NULL, 0, NULL, &p), MVM_ERR_INVALID);

    /* Header: magic, version 8, L 12, E 16, K 20, D 24; layer 1: kind 28, rank 32, hidden
     * 36, then its reals from 40 (mu[0]); layer 2's header at 28 + 340 = 368. */
    b[3] ^= 1;
    CHECK_ST(mvm_predictor_parse(b, size, NULL, &p), MVM_ERR_INVALID);
    CHECK(has("magic"));
    b[3] ^= 1;
    CHECK(parse_with(b, size, 8, 2) == MVM_ERR_INVALID && has("version 2"));
    CHECK(parse_with(b, size, 12, 1) == MVM_ERR_INVALID && has("L=1"));
    CHECK(parse_with(b, size, 12, 4) == MVM_ERR_INVALID && has("truncated"));
    CHECK(parse_with(b, size, 12, 2) == MVM_ERR_INVALID && has("after the last layer"));
    CHECK(parse_with(b, size, 16, 0) == MVM_ERR_INVALID);
    CHECK(parse_with(b, size, 20, 0) == MVM_ERR_INVALID);
    CHECK(parse_with(b, size, 20, 5) == MVM_ERR_INVALID && has("top_k=5"));
    CHECK(parse_with(b, size, 24, 0) == MVM_ERR_INVALID);
    CHECK(parse_with(b, size, 24, UINT32_MAX) == MVM_ERR_INVALID);
    CHECK(parse_with(b, size, 28, 2) == MVM_ERR_INVALID && has("kind 2"));
    CHECK(parse_with(b, size, 28, 0) == MVM_ERR_INVALID); /* shallow: the rest misread */
    CHECK(parse_with(b, size, 32, 0) == MVM_ERR_INVALID && has("rank 0"));
    CHECK(parse_with(b, size, 32, 5) == MVM_ERR_INVALID && has("rank 5"));
    CHECK(parse_with(b, size, 32, UINT32_MAX) == MVM_ERR_INVALID);
    CHECK(parse_with(b, size, 36, 0) == MVM_ERR_INVALID && has("hidden 0"));
    CHECK(parse_with(b, size, 36, MVM_PREDICTOR_MAX_HIDDEN + 1) == MVM_ERR_INVALID);
    CHECK(parse_with(b, size, 36, MVM_PREDICTOR_MAX_HIDDEN) == MVM_ERR_INVALID &&
          has("truncated"));
    CHECK(parse_with(b, size, 368, 2) == MVM_ERR_INVALID && has("layer 2: kind 2"));
    CHECK(parse_with(b, size, 368, 1) == MVM_ERR_INVALID && has("truncated")); /* gated */
    CHECK(parse_with(b, size, 40, 0x7fc00000u) == MVM_ERR_INVALID && has("not finite")); /* NaN */
    CHECK(parse_with(b, size, size - 4, 0x7f800000u) == MVM_ERR_INVALID); /* +Inf, last real */
    CHECK(parse_with(b, size, size - 4, 0xff800000u) == MVM_ERR_INVALID); /* -Inf */
    CHECK(parse_with(b, size, 40, 0x3f800000u) == MVM_OK);                /* 1.0 is fine */
    const mvm_pshape sh = {.n_layers = 3, .n_experts = 4, .top_k = 1, .n_embd = 4};
    const mvm_pshape wrong_e = {.n_layers = 3, .n_experts = 5, .top_k = 1, .n_embd = 4};
    CHECK_ST(mvm_predictor_parse(b, size, &sh, &p), MVM_OK);
    mvm_predictor_free(p);
    CHECK_ST(mvm_predictor_parse(b, size, &wrong_e, &p), MVM_ERR_INVALID);
    CHECK(has("E=4") && has("E=5"));
    free(blob);
}

/* LLaPor's online fine-tuning: a predictor trained on the rule of shifts (1, 4) meets a run
 * whose rule is now (3, 6). Frozen (tune=0, the default) it keeps predicting the old
 * shifts; tuning every 8 tokens (8 steps at rate 0.003) on the run's own routing, it learns
 * the new rule within the first 600 tokens, and on the rule it was trained on, tuning keeps
 * what it had. Bad parameters are named. */
static void test_learned_tuning(void)
{
    static synth train, drift;
    synth_fill(&train, SN, 3);
    synth_fill_rule(&drift, SN, 5, 3, 6);
    mvm_predictor_data d = synth_data(&train, SN);
    mvm_predictor_train_opts o;
    synth_opts(&o);
    void *blob = NULL;
    size_t size = 0;
    CHECK_ST(mvm_predictor_train(&d, &o, NULL, &blob, &size), MVM_OK);
    if (!blob)
        return;
    const mvm_pshape sh = {.n_layers = SL, .n_experts = SE, .top_k = SK, .n_embd = SD};
    static const char *const params[] = {"", "tune=8,steps=8,lr=0.003"};
    double hit[2][2]; /* [params][drift, trained rule] */
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < 2; r++) {
            synth *s = r == 0 ? &drift : &train;
            mvm_pinit in = {.shape = &sh, .cost = &no_cost, .params = {params[k]},
                            .predictor = blob, .predictor_size = size};
            void *m = make(&mvm_predict_learned, &in);
            for (uint32_t tok = 0; tok < 600; tok++)
                for (uint32_t l = 0; l < SL; l++) {
                    mvm_pstep st = step_of(l, 1, s->hidden[tok][l], s->experts[tok][l],
                                           s->weights[tok][l]);
                    mvm_predict_learned.observe(m, &st);
                }
            hit[k][r] = 0;
            for (uint32_t t = 1; t < SL; t++)
                hit[k][r] += module_hit(m, s, 600, SN, t) / (SL - 1);
            mvm_predict_learned.destroy(m);
        }
    fprintf(stderr, "  new rule: frozen %.3f, tuned %.3f; trained rule: frozen %.3f, tuned %.3f\n",
            hit[0][0], hit[1][0], hit[0][1], hit[1][1]);
    CHECK(hit[0][0] < 0.2 && hit[1][0] > 0.8);
    CHECK(hit[0][1] > 0.9 && hit[1][1] > 0.9);
    static const char *const bad[] = {"tune=-1", "tune=1.5", "samples=0", "batch=300",
                                      "steps=0", "lr=0", "lr=2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mvm_pinit in = {.shape = &sh, .cost = &no_cost, .params = {bad[i]},
                        .predictor = blob, .predictor_size = size};
        void *self = NULL;
        CHECK_ST(mvm_predict_learned.create(&in, &self), MVM_ERR_INVALID);
        CHECK(self == NULL && has("predict learned: "));
    }
    free(blob);
}

/* The trainer rejects what it cannot train on. */
static void test_train_errors(void)
{
    static synth s;
    synth_fill(&s, 20, 9);
    mvm_predictor_data d = synth_data(&s, 20);
    mvm_predictor_train_opts o;
    synth_opts(&o);
    o.epochs = 1;
    void *blob = (void *)&o;
    size_t size = 1;
    mvm_predictor_eval ev[SL];
    CHECK_ST(mvm_predictor_train(&d, &o, ev, &blob, &size), MVM_OK); /* the baseline works */
    CHECK(ev[1].n_test == 5);
    free(blob);
    o.holdout = 0;
    CHECK_ST(mvm_predictor_train(&d, &o, ev, &blob, &size), MVM_OK);
    CHECK(isnan(ev[1].hit) && ev[1].n_test == 0);
    free(blob);
    o.holdout = 0.95;
    CHECK_ST(mvm_predictor_train(&d, &o, NULL, &blob, &size), MVM_ERR_INVALID);
    CHECK(blob == NULL && size == 0 && has("holdout"));
    synth_opts(&o);
    o.hidden = 0;
    CHECK_ST(mvm_predictor_train(&d, &o, NULL, &blob, &size), MVM_ERR_INVALID);
    synth_opts(&o);
    d.n_layers = 1;
    CHECK_ST(mvm_predictor_train(&d, &o, NULL, &blob, &size), MVM_ERR_INVALID);
    CHECK(has("L >= 2"));
    d = synth_data(&s, 1);
    CHECK_ST(mvm_predictor_train(&d, &o, NULL, &blob, &size), MVM_ERR_INVALID);
    d = synth_data(&s, 20);
    s.experts[3][2][1] = SE;
    CHECK_ST(mvm_predictor_train(&d, &o, NULL, &blob, &size), MVM_ERR_INVALID);
    CHECK(has("token 3 layer 2"));
    s.experts[3][2][1] = 0;
    s.hidden[4][1][5] = NAN;
    CHECK_ST(mvm_predictor_train(&d, &o, NULL, &blob, &size), MVM_ERR_INVALID);
    CHECK(has("token 4 layer 1") && has("not finite"));
}

/* ---- random invariants: shares of whole tokens, k per token -------------------------------- */
static void test_random_invariants(void)
{
    uint64_t rng = 11;
    static float routers[4][32 * 16], hidden[4][16 * 16];
    for (int round = 0; round < 200; round++) {
        mvm_pshape sh = {.n_layers = 2 + (uint32_t)(rnd(&rng) * 3),
                         .n_experts = 1 + (uint32_t)(rnd(&rng) * 32),
                         .n_embd = 1 + (uint32_t)(rnd(&rng) * 16)};
        sh.top_k = 1 + (uint32_t)(rnd(&rng) * sh.n_experts);
        uint32_t n = 1 + (uint32_t)(rnd(&rng) * 16);
        const float *rp[4];
        for (uint32_t l = 0; l < sh.n_layers; l++) {
            for (uint32_t i = 0; i < sh.n_experts * sh.n_embd; i++)
                routers[l][i] = (float)(2 * rnd(&rng) - 1);
            rp[l] = routers[l];
        }
        const mvm_predict_ops *ops = round % 3 ? &mvm_predict_residual : &mvm_predict_gate;
        const char *params = ops == &mvm_predict_residual && round % 2 ? "warmup=1,max_tokens=3"
                                                                       : NULL;
        mvm_router rt = {.weights = rp};
        mvm_pinit in = {.shape = &sh, .cost = &no_cost, .router = &rt, .params = {params}};
        void *self = make(ops, &in);
        if (!self)
            continue;
        for (int batch = 0; batch < 3; batch++)
            for (uint32_t l = 0; l < sh.n_layers; l++) {
                for (uint32_t i = 0; i < n * sh.n_embd; i++)
                    hidden[l][i] = (float)(4 * rnd(&rng) - 2);
                mvm_pstep st = step_of(l, n, hidden[l], NULL, NULL);
                for (uint32_t target = l + 1; target < sh.n_layers; target++) {
                    float out[32], sum = 0;
                    CHECK(ops->predict(self, &st, target, out) == 1);
                    for (uint32_t e = 0; e < sh.n_experts; e++) {
                        float c = out[e] * (float)n;
                        CHECK(out[e] >= 0 && out[e] <= 1 && fabsf(c - roundf(c)) < 1e-4f);
                        sum += out[e];
                    }
                    CHECK(fabsf(sum - (float)sh.top_k) < 1e-4f);
                }
                if (ops->observe)
                    ops->observe(self, &st);
            }
        ops->destroy(self);
    }
}

int main(void)
{
    RUN(test_gate_hand);
    RUN(test_rank_hand);
    RUN(test_speculative_hand);
    RUN(test_router_bias);
    RUN(test_create_errors);
    RUN(test_residual_constant);
    RUN(test_residual_pairing);
    RUN(test_learned_synthetic);
    RUN(test_learned_tuning);
    RUN(test_file);
    RUN(test_train_errors);
    RUN(test_random_invariants);
    TEST_END();
}
