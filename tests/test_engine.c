/*
 * The engine around the kernels: model loading and its errors, the thread pool, and
 * properties of the forward pass that must hold whatever the
 * numbers are — reproducible for a thread count, the same logits whatever the experts'
 * residency, batched prefill equal to token-by-token decoding, close across thread
 * counts, routing traces consistent with the routing. Numerical correctness against an
 * independent reference is tests/ref/check_forward.py.
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gguf_mutant.h"
#include "engine/compute/pool.h"
#include "engine/forward/forward.h"
#include "engine/forward/kv_cache.h"
#include "engine/forward/residency.h"
#include "engine/gguf/gguf_write.h"
#include "engine/model/model.h"
#include "engine/plan/plan.h"
#include "engine/synth/mkmodel.h"
#include "engine/tokenizer/tokenizer.h"
#include "tools/trace_out.h"

static char dir[64];
static mvm_pool *pool; /* 2 threads, shared by the tests that do not choose their own */
static const char *arches[] = {"llama",     "qwen2moe", "qwen3moe",   "olmoe",
                               "deepseek2", "glm4moe",  "minimax-m2", "gpt-oss"};
#define N_ARCHES (sizeof arches / sizeof *arches)

static const char *in_dir(const char *name)
{
    static char paths[8][160];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 160, "%s/%s", dir, name);
    return p;
}

static const char *tiny_path(const char *arch, enum mvm_wtype t)
{
    static char name[64];
    snprintf(name, sizeof name, "tiny-%s-%d.gguf", arch, (int)t);
    return in_dir(name);
}

static void make_tiny(const char *arch, enum mvm_wtype t)
{
    mvm_model_spec s = mvm_preset_find("tiny", arch)->spec;
    s.type = t;
    s.seed = 7;
    CHECK_ST(mvm_mkmodel_write(&s, tiny_path(arch, t), pool, NULL, NULL), MVM_OK);
}

static mvm_status load(const char *path, const char *budget, mvm_pool *p, mvm_model **m)
{
    mvm_space_desc d;
    mvm_space_desc_init(&d);
    d.backend = MVM_BACKEND_HOST;
    d.page_size = 4096;
    if (budget) {
        d.device_budget = 0;
        d.device_budget_frac = atof(budget);
    }
    return mvm_model_load(path, &(mvm_load_args){.desc = &d, .pool = p}, m);
}

/* ---- the pool ------------------------------------------------------------------------- */

struct pool_probe {
    atomic_int calls[8];
    atomic_int bad;
};

static void probe_run(void *p, int t, int nth)
{
    struct pool_probe *pp = p;
    if (t < 0 || t >= nth || nth > 8)
        atomic_fetch_add(&pp->bad, 1);
    else
        atomic_fetch_add(&pp->calls[t], 1);
}

static void test_pool(void)
{
    for (int n = 1; n <= 4; n++) {
        mvm_pool *p;
        CHECK_ST(mvm_pool_create(n, NULL, &p), MVM_OK);
        struct pool_probe pp = {0};
        for (int r = 0; r < 3000; r++)
            mvm_pool_run(p, probe_run, &pp);
        /* A long pause lets the workers fall asleep; the next run must wake them. */
        usleep(60000);
        mvm_pool_run(p, probe_run, &pp);
        CHECK(atomic_load(&pp.bad) == 0);
        for (int t = 0; t < n; t++)
            CHECK(atomic_load(&pp.calls[t]) == 3001);
        mvm_pool_destroy(p);
    }
    mvm_pool *p;
    CHECK_ST(mvm_pool_create(0, NULL, &p), MVM_ERR_INVALID);
    size_t covered = 0, prev_end = 0;
    for (int t = 0; t < 7; t++) {
        size_t b, e;
        mvm_pool_split(100, t, 7, &b, &e);
        CHECK(b == prev_end && e >= b);
        covered += e - b;
        prev_end = e;
    }
    CHECK(covered == 100);
}

/* A shared run: every item counted once; thread `slow` sleeps before each chunk of its
 * own, so the others take the back of its slice. */
struct share_probe {
    mvm_pool *pool;
    size_t chunk;
    int slow;
    atomic_int seen[1000];
    atomic_int by[4];           /* items each thread took */
    atomic_int bad;             /* a range empty, reversed or past the items */
    size_t n;
};

static void share_run(void *p, int t, int nth)
{
    struct share_probe *sp = p;
    (void)nth;
    size_t b, e;
    while (mvm_pool_take(sp->pool, t, sp->chunk, &b, &e)) {
        if (b >= e || e > sp->n || e - b > sp->chunk)
            atomic_fetch_add(&sp->bad, 1);
        if (t == sp->slow)
            usleep(5000);
        for (size_t i = b; i < e && i < sp->n; i++)
            atomic_fetch_add(&sp->seen[i], 1);
        atomic_fetch_add(&sp->by[t], (int)(e - b));
    }
}

static void test_pool_share(void)
{
    for (int n = 1; n <= 4; n++) {
        mvm_pool *p;
        CHECK_ST(mvm_pool_create(n, NULL, &p), MVM_OK);
        for (int slow = -1; slow < (n > 1 ? n : 0); slow++) {
            const size_t starts[4] = {0, 10, 10, 700}; /* thread 1's empty with 3 or more */
            struct share_probe sp = {.pool = p, .chunk = (size_t)(slow + 2) * 3, .slow = slow,
                                     .n = slow == 0 ? 1000 : 997};
            mvm_pool_share(p, sp.n, n >= 3 && slow == 1 ? starts : NULL);
            mvm_pool_run(p, share_run, &sp);
            int once = 1;
            for (size_t i = 0; i < sp.n; i++)
                once &= atomic_load(&sp.seen[i]) == 1;
            CHECK(once);
            CHECK(atomic_load(&sp.bad) == 0);
            /* a thread that sleeps 5 ms a chunk of 3..15 items is left with few of its own
             * quarter or more: the others, not sleeping, take the rest of it */
            if (slow >= 0)
                CHECK(atomic_load(&sp.by[slow]) < (int)(sp.n / (size_t)n) / 2);
        }
        mvm_pool_destroy(p);
    }
}

/* The affinity of the thread that calls this; none when it cannot be read (no CHECK here:
 * pool workers call it at once, and check.h's counts are not atomic). */
static cpu_set_t my_cpus(void)
{
    cpu_set_t s;
    if (pthread_getaffinity_np(pthread_self(), sizeof s, &s) != 0)
        CPU_ZERO(&s);
    return s;
}

static void *report_cpus(void *out)
{
    *(cpu_set_t *)out = my_cpus();
    return NULL;
}

static void nothing(void *p, int t, int nth) { (void)p, (void)t, (void)nth; }

/* Made on a thread of its own, as the pinning would outlive it. The pool's maker keeps its
 * affinity until it runs the pool, and so do the threads it makes meanwhile (the engine's
 * space, made after its pool, starts the migration worker and the CUDA driver's threads):
 * they ran on thread 0's one core. The thread that runs the pool is pinned to one core. */
static void *pool_affinity(void *arg)
{
    (void)arg;
    const cpu_set_t before = my_cpus();
    mvm_topo topo = {0};
    topo.cores = before;
    topo.n_cores = CPU_COUNT(&before);
    mvm_pool *p;
    CHECK_ST(mvm_pool_create(2, &topo, &p), MVM_OK);
    cpu_set_t now = my_cpus(), child;
    CHECK(CPU_EQUAL(&now, &before));
    pthread_t t;
    int rc = pthread_create(&t, NULL, report_cpus, &child);
    CHECK(rc == 0 && pthread_join(t, NULL) == 0);
    CHECK(CPU_COUNT(&before) > 0 && CPU_EQUAL(&child, &before));
    mvm_pool_run(p, nothing, NULL);
    now = my_cpus();
    CHECK(CPU_COUNT(&now) == 1);
    CPU_AND(&now, &now, &before);
    CHECK(CPU_COUNT(&now) == 1); /* one of the topology's cores */
    mvm_pool_destroy(p);
    return NULL;
}

static void test_pool_affinity(void)
{
    pthread_t t; /* checked once joined: check.h's counts are not atomic */
    int rc = pthread_create(&t, NULL, pool_affinity, NULL);
    CHECK(rc == 0 && pthread_join(t, NULL) == 0);
}

/* What each thread of a run saw: its id, its affinity, how many runs it took part in. */
struct pool_seen {
    pthread_t self[8];
    cpu_set_t cpus[8];
    atomic_int calls[8];
    atomic_int bad;
};

static void see_run(void *p, int t, int nth)
{
    struct pool_seen *s = p;
    if (t < 0 || t >= nth || nth > 8) {
        atomic_fetch_add(&s->bad, 1);
        return;
    }
    s->self[t] = pthread_self();
    s->cpus[t] = my_cpus();
    atomic_fetch_add(&s->calls[t], 1);
}

/* Runs p `runs` times: every thread took part in each, once, and the workers sit each on
 * one core of `cores`. */
static void check_runs(mvm_pool *p, int runs, const cpu_set_t *cores, struct pool_seen *s)
{
    memset(s, 0, sizeof *s);
    for (int r = 0; r < runs; r++)
        mvm_pool_run(p, see_run, s);
    CHECK(atomic_load(&s->bad) == 0);
    for (int t = 0; t < mvm_pool_size(p) && t < 8; t++) {
        CHECK(atomic_load(&s->calls[t]) == runs);
        cpu_set_t in;
        CPU_AND(&in, &s->cpus[t], cores);
        CHECK(t == 0 && mvm_pool_size(p) == 1 ? 1 : CPU_COUNT(&s->cpus[t]) == 1 && CPU_COUNT(&in) == 1);
    }
}

static atomic_int tripped;
static void tripwire(void *p, int t, int nth) { (void)p, (void)t, (void)nth, atomic_fetch_add(&tripped, 1); }

/* Moves p to topo after a last run of tripwire: no worker of after the move may run that
 * again (a worker restarted must wait for the next run, not take the last one). */
static void move_after_tripwire(mvm_pool *p, const mvm_topo *topo)
{
    atomic_store(&tripped, 0);
    mvm_pool_run(p, tripwire, NULL);
    const int n = mvm_pool_size(p);
    CHECK_ST(mvm_pool_move(p, topo, 0), MVM_OK);
    usleep(20000);
    CHECK(atomic_load(&tripped) == n);
}

/* mvm_pool_move: a pool made before the space follows it to the cores near its GPU. */
static void *pool_move(void *arg)
{
    (void)arg;
    const cpu_set_t all = my_cpus();
    mvm_topo wide = {0}, one = {0};
    wide.cores = all;
    wide.n_cores = CPU_COUNT(&all);
    for (int c = CPU_SETSIZE - 1; c >= 0; c--) /* the last of the cores */
        if (CPU_ISSET(c, &all)) {
            CPU_SET(c, &one.cores);
            break;
        }
    one.n_cores = 1;
    struct pool_seen s;
    mvm_pool *p;
    CHECK_ST(mvm_pool_create(0, &wide, &p), MVM_OK); /* one per core */
    const int n = wide.n_cores < 8 ? wide.n_cores : 8;
    CHECK(mvm_pool_size(p) == wide.n_cores);
    check_runs(p, 50, &all, &s);
    move_after_tripwire(p, &one);
    CHECK(mvm_pool_size(p) == 1);
    check_runs(p, 50, &one.cores, &s);
    move_after_tripwire(p, &wide);
    CHECK(mvm_pool_size(p) == wide.n_cores);
    check_runs(p, 50, &all, &s); /* no worker replays a run of before the move */
    pthread_t before[8];
    memcpy(before, s.self, sizeof before);
    CHECK_ST(mvm_pool_move(p, &wide, 0), MVM_OK); /* the same cores: nothing restarts */
    check_runs(p, 5, &all, &s);
    for (int t = 1; t < n; t++)
        CHECK(pthread_equal(before[t], s.self[t]));
    mvm_pool_destroy(p);

    CHECK_ST(mvm_pool_create(3, &wide, &p), MVM_OK); /* a count given: it stays */
    move_after_tripwire(p, &one);
    CHECK(mvm_pool_size(p) == 3);
    check_runs(p, 50, &one.cores, &s);
    mvm_pool_destroy(p);

    if (wide.n_cores >= 2) { /* a core left to the space's worker */
        CHECK_ST(mvm_pool_create(0, &wide, &p), MVM_OK);
        CHECK_ST(mvm_pool_move(p, &wide, 1), MVM_OK);
        CHECK(mvm_pool_size(p) == wide.n_cores - 1);
        CHECK(CPU_EQUAL(&mvm_pool_topo(p)->cores, &all));
        check_runs(p, 50, &all, &s);
        CHECK_ST(mvm_pool_move(p, &one, 1), MVM_OK); /* never fewer than one thread */
        CHECK(mvm_pool_size(p) == 1);
        mvm_pool_destroy(p);
    }
    CHECK_ST(mvm_pool_create(2, NULL, &p), MVM_OK); /* not pinned: not moved */
    CHECK_ST(mvm_pool_move(p, &one, 0), MVM_OK);
    CHECK(mvm_pool_size(p) == 2 && mvm_pool_topo(p) == NULL);
    mvm_pool_destroy(p);
    CHECK_ST(mvm_pool_create(0, NULL, &p), MVM_ERR_INVALID);
    return NULL;
}

static void test_pool_move(void)
{
    pthread_t t; /* checked once joined: check.h's counts are not atomic */
    int rc = pthread_create(&t, NULL, pool_move, NULL);
    CHECK(rc == 0 && pthread_join(t, NULL) == 0);
}

/* ---- loading ------------------------------------------------------------------------- */

static void test_load_presets(void)
{
    for (size_t i = 0; i < N_ARCHES; i++) {
        mvm_model *m;
        CHECK_ST(load(tiny_path(arches[i], MVM_W_F32), NULL, pool, &m), MVM_OK);
        if (!m)
            continue;
        const mvm_model_spec *s = &mvm_preset_find("tiny", arches[i])->spec;
        CHECK(strcmp(m->arch->name, arches[i]) == 0);
        /* deepseek2's and glm4moe's leading dense block is not an MoE layer: blk.1 is its
         * layer 0 (glm4moe's NextN block, after them, is none either) */
        CHECK(m->hp.n_dense == s->ds.n_dense && m->hp.n_layer + m->hp.n_dense == s->n_layer);
        CHECK(m->hp.n_expert == s->n_expert);
        CHECK(m->hp.n_expert_used == s->n_expert_used && m->hp.head_dim == s->head_dim);
        CHECK(m->hp.n_ff_exp == mvm_spec_expert_ff(s) && m->hp.n_vocab == s->n_vocab);
        /* gpt-oss's experts carry their gate and up biases */
        const mvm_k_expert_fmt f32 = m->layers[0].expert_fmt;
        CHECK(f32.gate_up == MVM_W_F32 && f32.down == MVM_W_F32 &&
              f32.glu == (m->arch->oai ? MVM_GLU_OAI : MVM_GLU_SILU));
        CHECK(m->expert_bytes == mvm_k_expert_group_bytes(f32, s->n_embd) *
                                 (mvm_spec_expert_ff(s) / MVM_QBLOCK));
        /* The homes hold the channel-major packing of the file's expert tensors. */
        const mvm_gguf_tensor *g = mvm_gguf_find_tensor(m->gguf, "blk.1.ffn_gate_exps.weight");
        const mvm_gguf_tensor *u = mvm_gguf_find_tensor(m->gguf, "blk.1.ffn_up_exps.weight");
        const mvm_gguf_tensor *d = mvm_gguf_find_tensor(m->gguf, "blk.1.ffn_down_exps.weight");
        uint32_t e = 3, D = s->n_embd, F = mvm_spec_expert_ff(s);
        uint8_t *want = malloc(m->expert_bytes);
        mvm_k_expert_pack(f32, (const float *)g->data + (size_t)e * F * D,
                          (const float *)u->data + (size_t)e * F * D,
                          (const float *)d->data + (size_t)e * F * D, D, F, want);
        if (m->arch->oai)
            mvm_k_expert_pack_bias(
                f32, (const float *)mvm_gguf_find_tensor(m->gguf, "blk.1.ffn_gate_exps.bias")->data
                         + (size_t)e * F,
                (const float *)mvm_gguf_find_tensor(m->gguf, "blk.1.ffn_up_exps.bias")->data +
                    (size_t)e * F, D, F, want);
        CHECK(memcmp(want, mvm_expert_addr(m->space, 1 - m->hp.n_dense, e),
                     m->expert_bytes) == 0);
        free(want);
        mvm_model_free(m);
    }
}

static void expect_load_error(const char *arch, const struct mutation *mu,
                              mvm_status want, const char *needle)
{
    const char *dst = in_dir("mutant.gguf");
    write_mutant(tiny_path(arch, MVM_W_F32), dst, mu);
    mvm_model *m = NULL;
    mvm_status st = load(dst, NULL, pool, &m);
    CHECK(st == want && m == NULL);
    CHECK(strstr(mvm_last_error(), needle) != NULL && strstr(mvm_last_error(), dst) != NULL);
    if (st != want || !strstr(mvm_last_error(), needle))
        fprintf(stderr, "  mutation (%s/%s): got %s: %s\n", mu->key ? mu->key : "",
                mu->tensor ? mu->tensor : "", mvm_status_name(st), mvm_last_error());
    mvm_model_free(m);
}

static void test_load_errors(void)
{
    /* A mutant that changes nothing must load: the copy itself is faithful. */
    struct mutation none = {0};
    write_mutant(tiny_path("qwen2moe", MVM_W_F32), in_dir("same.gguf"), &none);
    mvm_model *m = NULL;
    CHECK_ST(load(in_dir("same.gguf"), NULL, pool, &m), MVM_OK);
    mvm_model_free(m);

    expect_load_error("llama", &(struct mutation){.tensor = "blk.1.attn_k.weight",
                      .drop_tensor = 1}, MVM_ERR_INVALID, "missing tensor 'blk.1.attn_k.weight'");
    expect_load_error("llama", &(struct mutation){.tensor = "blk.0.attn_q.weight",
                      .ne0 = 32}, MVM_ERR_INVALID, "'blk.0.attn_q.weight' has shape [32, 64]");
    expect_load_error("olmoe", &(struct mutation){.tensor = "blk.0.ffn_norm.weight",
                      .retype = 1, .type = MVM_GGML_F16}, MVM_ERR_UNSUPPORTED, "must be f32");
    expect_load_error("qwen3moe", &(struct mutation){.tensor = "blk.1.ffn_up_exps.weight",
                      .retype = 1, .type = MVM_GGML_F16}, MVM_ERR_UNSUPPORTED,
                      "needs one type for both");
    expect_load_error("qwen3moe", &(struct mutation){.tensor = "blk.0.attn_v.weight",
                      .retype = 1, .type = MVM_GGML_Q4_K, .ne0 = 256}, MVM_ERR_INVALID,
                      "blk.0.attn_v.weight");
    expect_load_error("olmoe", &(struct mutation){.tensor = "blk.0.attn_q.weight",
                      .retype = 1, .type = MVM_GGML_I8}, MVM_ERR_UNSUPPORTED,
                      "has type i8, which moevm cannot compute yet (supported: f32, f16, bf16, "
                      "q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs, "
                      "mxfp4, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m)");
    expect_load_error("llama", &(struct mutation){.key = "llama.expert_count",
                      .drop_key = 1}, MVM_ERR_UNSUPPORTED, "without experts");
    expect_load_error("llama", &(struct mutation){.key = "llama.expert_used_count",
                      .key_u32 = 9}, MVM_ERR_INVALID, "expert_used_count 9");
    expect_load_error("olmoe", &(struct mutation){.key = "olmoe.embedding_length",
                      .drop_key = 1}, MVM_ERR_INVALID, "missing key 'olmoe.embedding_length'");
    expect_load_error("qwen2moe", &(struct mutation){.key = "qwen2moe.expert_feed_forward_length",
                      .key_u32 = 96}, MVM_ERR_INVALID, "experts have 64 channels");
    expect_load_error("qwen3moe", &(struct mutation){.key = "qwen3moe.rope.dimension_count",
                      .key_u32 = 33}, MVM_ERR_INVALID, "rope.dimension_count 33");
    /* RoPE scaling: an unknown kind is refused, not ignored; so is a factor out of range */
    expect_load_error("qwen3moe", &(struct mutation){.key = "qwen3moe.rope.scaling.type",
                      .key_str = "longrope"}, MVM_ERR_UNSUPPORTED,
                      "rope.scaling.type 'longrope': moevm computes none, linear and yarn");
    expect_load_error("llama", &(struct mutation){.key = "llama.rope.scaling.type",
                      .key_u32 = 2}, MVM_ERR_INVALID, "rope.scaling.type: not a short string");
    expect_load_error("llama", &(struct mutation){.key = "llama.rope.scaling.factor",
                      .key_f32 = -2}, MVM_ERR_INVALID, "rope.scaling.factor -2 out of range");
    expect_load_error("llama", &(struct mutation){.key = "llama.rope.scale_linear",
                      .key_f32 = NAN}, MVM_ERR_INVALID, "rope.scaling.factor nan out of range");
    expect_load_error("olmoe", &(struct mutation){.key = "olmoe.rope.freq_base",
                      .key_f32 = 0.5f}, MVM_ERR_INVALID, "rope.freq_base 0.5 out of range");
    expect_load_error("qwen2moe", &(struct mutation){.tensor = "blk.1.ffn_gate_inp_shexp.weight",
                      .drop_tensor = 1}, MVM_ERR_INVALID, "ffn_gate_inp_shexp");

    /* sizes bounded by what the file holds before anything is allocated by them */
    expect_load_error("llama", &(struct mutation){.key = "llama.block_count",
                      .key_u32 = UINT32_MAX}, MVM_ERR_INVALID,
                      "block_count 4294967295 but the file has only");
    expect_load_error("olmoe", &(struct mutation){.key = "olmoe.vocab_size", .key_u32 = 7},
                      MVM_ERR_INVALID, "olmoe.vocab_size is 7 but token_embd.weight has");
    /* general.alignment 1: the data section starts wherever the metadata ends, so of four
     * pads (one byte apart) at least three put the tensors off a 4-byte boundary; each is
     * refused with its reason, never read misaligned */
    const char *pads[] = {"", "a", "ab", "abc"};
    int refused = 0;
    for (int i = 0; i < 4; i++) {
        write_mutant(tiny_path("llama", MVM_W_F32), in_dir("mutant.gguf"),
                     &(struct mutation){.key = "general.alignment", .key_u32 = 1,
                                        .pad = pads[i]});
        mvm_model *mm = NULL;
        mvm_status st = load(in_dir("mutant.gguf"), NULL, pool, &mm);
        CHECK(st == MVM_OK || (st == MVM_ERR_UNSUPPORTED &&
                               strstr(mvm_last_error(), "not a multiple of 4 (general.alignment "
                                      "1)") != NULL));
        refused += st != MVM_OK;
        mvm_model_free(mm);
    }
    CHECK(refused >= 3);

    /* widths whose per-head products would wrap 32 bits */
    expect_load_error("llama", &(struct mutation){.key = "llama.attention.head_count",
                      .key_u32 = 1u << 22}, MVM_ERR_INVALID, "sizes too large");
    /* deepseek2's own: blocks, gating, groups, the latent's norm */
    expect_load_error("deepseek2", &(struct mutation){.key =
                      "deepseek2.leading_dense_block_count", .key_u32 = 3}, MVM_ERR_INVALID,
                      "leading_dense_block_count 3 and nextn_predict_layers 0 leave none of the "
                      "3 blocks for experts");
    expect_load_error("deepseek2", &(struct mutation){.key = "deepseek2.expert_gating_func",
                      .key_u32 = 3}, MVM_ERR_UNSUPPORTED, "expert_gating_func 3");
    expect_load_error("deepseek2", &(struct mutation){.key = "deepseek2.expert_group_count",
                      .key_u32 = 3}, MVM_ERR_INVALID, "expert_group_count 3 / "
                      "expert_group_used_count 0 do not fit 8 experts");
    expect_load_error("deepseek2", &(struct mutation){.tensor = "blk.2.attn_kv_a_norm.weight",
                      .drop_tensor = 1}, MVM_ERR_INVALID, "missing tensor "
                      "'blk.2.attn_kv_a_norm.weight'");
    expect_load_error("deepseek2", &(struct mutation){.tensor = "blk.0.attn_k_b.weight",
                      .ne0 = 8}, MVM_ERR_INVALID, "tensor 'blk.0.attn_k_b.weight' has shape "
                      "[8, 32, 4], expected [32, 32, 4]");
    /* glm4moe's: the NextN blocks must leave MoE blocks; the QK norms come as a pair; the
     * norm before the FFN is post_attention_norm */
    expect_load_error("glm4moe", &(struct mutation){.key = "glm4moe.nextn_predict_layers",
                      .key_u32 = 3}, MVM_ERR_INVALID, "leading_dense_block_count 1 and "
                      "nextn_predict_layers 3 leave none of the 4 blocks for experts");
    expect_load_error("glm4moe", &(struct mutation){.tensor = "blk.2.attn_k_norm.weight",
                      .drop_tensor = 1}, MVM_ERR_INVALID,
                      "missing tensor 'blk.2.attn_k_norm.weight'");
    expect_load_error("glm4moe", &(struct mutation){.tensor = "blk.0.post_attention_norm.weight",
                      .drop_tensor = 1}, MVM_ERR_INVALID,
                      "missing tensor 'blk.0.post_attention_norm.weight'");
    expect_load_error("glm4moe", &(struct mutation){.tensor = "blk.0.attn_v.bias",
                      .ne0 = 32}, MVM_ERR_INVALID, "blk.0.attn_v.bias");

    /* general.architecture is a string: set it through the writer directly. */
    mvm_gguf_writer *w;
    mvm_gguf_writer_new(&w);
    mvm_gguf_writer_set_str(w, "general.architecture", "llama4");
    CHECK_ST(mvm_gguf_writer_write(w, in_dir("arch.gguf")), MVM_OK);
    mvm_gguf_writer_free(w);
    CHECK_ST(load(in_dir("arch.gguf"), NULL, pool, &m), MVM_ERR_UNSUPPORTED);
    CHECK(strstr(mvm_last_error(), "'llama4' is not supported"));
    CHECK_ST(load(in_dir("no-such-file.gguf"), NULL, pool, &m), MVM_ERR_INVALID);
}

/* ---- the forward pass ---------------------------------------------------------------- */

static const int32_t prompt[] = {5, 77, 300, 12, 9, 410, 3, 3, 128, 64, 200, 17, 42};
#define N_PROMPT (sizeof prompt / sizeof *prompt)

/* Logits of every prompt position, with the given batch size, threads and budget. */
static float *run_prompt(const char *path, int threads, uint32_t batch, const char *budget)
{
    mvm_pool *own;
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    float *logits = NULL;
    CHECK_ST(mvm_pool_create(threads, NULL, &own), MVM_OK);
    CHECK_ST(load(path, budget, own, &m), MVM_OK);
    if (m) {
        CHECK_ST(mvm_ctx_create(m, own, 64, batch, NULL, &c), MVM_OK);
        logits = malloc(N_PROMPT * m->hp.n_vocab * sizeof *logits);
        for (size_t i = 0; i < N_PROMPT * m->hp.n_vocab; i++)
            logits[i] = NAN; /* poisoned: every value must be written */
        CHECK_ST(mvm_ctx_eval(c, prompt, N_PROMPT, logits, 1), MVM_OK);
        if (budget) {
            /* the small budget really made experts move, or run from their homes */
            mvm_stats st;
            mvm_resid_stats rs;
            mvm_space_get_stats(m->space, &st);
            mvm_resid_get_stats(mvm_ctx_residency(c), &rs);
            CHECK(st.pages_evicted > 0 || rs.bypassed > 0);
            if (!(st.pages_evicted > 0 || rs.bypassed > 0))
                fprintf(stderr, "  %s: loaded %llu evicted %llu pages, %u device pages\n", path,
                        (unsigned long long)st.pages_loaded, (unsigned long long)st.pages_evicted,
                        st.free_pages);
        }
    }
    mvm_ctx_free(c);
    mvm_model_free(m);
    mvm_pool_destroy(own);
    return logits;
}

static void test_forward_properties(void)
{
    for (size_t i = 0; i < N_ARCHES; i++) {
        for (int q = 0; q < 2; q++) {
            const char *path = tiny_path(arches[i], q ? MVM_W_Q8_0 : MVM_W_F32);
            size_t n = N_PROMPT * mvm_preset_find("tiny", arches[i])->spec.n_vocab;
            float *base = run_prompt(path, 2, 32, NULL);
            float *again = run_prompt(path, 2, 32, NULL);
            float *small = run_prompt(path, 2, 32, "0.2");
            float *serial = run_prompt(path, 2, 1, NULL);
            float *three = run_prompt(path, 3, 5, NULL);
            /* 8 threads a token at a time: the experts' slots (experts_cpu.c) have room for 4
             * copies of a step's rows, so each expert is cut into at most 4 units */
            float *eight = run_prompt(path, 8, 1, NULL);
            /* the default F16 KV cache against F32: its rounding (check_forward compares
             * both with the reference) */
            setenv("MOEVM_KV_TYPE", "f32", 1);
            float *kv32 = run_prompt(path, 2, 32, NULL);
            unsetenv("MOEVM_KV_TYPE");
            if (base && again && small && serial && three && eight && kv32) {
                CHECK(check_rel_l2(base, base, n) == 0); /* and finite */
                CHECK(memcmp(base, again, n * sizeof *base) == 0);
                CHECK(memcmp(base, small, n * sizeof *base) == 0);
                CHECK(check_rel_l2(serial, base, n) < 1e-5);
                /* 3 threads split the experts' groups otherwise than 2, so each output's
                 * partial sums add in another order: rounding, which gpt-oss's and olmoe's
                 * tiny models amplify to 1e-5 (a wrong sum is of order 1) */
                CHECK(check_rel_l2(three, base, n) < 1e-4);
                CHECK(check_rel_l2(eight, base, n) < 1e-4);
                /* (F32 weights: with Q8_0 ones the rounding may move an activation across a
                 * Q8_0 step and a token's routing with it) */
                const double e = check_rel_l2(kv32, base, n);
                CHECK(e > 0 && (q || e < 2e-3));
            }
            free(base), free(again), free(small), free(serial), free(three), free(eight);
            free(kv32);
        }
    }
}

/* Decode at length (forward_cpu.c, split_parts): with 2 threads, a token after 600
 * positions has its positions cut in two parts, one a thread, merged by their
 * log-normalisers; with 1 thread, one part. The three tokens' logits agree to rounding (the
 * parts add their terms in another order; a wrong merge weight is an error of order 1), and
 * both agree with the same tokens read as part of a prompt (every position in one pass). */
static void test_decode_split(void)
{
    enum { N = 600, T = 3 };
    for (size_t a = 0; a < N_ARCHES; a++) {
        const char *path = tiny_path(arches[a], MVM_W_F32);
        float *logits[3] = {NULL, NULL, NULL}; /* 1 thread, 2 threads, as a prompt */
        int32_t toks[N + T];
        uint32_t V = 0;
        for (int run = 0; run < 3; run++) {
            mvm_pool *own;
            mvm_model *m = NULL;
            mvm_ctx *c = NULL;
            CHECK_ST(mvm_pool_create(run ? 2 : 1, NULL, &own), MVM_OK);
            CHECK_ST(load(path, NULL, own, &m), MVM_OK);
            if (m && mvm_ctx_create(m, own, N + T, 256, NULL, &c) == MVM_OK) {
                V = m->hp.n_vocab;
                for (uint32_t i = 0; i < N + T; i++)
                    toks[i] = (int32_t)((i * 7919u + 13u) % V);
                float *l = logits[run] = malloc((size_t)T * V * sizeof *l);
                for (size_t i = 0; i < (size_t)T * V; i++)
                    l[i] = NAN; /* poisoned */
                if (run < 2) {
                    CHECK_ST(mvm_ctx_eval(c, toks, N, NULL, 0), MVM_OK);
                    for (uint32_t t = 0; t < T; t++)
                        CHECK_ST(mvm_ctx_eval(c, &toks[N + t], 1, l + (size_t)t * V, 0), MVM_OK);
                } else {
                    float *all = malloc((size_t)(N + T) * V * sizeof *all);
                    CHECK_ST(mvm_ctx_eval(c, toks, N + T, all, 1), MVM_OK);
                    memcpy(l, all + (size_t)N * V, (size_t)T * V * sizeof *l);
                    free(all);
                }
            }
            mvm_ctx_free(c);
            mvm_model_free(m);
            mvm_pool_destroy(own);
        }
        if (logits[0] && logits[1] && logits[2]) {
            const size_t n = (size_t)T * V;
            CHECK(check_rel_l2(logits[0], logits[0], n) == 0); /* finite */
            CHECK(check_rel_l2(logits[1], logits[0], n) < 1e-4);
            CHECK(check_rel_l2(logits[2], logits[0], n) < 1e-4);
        }
        free(logits[0]), free(logits[1]), free(logits[2]);
    }
}

/* The KV cache's layout (kv_cache.h): gpt-oss's tiny preset (3 blocks, windows of 5 on
 * blocks 0 and 2) keeps rings of 5 + n_batch rows where twice that is under n_ctx; a batch
 * wraps a ring at most once and lands in it twice; blocks without a window, and MLA's latent
 * rows, keep n_ctx rows each. (Ring against full cache, numerically: forward_properties
 * compares batches of 1 and 5, rings here, with batches of 32, none.) */
static void test_kv_layout(void)
{
    mvm_model *m = NULL;
    CHECK_ST(load(tiny_path("gpt-oss", MVM_W_F32), NULL, pool, &m), MVM_OK);
    if (!m)
        return;
    const uint64_t row = 2ull * m->hp.n_head_kv * m->hp.head_dim * sizeof(float);
    mvm_kv_layout l;
    CHECK_ST(mvm_kv_layout_make(m, 64, 4, MVM_W_F32, &l), MVM_OK);
    CHECK(l.blocks[0].ring == 9 && l.blocks[1].ring == 0 && l.blocks[2].ring == 9);
    CHECK(l.blocks[0].row0 == 0 && l.blocks[1].row0 == 18 && l.blocks[2].row0 == 82);
    CHECK(l.rows == 100 && l.bytes == 100 * row);
    mvm_kv_run r[MVM_KV_MAX_RUNS];
    /* positions 7..10 in block 2's ring: rows 7, 8 then 0, 1, and each 9 rows on */
    CHECK(mvm_kv_runs(&l.blocks[2], 7, 4, r) == 4);
    CHECK(r[0].row == 82 + 7 && r[0].i0 == 0 && r[0].n_rows == 2);
    CHECK(r[1].row == 82 && r[1].i0 == 2 && r[1].n_rows == 2);
    CHECK(r[2].row == 82 + 16 && r[2].i0 == 0 && r[2].n_rows == 2);
    CHECK(r[3].row == 82 + 9 && r[3].i0 == 2 && r[3].n_rows == 2);
    /* within the ring: a run per copy; a full block: one run at the positions */
    CHECK(mvm_kv_runs(&l.blocks[0], 11, 3, r) == 2 && r[0].row == 2 && r[0].n_rows == 3 &&
          r[1].row == 11 && r[1].i0 == 0 && r[1].n_rows == 3);
    CHECK(mvm_kv_runs(&l.blocks[1], 40, 4, r) == 1 && r[0].row == 18 + 40 && r[0].n_rows == 4);
    CHECK(mvm_kv_row(&l.blocks[2], 12) == 82 + 3 && mvm_kv_row(&l.blocks[1], 12) == 30);
    mvm_kv_layout_free(&l);
    /* batches of 32: a ring (2 x 37 rows) would be larger than 64 rows */
    CHECK_ST(mvm_kv_layout_make(m, 64, 32, MVM_W_F32, &l), MVM_OK);
    CHECK(!l.blocks[0].ring && !l.blocks[2].ring && l.rows == 3 * 64);
    mvm_kv_layout_free(&l);
    /* F16 and BF16 elements: the same rows in half the bytes; Q4_0's blocks of 32 in 18
     * bytes (this preset's heads are 32: whole blocks); not a K-quant or a lattice type */
    CHECK_ST(mvm_kv_layout_make(m, 64, 4, MVM_W_F16, &l), MVM_OK);
    CHECK(l.rows == 100 && l.bytes == 50 * row);
    mvm_kv_layout_free(&l);
    CHECK_ST(mvm_kv_layout_make(m, 64, 4, MVM_W_BF16, &l), MVM_OK);
    CHECK(l.rows == 100 && l.bytes == 50 * row);
    mvm_kv_layout_free(&l);
    CHECK_ST(mvm_kv_layout_make(m, 64, 4, MVM_W_Q4_0, &l), MVM_OK);
    CHECK(l.rows == 100 && l.bytes == 100 * (row / 4 / 32 * 18));
    mvm_kv_layout_free(&l);
    CHECK_ST(mvm_kv_layout_make(m, 64, 4, MVM_W_Q4_K, &l), MVM_ERR_INVALID);
    mvm_kv_layout_free(&l);
    CHECK_ST(mvm_kv_layout_make(m, 64, 4, MVM_W_IQ4_XS, &l), MVM_ERR_INVALID);
    mvm_kv_layout_free(&l);
    /* every name llama.cpp's -ctk takes, and no other */
    static const char *const kv_names[MVM_KV_N_TYPES] = MVM_KV_TYPES;
    enum mvm_wtype kt;
    for (int i = 0; i < MVM_KV_N_TYPES; i++)
        CHECK(mvm_kv_type_parse(kv_names[i], &kt) == MVM_OK &&
              !strcmp(mvm_k_wtype_name(kt), kv_names[i]));
    CHECK_ST(mvm_kv_type_parse("q4_K", &kt), MVM_ERR_INVALID);
    CHECK_ST(mvm_kv_type_parse("Q4_0", &kt), MVM_ERR_INVALID);
    CHECK_ST(mvm_kv_type_parse("", &kt), MVM_ERR_INVALID);
    /* the context's: MOEVM_KV_TYPE's default f16, or the policies' */
    mvm_ctx *c = NULL;
    CHECK_ST(mvm_ctx_create(m, pool, 64, 4, NULL, &c), MVM_OK);
    CHECK(c && mvm_ctx_kv_bytes(c) == 50 * row && !strcmp(mvm_ctx_kv_type(c), "f16"));
    mvm_ctx_free(c);
    c = NULL;
    mvm_ctx_policies pol = {.kv_type = "f32"};
    CHECK_ST(mvm_ctx_create(m, pool, 64, 4, &pol, &c), MVM_OK);
    CHECK(c && mvm_ctx_kv_bytes(c) == 100 * row && !strcmp(mvm_ctx_kv_type(c), "f32"));
    mvm_ctx_free(c);
    c = NULL;
    /* Q8_0 and Q4_0: their heads of 32 are whole blocks of 34 and 18 bytes, 17/64 and 9/64
     * of F32's row */
    static const struct { const char *name; uint64_t per64; } blocks[] = {{"q8_0", 17},
                                                                          {"q4_0", 9}};
    for (size_t i = 0; i < sizeof blocks / sizeof *blocks; i++) {
        pol.kv_type = blocks[i].name;
        CHECK_ST(mvm_ctx_create(m, pool, 64, 4, &pol, &c), MVM_OK);
        CHECK(c && mvm_ctx_kv_bytes(c) == 100 * row * blocks[i].per64 / 64 &&
              !strcmp(mvm_ctx_kv_type(c), blocks[i].name));
        mvm_ctx_free(c);
        c = NULL;
    }
    pol.kv_type = "q4_K";
    CHECK_ST(mvm_ctx_create(m, pool, 64, 4, &pol, &c), MVM_ERR_INVALID);
    CHECK(!c && strstr(mvm_last_error(), "KV cache type 'q4_K'"));
    setenv("MOEVM_KV_TYPE", "f8", 1);
    CHECK_ST(mvm_ctx_create(m, pool, 64, 4, NULL, &c), MVM_ERR_OPTION);
    CHECK(!c && strstr(mvm_last_error(), "MOEVM_KV_TYPE"));
    setenv("MOEVM_KV_TYPE", "f32", 1);
    CHECK_ST(mvm_ctx_create(m, pool, 64, 4, NULL, &c), MVM_OK);
    CHECK(c && mvm_ctx_kv_bytes(c) == 100 * row);
    mvm_ctx_free(c);
    unsetenv("MOEVM_KV_TYPE");
    mvm_model_free(m);
    m = NULL;
    CHECK_ST(load(tiny_path("deepseek2", MVM_W_F32), NULL, pool, &m), MVM_OK);
    if (!m)
        return;
    const mvm_hparams *hp = &m->hp;
    CHECK_ST(mvm_kv_layout_make(m, 50, 4, MVM_W_F32, &l), MVM_OK);
    CHECK(l.rows == 50ull * (hp->n_dense + hp->n_layer) &&
          l.bytes == l.rows * (hp->kv_lora + hp->rope.n_rot) * sizeof(float));
    mvm_kv_layout_free(&l);
    /* its latent row of 32 + 16 is not whole Q8_0 blocks */
    CHECK_ST(mvm_kv_layout_make(m, 50, 4, MVM_W_Q8_0, &l), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(),
                 "whole blocks of 32 elements, at most 1024; this model's are 48"));
    mvm_kv_layout_free(&l);
    mvm_model_free(m);
}

/* The model as llama.cpp's gguf-split writes it, in three parts (the metadata in the
 * first, split.* keys in all): loaded from the first part, the same logits bit for bit. */
static void test_split_model(void)
{
    const char *src = tiny_path("qwen3moe", MVM_W_Q8_0);
    mvm_gguf *g;
    CHECK_ST(mvm_gguf_open(src, &g), MVM_OK);
    if (!g)
        return;
    const uint16_t count = 3;
    const int32_t n = (int32_t)mvm_gguf_n_tensors(g);
    char first[256] = "";
    for (uint16_t part = 0; part < count; part++) {
        mvm_gguf_writer *w;
        CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
        for (uint64_t i = 0; part == 0 && i < mvm_gguf_n_keys(g); i++)
            copy_key(g, i, w);
        mvm_gguf_writer_set_val(w, "split.no", MVM_GGUF_U16, &part);
        mvm_gguf_writer_set_val(w, "split.count", MVM_GGUF_U16, &count);
        if (part == 0)
            mvm_gguf_writer_set_i32(w, "split.tensors.count", n);
        for (int32_t i = n * part / count; i < n * (part + 1) / count; i++) {
            const mvm_gguf_tensor *t = mvm_gguf_tensor_at(g, (uint64_t)i);
            CHECK_ST(mvm_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                                t->nbytes), MVM_OK);
        }
        char name[64];
        snprintf(name, sizeof name, "split-%05u-of-%05u.gguf", part + 1u, count);
        CHECK_ST(mvm_gguf_writer_write(w, in_dir(name)), MVM_OK);
        if (part == 0)
            snprintf(first, sizeof first, "%s", in_dir(name));
        mvm_gguf_writer_free(w);
    }
    mvm_gguf_close(g);
    size_t len = N_PROMPT * mvm_preset_find("tiny", "qwen3moe")->spec.n_vocab;
    float *whole = run_prompt(src, 2, 32, NULL), *split = run_prompt(first, 2, 32, NULL);
    CHECK(whole && split && memcmp(whole, split, len * sizeof *whole) == 0);
    free(whole), free(split);
}

/* An older deepseek2 file (attn_kv_b, as tiny-v3 writes it): loading splits it into the
 * absorbed form's matrices, probing only checks it, as mvm_model_probe promises. */
static void test_probe_deepseek(void)
{
    mvm_model_spec s = mvm_preset_find("tiny-v3", "deepseek2")->spec;
    s.type = MVM_W_Q8_0;
    const char *path = in_dir("v3.gguf");
    CHECK_ST(mvm_mkmodel_write(&s, path, pool, NULL, NULL), MVM_OK);
    mvm_model *loaded = NULL, *probed = NULL;
    CHECK_ST(load(path, NULL, pool, &loaded), MVM_OK);
    CHECK_ST(mvm_model_probe(path, &probed), MVM_OK);
    if (loaded && probed) {
        const mvm_layer *l = &loaded->layers[0], *p = &probed->layers[0];
        CHECK(l->owned && l->wk_b.type == MVM_W_F32 && l->wk_b.rows == 4 * 32 &&
              l->wk_b.cols == 32 && l->wv_b.rows == 4 * 16 && l->wv_b.cols == 32);
        CHECK(loaded->dense[0].owned != NULL);
        CHECK(!p->owned && !p->wk_b.data && !probed->dense[0].owned);
        CHECK(probed->hp.n_group == 4 && probed->hp.sigmoid_gate && probed->hp.norm_topk &&
              probed->hp.expert_scale == 2.5f && p->expert_bias && probed->hp.q_lora == 32);
    }
    mvm_model_free(loaded);
    mvm_model_free(probed);
}

/* glm4moe (tiny, GLM-4.5's kind): partial RoPE, QK norms, sigmoid routing with a bias, the
 * NextN block neither a layer nor in the expert space; without expert_gating_func its
 * router is still sigmoid (llama.cpp's default for glm4moe), and without the QK norms
 * (GLM-4.5-Air) it loads with none. */
static void test_load_glm(void)
{
    mvm_model *m = NULL;
    CHECK_ST(load(tiny_path("glm4moe", MVM_W_F32), NULL, pool, &m), MVM_OK);
    if (m) {
        mvm_space_info info;
        CHECK_ST(mvm_space_get_info(m->space, &info), MVM_OK);
        CHECK(m->hp.n_nextn == 1 && m->hp.n_layer == 2 && m->hp.n_dense == 1 &&
              info.n_layers == 2 && m->hp.rope.n_rot == 16 && m->hp.head_dim == 32);
        CHECK(m->hp.sigmoid_gate && m->hp.norm_topk && m->hp.expert_scale == 2.5f &&
              m->hp.n_ff_shexp == 64 && m->layers[1].expert_bias && m->layers[1].q_norm &&
              m->dense[0].q_norm && m->dense[0].bq && m->dense[0].ffn_w1.rows == 128);
    }
    mvm_model_free(m);
    const char *dst = in_dir("glm-mutant.gguf");
    write_mutant(tiny_path("glm4moe", MVM_W_F32), dst,
                 &(struct mutation){.key = "glm4moe.expert_gating_func", .drop_key = 1});
    m = NULL;
    CHECK_ST(load(dst, NULL, pool, &m), MVM_OK);
    CHECK(m && m->hp.sigmoid_gate);
    mvm_model_free(m);
    mvm_model_spec s = mvm_preset_find("tiny-air", "glm4moe")->spec;
    s.type = MVM_W_F32;
    CHECK_ST(mvm_mkmodel_write(&s, dst, pool, NULL, NULL), MVM_OK);
    m = NULL;
    CHECK_ST(load(dst, NULL, pool, &m), MVM_OK);
    CHECK(m && !m->layers[0].q_norm && !m->layers[0].k_norm && !m->dense[0].q_norm &&
          m->hp.expert_scale == 1.0f);
    mvm_model_free(m);
}

/* minimax-m2 (tiny): RMSNorm over the whole q and k, partial RoPE, sigmoid routing with a
 * bias, renormalised and unscaled, no dense block nor shared expert; without
 * expert_gating_func and expert_weights_norm its router is still sigmoid and renormalised. */
static void test_load_minimax(void)
{
    mvm_model *m = NULL;
    CHECK_ST(load(tiny_path("minimax-m2", MVM_W_F32), NULL, pool, &m), MVM_OK);
    if (m) {
        CHECK(m->hp.n_layer == 2 && m->hp.n_dense == 0 && m->hp.rope.n_rot == 16 &&
              m->hp.rope.neox && m->hp.head_dim == 32 && m->hp.n_ff_shexp == 0);
        CHECK(m->hp.sigmoid_gate && m->hp.norm_topk && m->hp.expert_scale == 1.0f &&
              m->hp.n_group == 0 && m->layers[1].expert_bias && m->layers[1].q_norm &&
              m->layers[1].k_norm && !m->layers[1].bq && !m->dense);
    }
    mvm_model_free(m);
    const char *dst = in_dir("minimax-mutant.gguf");
    write_mutant(tiny_path("minimax-m2", MVM_W_F32), dst,
                 &(struct mutation){.key = "minimax-m2.expert_gating_func", .drop_key = 1});
    const char *dst2 = in_dir("minimax-mutant2.gguf");
    write_mutant(dst, dst2,
                 &(struct mutation){.key = "minimax-m2.expert_weights_norm", .drop_key = 1});
    m = NULL;
    CHECK_ST(load(dst2, NULL, pool, &m), MVM_OK);
    CHECK(m && m->hp.sigmoid_gate && m->hp.norm_topk);
    mvm_model_free(m);
}

/* gpt-oss: the window on the even blocks, sinks and biases bound; a file without its
 * window, sinks or f32 biases is refused by name. */
static void test_load_gptoss(void)
{
    mvm_model *m = NULL;
    const char *path = tiny_path("gpt-oss", MVM_W_Q8_0);
    CHECK_ST(load(path, NULL, pool, &m), MVM_OK);
    if (m) {
        CHECK(m->hp.n_layer == 3 && m->hp.n_dense == 0 && m->hp.head_dim == 32 &&
              m->hp.n_head * m->hp.head_dim != m->hp.n_embd && m->hp.n_swa == 5);
        CHECK(m->layers[0].swa == 5 && m->layers[1].swa == 0 && m->layers[2].swa == 5);
        CHECK(!m->hp.sigmoid_gate && m->hp.norm_topk && m->hp.rope.neox &&
              m->hp.rope.freq_scale == 0.25f);
        const mvm_layer *L = &m->layers[2];
        CHECK(L->bq && L->bo && L->sinks && L->router_bias && L->down_bias && !L->q_norm);
        CHECK(L->expert_fmt.gate_up == MVM_W_Q8_0 && L->expert_fmt.glu == MVM_GLU_OAI);
    }
    mvm_model_free(m);
    static const struct {
        struct mutation mut;
        const char *says;
    } bad[] = {
        {{.key = "gpt-oss.attention.sliding_window", .drop_key = 1}, "sliding_window"},
        {{.key = "gpt-oss.attention.sliding_window", .key_u32 = 0}, "sliding_window is 0"},
        {{.tensor = "blk.1.attn_sinks.weight", .drop_tensor = 1}, "blk.1.attn_sinks.weight"},
        {{.tensor = "blk.2.ffn_down_exps.bias", .retype = 1, .type = MVM_GGML_F16},
         "must be f32"},
        {{.tensor = "blk.0.ffn_up_exps.bias", .ne0 = 32}, "blk.0.ffn_up_exps.bias"},
        {{.tensor = "blk.0.ffn_gate_inp.bias", .drop_tensor = 1}, "ffn_gate_inp.bias"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *dst = in_dir("gptoss-mutant.gguf");
        write_mutant(path, dst, &bad[i].mut);
        m = NULL;
        CHECK(load(dst, NULL, pool, &m) != MVM_OK && !m);
        CHECK(strstr(mvm_last_error(), bad[i].says));
        if (!strstr(mvm_last_error(), bad[i].says))
            fprintf(stderr, "  mutant %zu: %s\n", i, mvm_last_error());
    }
}

static void test_ctx_errors(void)
{
    mvm_model *m;
    CHECK_ST(load(tiny_path("llama", MVM_W_F32), NULL, pool, &m), MVM_OK);
    if (!m)
        return;
    mvm_ctx *c;
    CHECK_ST(mvm_ctx_create(m, pool, 4, 0, NULL, &c), MVM_ERR_INVALID);
    CHECK_ST(mvm_ctx_create(m, pool, 4, 2, NULL, &c), MVM_OK);
    int32_t bad = (int32_t)m->hp.n_vocab;
    CHECK_ST(mvm_ctx_eval(c, &bad, 1, NULL, 0), MVM_ERR_INVALID);
    CHECK(mvm_ctx_n_past(c) == 0);
    CHECK_ST(mvm_ctx_eval(c, prompt, 3, NULL, 0), MVM_OK);
    CHECK_ST(mvm_ctx_eval(c, prompt, 2, NULL, 0), MVM_ERR_RANGE);
    CHECK(strstr(mvm_last_error(), "context full"));
    mvm_ctx_reset(c);
    CHECK_ST(mvm_ctx_eval(c, prompt, 4, NULL, 0), MVM_OK);
    mvm_ctx_free(c);
    mvm_model_free(m);
}

/* The logits each of S sequences of L tokens (token(s, t)) gets alone, token by token in a
 * context of its own of n_ctx positions, into alone[s][t][n_vocab]. */
static void eval_alone(mvm_model *m, uint32_t n_ctx, uint32_t S, uint32_t L,
                       int32_t (*token)(uint32_t, uint32_t), float *alone)
{
    const size_t V = m->hp.n_vocab;
    for (uint32_t s = 0; s < S && alone; s++) {
        mvm_ctx *c = NULL;
        CHECK_ST(mvm_ctx_create(m, pool, n_ctx, 4, NULL, &c), MVM_OK);
        for (uint32_t t = 0; c && t < L; t++) {
            const int32_t id = token(s, t);
            CHECK_ST(mvm_ctx_eval(c, &id, 1, alone + ((size_t)s * L + t) * V, 0), MVM_OK);
        }
        mvm_ctx_free(c);
    }
}

/* Sequence s's token t in test_sequences. */
static int32_t seq_token(uint32_t s, uint32_t t)
{
    return prompt[(t * (s + 1) + s) % N_PROMPT];
}

/* Sequences of one context (mvm_ctx_policies.n_seq): three requests interleaved token by
 * token, over a budget so experts move, give each the logits it gets alone in a context of
 * its own; truncating a sequence and evaluating its tail again reproduces them; a sequence
 * out of range is refused. On every architecture, with the windowed blocks' rings (gpt-oss)
 * among them. */
static void test_sequences(void)
{
    for (size_t i = 0; i < N_ARCHES; i++) {
        mvm_model *m = NULL;
        CHECK_ST(load(tiny_path(arches[i], MVM_W_F32), "0.3", pool, &m), MVM_OK);
        if (!m)
            continue;
        const uint32_t V = m->hp.n_vocab, S = 3, n = N_PROMPT;
        float *alone = malloc((size_t)S * n * V * sizeof *alone);
        float *mixed = malloc((size_t)S * n * V * sizeof *mixed);
        float *again = malloc((size_t)V * sizeof *again);
        int32_t toks[3][N_PROMPT];
        for (uint32_t s = 0; s < S; s++)
            for (uint32_t t = 0; t < n; t++)
                toks[s][t] = seq_token(s, t);
        for (size_t k = 0; alone && mixed && k < (size_t)S * n * V; k++)
            alone[k] = mixed[k] = NAN;
        eval_alone(m, n, S, n, seq_token, alone);
        mvm_ctx *c = NULL;
        mvm_ctx_policies pol = {.n_seq = S};
        CHECK_ST(mvm_ctx_create(m, pool, n, 4, &pol, &c), MVM_OK);
        CHECK(c && mvm_ctx_n_seq(c) == S);
        for (uint32_t t = 0; c && t < n; t++)
            for (uint32_t s = 0; s < S; s++) {
                CHECK_ST(mvm_ctx_select_seq(c, s), MVM_OK);
                CHECK(mvm_ctx_n_past(c) == t);
                CHECK_ST(mvm_ctx_eval(c, &toks[s][t], 1, mixed + ((size_t)s * n + t) * V, 0),
                         MVM_OK);
            }
        CHECK(alone && mixed && memcmp(alone, mixed, (size_t)S * n * V * sizeof *alone) == 0);
        if (c && again) {
            CHECK_ST(mvm_ctx_select_seq(c, 1), MVM_OK);
            mvm_ctx_truncate(c, n - 3);
            CHECK(mvm_ctx_n_past(c) == n - 3);
            CHECK_ST(mvm_ctx_eval(c, &toks[1][n - 3], 3, again, 0), MVM_OK);
            CHECK(memcmp(again, mixed + ((size_t)1 * n + n - 1) * V, V * sizeof *again) == 0);
            CHECK_ST(mvm_ctx_select_seq(c, S), MVM_ERR_RANGE);
        }
        mvm_ctx_free(c);
        free(alone), free(mixed), free(again);
        mvm_model_free(m);
    }
}

/* Truncating where windowed blocks keep rings (gpt-oss's tiny preset, 64 positions in
 * batches of 4: rings of 9 rows, test_kv_layout): back by up to a batch the window is still
 * in the ring and the positions are kept; back by more, the rows hold later positions and
 * none are kept (a server reused them, and replies came out wrong). Either way, evaluating
 * from what is kept gives a fresh context's logits. */
static void test_truncate_ring(void)
{
    mvm_model *m = NULL;
    CHECK_ST(load(tiny_path("gpt-oss", MVM_W_F32), NULL, pool, &m), MVM_OK);
    if (!m)
        return;
    enum { N = 30 };
    const size_t V = m->hp.n_vocab;
    int32_t toks[N];
    for (uint32_t t = 0; t < N; t++)
        toks[t] = prompt[(3 * t + 1) % N_PROMPT];
    float *fresh = malloc(V * sizeof *fresh), *again = malloc(V * sizeof *again);
    mvm_ctx *c = NULL, *f = NULL;
    CHECK_ST(mvm_ctx_create(m, pool, 64, 4, NULL, &c), MVM_OK);
    CHECK_ST(mvm_ctx_create(m, pool, 64, 4, NULL, &f), MVM_OK);
    static const struct { uint32_t to, kept; } cuts[] = {{27, 27}, {26, 26}, {25, 0}, {12, 0}};
    for (size_t k = 0; c && f && fresh && again && k < sizeof cuts / sizeof *cuts; k++) {
        mvm_ctx_reset(c);
        CHECK_ST(mvm_ctx_eval(c, toks, N, NULL, 0), MVM_OK);
        mvm_ctx_truncate(c, cuts[k].to);
        CHECK(mvm_ctx_n_past(c) == cuts[k].kept);
        const uint32_t kept = mvm_ctx_n_past(c);
        CHECK_ST(mvm_ctx_eval(c, toks + kept, cuts[k].to + 1 - kept, again, 0), MVM_OK);
        mvm_ctx_reset(f);
        CHECK_ST(mvm_ctx_eval(f, toks, cuts[k].to + 1, fresh, 0), MVM_OK);
        CHECK(memcmp(again, fresh, V * sizeof *fresh) == 0);
    }
    mvm_ctx_free(c), mvm_ctx_free(f);
    free(fresh), free(again);
    mvm_model_free(m);
}

/* Observes the positions the MoE steps route (route observers see the batch's tokens at
 * their sequences' positions). */
static void sum_positions(void *ctx, const mvm_route_record *r)
{
    if (r->layer == 0)
        *(uint64_t *)ctx += r->pos;
}

/* The tokens of sequence s in batch_sequences: L of them, from the prompt's ids. */
#define BATCH_LEN 20
static int32_t batch_token(uint32_t s, uint32_t t)
{
    return prompt[(t * (s + 2) + 3 * s) % N_PROMPT] + (int32_t)s;
}

/* Whether batch_sequences asks for the logits of sequence s's token t (most, not all:
 * the rows of the others must not be written). */
static int batch_wants(uint32_t s, uint32_t t) { return (t + s) % 3 != 1; }

/* Builds call r of batch_sequences into t: each unfinished sequence's next run of tokens (3
 * where (r + s) % 3 is 0, a prompt's chunk; else 1, a decode step), the sequences in an order
 * that changes from call to call; pos[k]: token k's position. The number of tokens; done[s]
 * advances. */
static uint32_t batch_call(uint32_t r, uint32_t S, uint32_t *done, mvm_engine_token *t,
                           uint32_t *pos)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < S; k++) {
        const uint32_t s = (k + r) % S, len = (r + s) % 3 == 0 ? 3 : 1;
        for (uint32_t j = 0; j < len && done[s] < BATCH_LEN; j++, done[s]++, n++) {
            t[n] = (mvm_engine_token){batch_token(s, done[s]), s, batch_wants(s, done[s])};
            pos[n] = done[s];
        }
    }
    return n;
}

/* The rows of one call of batch_sequences (poisoned: a row not wanted stays NaN) against
 * the logits each sequence has alone; 1 when all match. */
static int batch_rows_match(const float *got, const float *alone, const mvm_engine_token *t,
                            const uint32_t *pos, uint32_t n, uint32_t V)
{
    uint32_t o = 0;
    int ok = 1;
    for (uint32_t k = 0; k < n; k++)
        if (t[k].logits) {
            const float *want = alone + ((size_t)t[k].seq * BATCH_LEN + pos[k]) * V;
            ok &= check_rel_l2(got + (size_t)o++ * V, want, V) < 1e-5;
        }
    for (size_t x = (size_t)o * V; x < (size_t)n * V; x++)
        ok &= isnan(got[x]);
    return ok;
}

/* A bad batch is refused whole: every sequence keeps its positions. */
static void batch_errors(mvm_ctx *c, const mvm_model *m)
{
    const uint32_t before[3] = {mvm_ctx_seq_n_past(c, 0), mvm_ctx_seq_n_past(c, 1),
                                mvm_ctx_seq_n_past(c, 2)};
    mvm_engine_token bad[3] = {{5, 0, 1}, {6, 3, 1}, {7, 1, 0}};
    CHECK_ST(mvm_ctx_eval_batch(c, bad, 3, NULL), MVM_ERR_RANGE);
    CHECK(strstr(mvm_last_error(), "sequence 3"));
    bad[1] = (mvm_engine_token){(int32_t)m->hp.n_vocab, 2, 1};
    CHECK_ST(mvm_ctx_eval_batch(c, bad, 3, NULL), MVM_ERR_INVALID);
    mvm_engine_token full[32]; /* two tokens of sequence 0, one too many of sequence 2 */
    const uint32_t n_full = 2 + 24 - before[2] + 1;
    for (uint32_t k = 0; k < n_full; k++)
        full[k] = (mvm_engine_token){9, k < 2 ? 0 : 2, 0};
    CHECK_ST(mvm_ctx_eval_batch(c, full, n_full, NULL), MVM_ERR_RANGE);
    CHECK(strstr(mvm_last_error(), "sequence 2"));
    for (uint32_t s = 0; s < 3; s++)
        CHECK(mvm_ctx_seq_n_past(c, s) == before[s]);
}

/* mvm_ctx_eval_batch: three sequences' prompt chunks and decode steps mixed in each call,
 * split by the batches of 5, over a budget so experts move, give every wanted row the
 * logits that sequence gets alone token by token, and write no other row; the route
 * observer sees each token at its sequence's position; the selection is kept; a bad batch
 * is refused whole (batch_errors). Every architecture, gpt-oss's windows of 5 in rings of
 * 2 x 10 rows wrapping. */
static void test_batch_sequences(void)
{
    for (size_t i = 0; i < N_ARCHES; i++) {
        mvm_model *m = NULL;
        CHECK_ST(load(tiny_path(arches[i], MVM_W_F32), "0.3", pool, &m), MVM_OK);
        if (!m)
            continue;
        const uint32_t V = m->hp.n_vocab, S = 3, L = BATCH_LEN;
        float *alone = malloc((size_t)S * L * V * sizeof *alone);
        float *got = malloc((size_t)S * L * V * sizeof *got);
        mvm_engine_token t[3 * BATCH_LEN];
        uint32_t pos[3 * BATCH_LEN], done[3] = {0}, n;
        mvm_ctx *c = NULL;
        eval_alone(m, 64, S, L, batch_token, alone);
        mvm_ctx_policies pol = {.n_seq = S};
        CHECK_ST(mvm_ctx_create(m, pool, 24, 5, &pol, &c), MVM_OK);
        uint64_t pos_seen = 0, pos_want = 0;
        int match = 1;
        if (c && alone && got) {
            mvm_ctx_set_route_observer(c, sum_positions, &pos_seen);
            CHECK_ST(mvm_ctx_select_seq(c, 1), MVM_OK);
            for (uint32_t r = 0; (n = batch_call(r, S, done, t, pos)) > 0; r++) {
                for (size_t x = 0; x < (size_t)n * V; x++)
                    got[x] = NAN;
                for (uint32_t k = 0; k < n; k++)
                    pos_want += pos[k];
                CHECK_ST(mvm_ctx_eval_batch(c, t, n, got), MVM_OK);
                match &= batch_rows_match(got, alone, t, pos, n, V);
                if (r == 2)
                    batch_errors(c, m);
            }
            CHECK(mvm_ctx_n_past(c) == L && mvm_ctx_seq_n_past(c, 0) == L);
        }
        CHECK(match);
        CHECK(pos_seen == pos_want);
        mvm_ctx_free(c);
        free(alone), free(got);
        mvm_model_free(m);
    }
}

/* No budget on the host backend: the CPU reads every expert at its home and nothing moves
 * (the logits equal a budget's: forward_properties); a budget, from the caller or
 * MOEVM_GPU_BUDGET, emulates a device; the modules that would only decide moves are
 * refused, naming themselves. */
static void test_at_home(void)
{
    const char *path = tiny_path("qwen3moe", MVM_W_F32);
    for (int budgeted = 0; budgeted < 3; budgeted++) {
        if (budgeted == 2)
            setenv("MOEVM_GPU_BUDGET", "50%", 1);
        mvm_model *m;
        CHECK_ST(load(path, budgeted == 1 ? "0.5" : NULL, pool, &m), MVM_OK);
        unsetenv("MOEVM_GPU_BUDGET");
        if (!m)
            continue;
        CHECK(m->experts_at_home == !budgeted);
        mvm_ctx *c;
        CHECK_ST(mvm_ctx_create(m, pool, 16, 4, NULL, &c), MVM_OK);
        if (c) {
            CHECK_ST(mvm_ctx_eval(c, prompt, 8, NULL, 0), MVM_OK);
            mvm_stats vs;
            mvm_resid_stats rs;
            mvm_space_get_stats(m->space, &vs);
            mvm_resid_get_stats(mvm_ctx_residency(c), &rs);
            CHECK(rs.accesses > 0);
            /* (with a budget the copies land behind the CPU: their bytes are counted then) */
            CHECK(budgeted || (vs.bytes_moved == 0 && vs.pages_loaded == 0));
            CHECK(rs.cpu_runs == (budgeted ? 0 : rs.accesses));
            mvm_ctx_free(c);
        }
        const mvm_ctx_policies asks[] = {
            {.prefetch = {.predict = "gate"}}, {.routing = {.route = "importance"}},
            {.residency = {.config = "uniform"}}};
        const char *said[] = {"predict gate: ", "route importance: ", "config uniform: "};
        for (size_t i = 0; i < 3; i++) {
            c = NULL;
            mvm_status st = mvm_ctx_create(m, pool, 16, 4, &asks[i], &c);
            CHECK(st == (budgeted ? MVM_OK : MVM_ERR_INVALID));
            CHECK(budgeted || (strstr(mvm_last_error(), said[i]) &&
                               strstr(mvm_last_error(), "read at its home")));
            mvm_ctx_free(c);
        }
        mvm_model_free(m);
    }
}

/* ---- traces -------------------------------------------------------------------------- */

static void test_trace(void)
{
    mvm_model *m;
    CHECK_ST(load(tiny_path("qwen3moe", MVM_W_F32), NULL, pool, &m), MVM_OK);
    if (!m)
        return;
    mvm_ctx *c;
    mvm_trace_out *t;
    CHECK_ST(mvm_ctx_create(m, pool, 32, 4, NULL, &c), MVM_OK);
    CHECK_ST(mvm_trace_open(in_dir("trace.jsonl"), m, 0, &t), MVM_OK);
    mvm_ctx_set_route_observer(c, mvm_trace_route, t);
    CHECK_ST(mvm_ctx_eval(c, prompt, 6, NULL, 0), MVM_OK);
    CHECK_ST(mvm_trace_close(t), MVM_OK);
    FILE *f = fopen(in_dir("trace.jsonl"), "r");
    char line[8192];
    int lines = 0, good = 0;
    uint32_t seen[6][2] = {{0}};
    while (f && fgets(line, sizeof line, f)) {
        if (lines++ == 0) {
            CHECK(strstr(line, "\"format\":\"moevm-trace\"") && strstr(line, "\"top_k\":2"));
            continue;
        }
        unsigned req, tok, layer;
        double s[8], w[2];
        int e[2];
        int n = sscanf(line, "{\"req\":%u,\"tok\":%u,\"layer\":%u,\"scores\":[%lf,%lf,%lf,%lf,%lf,"
                       "%lf,%lf,%lf],\"experts\":[%d,%d],\"weights\":[%lf,%lf]}", &req, &tok,
                       &layer, &s[0], &s[1], &s[2], &s[3], &s[4], &s[5], &s[6], &s[7], &e[0],
                       &e[1], &w[0], &w[1]);
        if (n != 15 || tok >= 6 || layer >= 2 || e[0] < 0 || e[0] > 7 || e[1] < 0 || e[1] > 7)
            continue;
        seen[tok][layer]++;
        double sum = 0, kth = s[e[1]];
        int above = 0;
        for (int k = 0; k < 8; k++) {
            sum += s[k];
            above += s[k] > kth * (1 + 1e-5) + 1e-7;
        }
        /* scores a distribution, the experts its top-2 in order, weights renormalised */
        if (fabs(sum - 1) < 1e-4 && s[e[0]] >= s[e[1]] && above <= 1 && e[0] != e[1] &&
            fabs(w[0] + w[1] - 1) < 1e-4 && fabs(w[0] / w[1] / (s[e[0]] / s[e[1]]) - 1) < 1e-4)
            good++;
    }
    if (f)
        fclose(f);
    CHECK(lines == 1 + 6 * 2 && good == 6 * 2);
    for (int k = 0; k < 6; k++)
        CHECK(seen[k][0] == 1 && seen[k][1] == 1);
    mvm_ctx_free(c);
    mvm_model_free(m);
}

/* The benchmark mode's routing override (mvm_ctx_policies.route_override, `moevm bench
 * --routing`): called once per token and MoE layer with the token's position, and what it
 * writes is what runs (the observer sees it as the step's selection). */
typedef struct forced {
    int calls, good;
} forced;

static void force_route(void *ctx, uint32_t layer, uint32_t pos, int *sel, float *w)
{
    forced *f = ctx;
    f->calls++;
    sel[0] = (int)((pos + layer) % 8), sel[1] = (int)((pos + layer + 3) % 8);
    w[0] = 0.75f, w[1] = 0.25f;
}

static void check_forced(void *ctx, const mvm_route_record *rec)
{
    forced *f = ctx;
    const int *e = rec->ran ? rec->ran : rec->selected;
    f->good += e[0] == (int)((rec->pos + rec->layer) % 8) &&
               e[1] == (int)((rec->pos + rec->layer + 3) % 8) && rec->weights[0] == 0.75f;
}

static void test_route_override(void)
{
    mvm_model *m;
    CHECK_ST(load(tiny_path("qwen3moe", MVM_W_F32), NULL, pool, &m), MVM_OK);
    if (!m)
        return;
    forced f = {0}, seen = {0};
    mvm_ctx_policies pol = {.route_override = force_route, .route_override_ctx = &f};
    mvm_ctx *c;
    CHECK_ST(mvm_ctx_create(m, pool, 32, 4, &pol, &c), MVM_OK);
    mvm_ctx_set_route_observer(c, check_forced, &seen);
    CHECK_ST(mvm_ctx_eval(c, prompt, 6, NULL, 0), MVM_OK);
    CHECK(f.calls == 6 * 2 && seen.good == 6 * 2);
    mvm_ctx_free(c);
    mvm_model_free(m);
}

/* The hidden state the observer gets is the router's input: softmax(router . hidden),
 * recomputed here in double from the F32 router rows, gives the probabilities it reported. */
typedef struct hidden_check {
    const mvm_model *m;
    int calls, good;
} hidden_check;

static void check_hidden(void *ctx, const mvm_route_record *rec)
{
    hidden_check *hc = ctx;
    uint32_t layer = rec->layer, n_expert = rec->n_expert, n_embd = rec->n_embd;
    const float *probs = rec->probs, *hidden = rec->hidden;
    const mvm_weight *r = &hc->m->layers[layer].router;
    double logit[64], mx = -1e300, sum = 0;
    hc->calls++;
    if (r->type != MVM_W_F32 || n_expert > 64 || r->cols != n_embd)
        return;
    for (uint32_t e = 0; e < n_expert; e++) {
        const float *row = (const float *)((const char *)r->data + e * r->row_bytes);
        logit[e] = 0;
        for (uint32_t d = 0; d < n_embd; d++)
            logit[e] += (double)row[d] * hidden[d];
        mx = logit[e] > mx ? logit[e] : mx;
    }
    for (uint32_t e = 0; e < n_expert; e++)
        sum += logit[e] = exp(logit[e] - mx);
    int ok = 1;
    for (uint32_t e = 0; e < n_expert; e++)
        ok &= fabs(logit[e] / sum - probs[e]) < 1e-5;
    hc->good += ok;
}

static void test_trace_hidden(void)
{
    mvm_model *m;
    CHECK_ST(load(tiny_path("olmoe", MVM_W_F32), NULL, pool, &m), MVM_OK);
    if (!m)
        return;
    mvm_ctx *c;
    CHECK_ST(mvm_ctx_create(m, pool, 32, 4, NULL, &c), MVM_OK);
    hidden_check hc = {.m = m};
    mvm_ctx_set_route_observer(c, check_hidden, &hc);
    CHECK_ST(mvm_ctx_eval(c, prompt, 6, NULL, 0), MVM_OK);
    CHECK(hc.calls == 6 * (int)m->hp.n_layer && hc.good == hc.calls);
    mvm_ctx_free(c);
    mvm_model_free(m);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/moevm-test-engine-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    if (mvm_pool_create(2, NULL, &pool) != MVM_OK)
        return 1;
    for (size_t i = 0; i < N_ARCHES; i++) {
        make_tiny(arches[i], MVM_W_F32);
        make_tiny(arches[i], MVM_W_Q8_0);
    }
    RUN(test_pool);
    RUN(test_pool_share);
    RUN(test_pool_affinity);
    RUN(test_pool_move);
    RUN(test_load_presets);
    RUN(test_load_errors);
    RUN(test_ctx_errors);
    RUN(test_sequences);
    RUN(test_truncate_ring);
    RUN(test_batch_sequences);
    RUN(test_at_home);
    RUN(test_trace);
    RUN(test_route_override);
    RUN(test_trace_hidden);
    RUN(test_forward_properties);
    RUN(test_decode_split);
    RUN(test_kv_layout);
    RUN(test_split_model);
    RUN(test_probe_deepseek);
    RUN(test_load_glm);
    RUN(test_load_minimax);
    RUN(test_load_gptoss);
    mvm_pool_destroy(pool);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 1;
    TEST_END();
}
