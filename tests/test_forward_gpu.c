/*
 * The device forward pass (engine/forward/forward_cuda.c) over tests/fakecuda, its kernels emulated
 * (FAKECUDA_KERNELS) and its experts in a cuda expert space: the logits of every prompt
 * position against the CPU engine's (itself checked against NumPy: tests/ref), for every
 * architecture, in batches and token by token; the same whatever the experts' residency;
 * the policy modules and observers seeing the same routing; SMoE's speculative pass changing
 * nothing computed and forecasting the next layer exactly when every expert is resident;
 * driver failures named and leaving nothing pinned.
 *
 * Run three times by CTest: with the homes mapped (MOEVM_HOME_MAP=on on a device with
 * HOST_NUMA VMM: experts with no room run from their host homes), on a device without it
 * (FAKECUDA_HOST_NUMA=0), and with the default MOEVM_HOME_MAP=off. In the last two a
 * non-resident expert is unmapped, a read of it a crash, so every step must wait for its
 * copies, and a step that cannot fit runs in rounds.
 *
 * usage: test_forward_gpu path/to/fake/libcuda.so.1 (FAKECUDA_KERNELS set by the caller)
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/compute/pool.h"
#include "engine/forward/experts_cpu.h"
#include "engine/forward/forward.h"
#include "engine/forward/moe_step.h"
#include "engine/model/model.h"
#include "engine/plan/plan.h"
#include "engine/synth/mkmodel.h"
#include "fakecuda.h"
#include "kernels/cuda/kernels.h"
#include "tests/check.h"
#include "vmm/error.h"

static char dir[64];
static mvm_pool *pool;
static void *driver_lib; /* the fake libcuda.so.1 */
static fakecuda_set_fail_fn set_fail;
static fakecuda_calls_fn calls;
static fakecuda_reset_counters_fn reset_counters;
static fakecuda_set_copy_delay_us_fn copy_delay;
static fakecuda_set_cc_major_fn set_cc_major;
static fakecuda_set_event_sync_delay_us_fn event_delay;
static int home_mapped;                 /* the fake's HOST_NUMA support, as the space saw it */
static void (*hold_maps)(int);          /* fakecuda_hold_maps */
static int hold_from = -1, hold_to = -1; /* record holds the fake's maps from the replay of
                                            one position to that of another */
static const char *assign, *assign_args; /* run_prompt's assign module (NULL: the default) */
static const char *predict = "gate";    /* and its predict module */
static uint32_t cpu_moe;                  /* load's --n-cpu-moe (0: a budget instead) */
static const char *kv_type;               /* and KV cache type (NULL: the default, f16) */
static int replayed;                      /* and a benchmark's replayed routing (replay) */

static const int32_t prompt[] = {5, 77, 300, 12, 9, 410, 3, 128, 64, 200, 17, 42, 250, 8};
#define N_PROMPT (sizeof prompt / sizeof *prompt)

/* The tiny preset of arch in type t. A K-quant is 256 wide (rows of whole super-blocks) and
 * Q4_K is llama.cpp's Q4_K_M mix (Q6_K down experts in some layers); qwen2moe's experts
 * then have 96 channels, so that their down matrices fall back to Q5_0/Q8_0 as in
 * llama.cpp's Qwen2-MoE files. */
static uint32_t preset_layers; /* preset_path's blocks (0: the preset's) */
static uint32_t preset_head_dim; /* and heads (0: the preset's; 32 for a Q8_0 KV cache) */

static const char *preset_path(const char *arch, const char *preset, enum mvm_wtype t)
{
    static char p[128];
    snprintf(p, sizeof p, "%s/%s-%s-%d-L%u-H%u.gguf", dir, arch, preset, (int)t, preset_layers,
             preset_head_dim);
    if (access(p, R_OK) != 0) {
        mvm_model_spec s = mvm_preset_find(preset, arch)->spec;
        s.type = t;
        s.n_layer = preset_layers ? preset_layers : s.n_layer;
        s.head_dim = preset_head_dim ? preset_head_dim : s.head_dim;
        s.seed = 11;
        if (mvm_k_is_k(t)) {
            s.n_embd = s.n_ff = 256;
            s.n_ff_exp = strcmp(arch, "qwen2moe") ? 256 : 96;
            s.k_mix = t == MVM_W_Q4_K;
        }
        CHECK_ST(mvm_mkmodel_write(&s, p, pool, NULL, NULL), MVM_OK);
    }
    return p;
}

static const char *model_path(const char *arch, enum mvm_wtype t)
{
    return preset_path(arch, "tiny", t);
}

/* budget: a fraction of the experts' pages (1: all). Pages of 4 KiB: several per expert. */
static mvm_status load(const char *path, mvm_backend_kind backend, double budget,
                       mvm_model **m)
{
    mvm_space_desc d;
    mvm_space_desc_init(&d);
    d.backend = backend;
    d.page_size = 4096;
    d.device_budget = 0;
    d.device_budget_frac = budget;
    return mvm_model_load(path, &(mvm_load_args){.desc = &d, .pool = pool,
                                                 .cpu_moe = cpu_moe != 0, .n_cpu_moe = cpu_moe},
                          m);
}

struct run {
    float *logits;          /* [N_PROMPT][n_vocab] */
    int sel[N_PROMPT][2][2]; /* the router's top-2, by position and layer */
    double hidden[N_PROMPT][2]; /* and a sum of the router input the observer saw */
    uint64_t seen;          /* every step the observer saw, in order: its position, layer,
                               choice, weights, probabilities and router input, hashed */
    mvm_stats space;
    uint32_t reserved_left; /* the space's pages set aside once the context is gone */
    mvm_resid_stats resid;
    uint32_t experts;       /* the model's routed experts, every MoE layer's */
    int packed;             /* the space was packed (mvm_space_info.packed) */
    int slots;              /* a slot space (mvm_space_info.slots) */
    uint32_t ppe;           /* its pages an expert */
};

/* FNV-1a of n bytes into h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}

static void record(void *ctx, const mvm_route_record *r)
{
    struct run *run = ctx;
    uint64_t h = fnv(run->seen ? run->seen : 0xcbf29ce484222325ull, &r->pos, sizeof r->pos);
    h = fnv(h, &r->layer, sizeof r->layer);
    h = fnv(h, r->selected, r->k * sizeof *r->selected);
    h = fnv(h, r->weights, r->k * sizeof *r->weights);
    h = fnv(h, r->probs, r->n_expert * sizeof *r->probs);
    run->seen = fnv(h, r->hidden, r->n_embd * sizeof *r->hidden);
    if (r->layer == 0 && (int)r->pos == hold_from)
        hold_maps(1);
    if (r->layer == 0 && (int)r->pos == hold_to)
        hold_maps(0);
    if (r->pos < N_PROMPT && r->layer < 2 && r->k == 2) {
        memcpy(run->sel[r->pos][r->layer], r->selected, sizeof run->sel[0][0]);
        double h = 0;
        for (uint32_t i = 0; i < r->n_embd; i++)
            h = h * 1.000001 + r->hidden[i];
        run->hidden[r->pos][r->layer] = h;
    }
}

/* The prompt through c, batch tokens a call: every position's logits into logits (poisoned
 * first; NULL: none kept). */
static mvm_status eval_prompt(mvm_ctx *c, size_t n_vocab, uint32_t batch, float *logits)
{
    for (size_t i = 0; logits && i < N_PROMPT * n_vocab; i++)
        logits[i] = NAN;
    mvm_status st = MVM_OK;
    for (uint32_t done = 0; done < N_PROMPT && st == MVM_OK; done += batch) {
        uint32_t n = N_PROMPT - done < batch ? N_PROMPT - done : batch;
        st = mvm_ctx_eval(c, prompt + done, n, logits ? logits + done * n_vocab : NULL,
                          logits != NULL);
    }
    return st;
}

/* A routing trace as `moevm bench --routing` replays it (mvm_ctx_policies.route_override),
 * the tiny models' top-2 of 8: two experts and weights from the position and layer alone. */
static void replay(void *ctx, uint32_t layer, uint32_t pos, int *sel, float *w)
{
    (void)ctx;
    sel[0] = (int)((pos * 3 + layer) % 8);
    sel[1] = (int)((pos * 3 + layer + 1 + pos % 5) % 8);
    w[0] = 0.75f - 0.05f * (float)(pos % 4);
    w[1] = 1.0f - w[0];
}

/* Every position's logits (poisoned first), batch tokens a call. NULL on failure. */
static struct run *run_prompt(const char *path, mvm_backend_kind backend, double budget,
                              uint32_t batch, int wait)
{
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    struct run *run = calloc(1, sizeof *run);
    CHECK_ST(load(path, backend, budget, &m), MVM_OK);
    mvm_ctx_policies pol = {.residency = {.evict = "lru", .assign = assign,
                                          .assign_args = assign_args},
                            .prefetch = {.predict = predict}, .wait_loads = wait,
                            .kv_type = kv_type, .route_override = replayed ? replay : NULL};
    if (m)
        CHECK_ST(mvm_ctx_create(m, pool, 32, batch, &pol, &c), MVM_OK);
    if (!c) {
        mvm_model_free(m);
        free(run);
        return NULL;
    }
    CHECK(strcmp(mvm_ctx_backend(c), backend == MVM_BACKEND_CUDA ? "cuda" : "cpu") == 0);
    mvm_ctx_set_route_observer(c, record, run);
    size_t nv = m->hp.n_vocab;
    run->logits = malloc(N_PROMPT * nv * sizeof *run->logits);
    CHECK_ST(eval_prompt(c, nv, batch, run->logits), MVM_OK);
    mvm_space_get_stats(m->space, &run->space);
    mvm_space_info info;
    run->packed = mvm_space_get_info(m->space, &info) == MVM_OK && info.packed;
    run->slots = info.slots;
    run->ppe = info.pages_per_expert;
    mvm_resid_get_stats(mvm_ctx_residency(c), &run->resid);
    run->experts = m->hp.n_layer * m->hp.n_expert;
    mvm_ctx_free(c);
    mvm_stats end;
    mvm_space_get_stats(m->space, &end);
    run->reserved_left = end.reserved_pages;
    mvm_model_free(m);
    return run;
}

static void free_run(struct run *r)
{
    if (r)
        free(r->logits);
    free(r);
}

/* An engine used from threads other than the one that opened it (moevm serve's engine
 * thread, an embedding program's workers): each entry into the device forward pass makes the
 * device's context the calling thread's (mvm_gpu_use), so a prompt evaluated on a new thread,
 * its experts moving (budget 0.5), gives the main thread's logits to the bit, and the
 * context is freed on a third. Without it every driver call there failed with
 * CUDA_ERROR_INVALID_CONTEXT, and `moevm serve` on a GPU answered every request with it. */
struct elsewhere {
    mvm_ctx *c;
    size_t n_vocab;
    float *logits;
    mvm_status st;
};

static void *eval_elsewhere(void *arg)
{
    struct elsewhere *o = arg;
    o->st = eval_prompt(o->c, o->n_vocab, 4, o->logits);
    return NULL;
}

static void *free_elsewhere(void *c)
{
    mvm_ctx_free(c);
    return NULL;
}

static void test_other_threads(void)
{
    const char *path = model_path("olmoe", MVM_W_Q8_0);
    struct run *here = run_prompt(path, MVM_BACKEND_CUDA, 0.5, 4, 0);
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    CHECK_ST(load(path, MVM_BACKEND_CUDA, 0.5, &m), MVM_OK);
    mvm_ctx_policies pol = {.residency = {.evict = "lru"}};
    if (m)
        CHECK_ST(mvm_ctx_create(m, pool, 32, 4, &pol, &c), MVM_OK);
    if (c && here) {
        const size_t nv = m->hp.n_vocab;
        struct elsewhere o = {c, nv, malloc(N_PROMPT * nv * sizeof(float)), MVM_ERR_INVALID};
        pthread_t t;
        CHECK(o.logits && pthread_create(&t, NULL, eval_elsewhere, &o) == 0 &&
              pthread_join(t, NULL) == 0);
        CHECK_ST(o.st, MVM_OK);
        CHECK(o.st == MVM_OK && memcmp(o.logits, here->logits, N_PROMPT * nv * sizeof(float)) == 0);
        CHECK(pthread_create(&t, NULL, free_elsewhere, c) == 0 && pthread_join(t, NULL) == 0);
        c = NULL;
        free(o.logits);
    }
    mvm_ctx_free(c);
    mvm_model_free(m);
    free_run(here);
}

/* Reading in place where the device cannot read the homes (unmapped, and the driver gave
 * no device pointer for their registered memory): the context is refused, saying why, and
 * nothing stays pinned or allocated for it. */
static void check_zerocopy_refused(const char *path)
{
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    CHECK(set_fail("cuMemHostGetDevicePointer:1") == 0);
    CHECK_ST(load(path, MVM_BACKEND_CUDA, 0.125, &m), MVM_OK);
    set_fail(NULL);
    mvm_ctx_policies pol = {.residency = {.assign = "gpu", .assign_args = "zerocopy=1"}};
    if (m)
        CHECK_ST(mvm_ctx_create(m, pool, 32, 4, &pol, &c), MVM_ERR_INVALID);
    CHECK(!c && strstr(mvm_last_error(), "which this device cannot read") != NULL);
    mvm_ctx_free(c);
    mvm_model_free(m);
}

/* The KV cache types the device refuses, each with a line naming it, when a context is sized
 * and when it is made: deepseek2's latent rows in Q8_0 (heads of whole blocks here: a latent
 * of 48 + 16, which the CPU backend takes), and a type only the CPU reads (Q4_0, over heads
 * of 32 that its layout takes). */
static void test_kv_types_refused(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/deepseek2-latent64.gguf", dir);
    mvm_model_spec s = mvm_preset_find("tiny", "deepseek2")->spec;
    s.type = MVM_W_F32, s.seed = 11, s.ds.kv_lora = 64 - s.ds.n_rot;
    CHECK_ST(mvm_mkmodel_write(&s, path, pool, NULL, NULL), MVM_OK);
    preset_head_dim = 32;
    const char *llama = preset_path("llama", "tiny", MVM_W_F32);
    preset_head_dim = 0;
    const struct { const char *path, *kv, *says; } cases[] = {
        {path, "q8_0", "a q8_0 KV cache on the GPU takes grouped-query attention; deepseek2's "
                       "latent rows are read as f16 or f32"},
        {NULL, "q4_0", "a q4_0 KV cache is read by the CPU backend only; the GPU's attention "
                       "reads f16, f32 or q8_0"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *model = cases[i].path ? cases[i].path : llama;
        mvm_model *m = NULL, *host = NULL;
        mvm_ctx *c = NULL;
        uint64_t w = 0, rest = 0;
        mvm_ctx_policies pol = {.kv_type = cases[i].kv};
        CHECK_ST(load(model, MVM_BACKEND_CUDA, 1, &m), MVM_OK);
        CHECK_ST(load(model, MVM_BACKEND_HOST, 1, &host), MVM_OK);
        if (m && host) {
            CHECK_ST(mvm_ctx_device_bytes(m, 32, 4, cases[i].kv, NULL, &w, &rest),
                     MVM_ERR_UNSUPPORTED);
            CHECK(strstr(mvm_last_error(), cases[i].says) != NULL);
            CHECK_ST(mvm_ctx_create(m, pool, 32, 4, &pol, &c), MVM_ERR_UNSUPPORTED);
            CHECK(!c && strstr(mvm_last_error(), cases[i].says) != NULL);
            CHECK_ST(mvm_ctx_create(host, pool, 32, 4, &pol, &c), MVM_OK); /* the CPU's */
            mvm_ctx_free(c);
        }
        mvm_model_free(m), mvm_model_free(host);
    }
}

/* The types of the mmq kernels (kernels/cuda/mmq.cu), by their kernels' names */
#define MMQ_NAME(name, T) #name,
static const char *const mmq_types[] = {MVM_G_MMQ_TYPES(MMQ_NAME)};
#undef MMQ_NAME

/* The launches of the mmq kernels of `part` ("up" or "down"), every type's. */
static unsigned long mmq_launches(const char *part)
{
    unsigned long n = 0;
    for (size_t i = 0; i < sizeof mmq_types / sizeof *mmq_types; i++) {
        char name[64];
        snprintf(name, sizeof name, "mvm_g_expert_mmq_%s_%s", part, mmq_types[i]);
        n += fakecuda_engine_launches(name);
    }
    return n;
}

/* The dense products of mmq's types in a batch (mvm_g_mmq_matmul_<type>) */
static unsigned long mmq_dense_launches(void)
{
    unsigned long n = 0;
    for (size_t i = 0; i < sizeof mmq_types / sizeof *mmq_types; i++) {
        char name[64];
        snprintf(name, sizeof name, "mvm_g_mmq_matmul_%s", mmq_types[i]);
        n += fakecuda_engine_launches(name);
    }
    return n;
}

/* MOEVM_MMQ=on: a prompt's Q8_0 and K-quant experts (Q4_K_M's mix, Q2_K's to Q6_K's) on the
 * int8 tensor cores (kernels/cuda/mmq.cu), up and down a launch each a step, the decode's on up1
 * and down1 as before; and in a batch of 9 tokens or more (MVM_CUDA_MMQ_ROWS) its dense
 * matrices of those types too (mvm_g_mmq_matmul), in fewer the integer kernels. Without
 * cuBLAS (MOEVM_GEMM_ROWS=0: every other product on the
 * kernels) the logits are the CPU's to the rounding of the integer kernels (each block's
 * float is the CPU's, the blocks added in order), by batches of 12 (then 2), 8 and 3
 * (experts of one row in a step of several), and of 12 with MOEVM_MMQ=experts (no dense
 * product on mmq); the Q6_K and IQ4_NL models, whose device runs part from the
 * CPU's with or without mmq (a near tie the device's sums round the other way), are
 * compared with the device's run without mmq. gpt-oss's MXFP4 experts with its unit and
 * biases. With cuBLAS for products of 2 rows or more, the experts still
 * take mmq: fewer batched products (the prompt's attention keeps its own). Models whose
 * experts mix the two kinds (Qwen2-MoE's Q4_K, whose down falls back to a 32-wide type)
 * take the other paths, as every model does on a device older than compute
 * capability 8.0 (the module not loaded). By default (auto) as on. */
static void test_mmq(void)
{
    static const struct {
        const char *arch, *preset;
        enum mvm_wtype type;
        int mmq;   /* whether its experts take the mmq kernels */
        int flips; /* the device's rounding flips a choice against the CPU's, mmq or not
                      (the Q6_K model's at its position 11: 6.9e-3 in all; IQ4_NL's, 2.0e-3):
                      compared with the device's logits without mmq instead */
        int dense; /* whether some dense matrix is of mmq's types */
    } cases[] = {{"olmoe", "tiny", MVM_W_Q8_0, 1, 0, 1},
                 {"deepseek2", "tiny-v3", MVM_W_Q8_0, 1, 0, 1},
                 {"deepseek2", "tiny-v3", MVM_W_Q4_K, 1, 0, 1},
                 {"olmoe", "tiny", MVM_W_Q4_K, 1, 0, 1},
                 {"olmoe", "tiny", MVM_W_Q5_K, 1, 0, 1},
                 {"olmoe", "tiny", MVM_W_Q6_K, 1, 1, 1},
                 {"gpt-oss", "tiny", MVM_W_MXFP4, 1, 0, 1},
                 {"olmoe", "tiny", MVM_W_IQ4_NL, 1, 1, 1},
                 {"olmoe", "tiny", MVM_W_Q3_K, 1, 0, 1},
                 {"olmoe", "tiny", MVM_W_IQ4_XS, 1, 0, 1},
                 {"qwen2moe", "tiny", MVM_W_Q4_K, 0, 0, 1},
                 {"olmoe", "tiny", MVM_W_Q2_K, 1, 0, 1}};
    static const uint32_t batches[] = {12, 8, 3, 12}; /* the last with MOEVM_MMQ=experts */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *path = preset_path(cases[i].arch, cases[i].preset, cases[i].type);
        size_t n = N_PROMPT * mvm_preset_find(cases[i].preset, cases[i].arch)->spec.n_vocab;
        setenv("MOEVM_MMQ", "off", 1);
        setenv("MOEVM_GEMM_ROWS", "0", 1);
        struct run *ref = run_prompt(path, cases[i].flips ? MVM_BACKEND_CUDA : MVM_BACKEND_HOST,
                                     1, 8, 0);
        setenv("MOEVM_MMQ", "on", 1);
        for (size_t b = 0; b < sizeof batches / sizeof *batches; b++) {
            const int experts = b == 3; /* the experts alone on mmq */
            if (experts)
                setenv("MOEVM_MMQ", "experts", 1);
            setenv("MOEVM_GEMM_ROWS", "0", 1);
            const unsigned long up0 = mmq_launches("up"), down0 = mmq_launches("down");
            const unsigned long dense0 = mmq_dense_launches();
            struct run *gpu = run_prompt(path, MVM_BACKEND_CUDA, 1, batches[b], 0);
            const unsigned long up = mmq_launches("up") - up0;
            const unsigned long down = mmq_launches("down") - down0;
            const unsigned long dense = mmq_dense_launches() - dense0;
            CHECK(cases[i].mmq ? up > 0 && up == down : up == 0 && down == 0);
            /* (9: MVM_CUDA_MMQ_ROWS, engine/forward/forward_cuda_impl.h) */
            CHECK((dense > 0) == (cases[i].dense && batches[b] >= 9 && !experts));
            CHECK(gpu != NULL);
            if (ref && gpu) {
                double e = check_rel_l2(gpu->logits, ref->logits, n);
                fprintf(stderr, "  %s %s type %d, batches of %u, mmq%s: relative error %.3g\n",
                        cases[i].arch, cases[i].preset, (int)cases[i].type, batches[b],
                        experts ? " (experts)" : "", e);
                CHECK(e < 2e-3);
            }
            free_run(gpu);
        }
        setenv("MOEVM_GEMM_ROWS", "2", 1);
        unsigned long batched[2];
        for (int on = 0; on <= 1; on++) {
            setenv("MOEVM_MMQ", on ? "on" : "off", 1);
            reset_counters();
            free_run(run_prompt(path, MVM_BACKEND_CUDA, 1, 8, 0));
            batched[on] = calls("cublasGemmBatchedEx");
        }
        CHECK(cases[i].mmq ? batched[1] < batched[0] : batched[1] == batched[0]);
        unsetenv("MOEVM_MMQ"); /* auto: as on (Q8_0's and the K-quants' experts) */
        setenv("MOEVM_GEMM_ROWS", "0", 1);
        const unsigned long up0 = mmq_launches("up");
        free_run(run_prompt(path, MVM_BACKEND_CUDA, 1, 8, 0));
        CHECK((mmq_launches("up") > up0) == (cases[i].mmq == 1));
        unsetenv("MOEVM_GEMM_ROWS");
        free_run(ref);
    }
    /* a device of compute capability 7.5: no mmq kernels, the integer ones instead */
    const char *path = preset_path("olmoe", "tiny", MVM_W_Q8_0);
    size_t n = N_PROMPT * mvm_preset_find("tiny", "olmoe")->spec.n_vocab;
    struct run *cpu = run_prompt(path, MVM_BACKEND_HOST, 1, 8, 0);
    setenv("MOEVM_MMQ", "on", 1);
    setenv("MOEVM_GEMM_ROWS", "0", 1);
    set_cc_major(7);
    const unsigned long up0 = mmq_launches("up");
    struct run *old = run_prompt(path, MVM_BACKEND_CUDA, 1, 8, 0);
    set_cc_major(9);
    unsetenv("MOEVM_GEMM_ROWS");
    unsetenv("MOEVM_MMQ");
    CHECK(old != NULL && mmq_launches("up") == up0);
    CHECK(cpu && old && check_rel_l2(old->logits, cpu->logits, n) < 2e-3);
    free_run(cpu), free_run(old);
}

/* The device's logits are the CPU's to rounding (the kernels' numerics are the CPU's), for
 * each architecture; prefill in batches and token by token give the same. With an F32 KV
 * cache; then the F32 models again with the default F16 one, where a key or value that the
 * two compute a last bit apart may round to F16 values an F16 ulp apart (check_forward
 * compares both against the reference); there the attention runs on the tensor cores
 * wherever they take it (MOEVM_ATTN_MMA=on; gpt-oss's block without a window, with its
 * sinks, not its windowed ones); and with a Q8_0 cache (not deepseek2's latent rows, which
 * the device refuses in Q8_0), the same blocks on both sides where the floats quantized
 * are the same, a quant a step apart where they straddle a rounding boundary. deepseek2: MLA
 * with one q matrix, and with V3's q bottleneck from the older attn_kv_b; glm4moe: GLM-4.5's
 * kind (QK norm) and Air's (none); both with a dense block first and shared experts;
 * minimax-m2: QK norm over the whole q and k, partial RoPE, sigmoid routing with a bias;
 * gpt-oss: sinks, windows of 5 positions (the prompt is 14) on two of its three blocks,
 * biases on the attention, router and experts, its clamped unit, and its MXFP4 experts.
 * The device's experts are packed (MOEVM_PACK: the budget holds them all), most of them
 * not a whole number of pages: every expert read at its packed address. */
static void test_matches_cpu(void)
{
    setenv("MOEVM_PACK", "on", 1);
    static const struct {
        const char *arch, *preset;
        enum mvm_wtype type;
    } cases[] = {{"llama", "tiny", MVM_W_F32}, {"llama", "tiny", MVM_W_Q8_0},
                 {"llama", "tiny", MVM_W_Q4_0}, {"qwen2moe", "tiny", MVM_W_F16},
                 {"qwen3moe", "tiny", MVM_W_BF16}, {"olmoe", "tiny", MVM_W_Q8_0},
                 {"qwen2moe", "tiny", MVM_W_Q4_K}, {"olmoe", "tiny", MVM_W_Q3_K},
                 {"deepseek2", "tiny", MVM_W_F32}, {"deepseek2", "tiny-v3", MVM_W_Q8_0},
                 {"deepseek2", "tiny-v3", MVM_W_Q4_K}, {"glm4moe", "tiny", MVM_W_F16},
                 {"glm4moe", "tiny-air", MVM_W_Q4_0}, {"minimax-m2", "tiny", MVM_W_Q8_0},
                 {"gpt-oss", "tiny", MVM_W_F32}, {"gpt-oss", "tiny", MVM_W_MXFP4}};
    const size_t n_cases = sizeof cases / sizeof *cases;
    for (size_t u = 0; u < 3 * n_cases; u++) {
        const size_t i = u % n_cases;
        const int f16 = u / n_cases == 1, q8 = u / n_cases == 2;
        if (f16 && cases[i].type != MVM_W_F32)
            continue;
        /* Q8_0 caches: llama (no QK norm), OLMoE and MiniMax-M2 (norms over the rows),
         * gpt-oss (rings, sinks), in heads of 32 */
        if (q8 && ((cases[i].type != MVM_W_F32 && cases[i].type != MVM_W_Q8_0) ||
                   !strcmp(cases[i].arch, "deepseek2")))
            continue;
        preset_head_dim = q8 ? 32 : 0;
        kv_type = f16 ? "f16" : q8 ? "q8_0" : "f32";
        if (f16)
            setenv("MOEVM_ATTN_MMA", "on", 1);
        else
            unsetenv("MOEVM_ATTN_MMA");
        const char *path = preset_path(cases[i].arch, cases[i].preset, cases[i].type);
        size_t n = N_PROMPT * mvm_preset_find(cases[i].preset, cases[i].arch)->spec.n_vocab;
        struct run *cpu = run_prompt(path, MVM_BACKEND_HOST, 1, 4, 0);
        const unsigned long mma0 = fakecuda_engine_launches("mvm_g_attention_mma");
        struct run *gpu = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
        const unsigned long mma = fakecuda_engine_launches("mvm_g_attention_mma") - mma0;
        int oss = strcmp(cases[i].arch, "gpt-oss") == 0;
        CHECK(f16 ? mma > 0 : mma == 0); /* an F32 or Q8_0 cache: never */
        /* token by token, gpt-oss's windowed blocks keep a ring of 5 + 1 rows (twice), which
         * the prompt's 14 positions go round more than twice (batches of 4: 9 rows) */
        struct run *serial = i == 0 || oss ? run_prompt(path, MVM_BACKEND_CUDA, 1, 1, 0) : NULL;
        if (cpu && gpu) {
            double e = check_rel_l2(gpu->logits, cpu->logits, n);
            /* Q types: activations quantized to Q8_0 from floats that differ in the last
             * bits may round a value the other way; F32 sums only in another order. */
            double tol = f16 || q8 ? 1e-3 : cases[i].type == MVM_W_F32 ? 1e-5 : 2e-3;
            CHECK(e < tol);
            if (!(e < tol))
                fprintf(stderr, "  %s %s type %d, KV %s: relative error %.3g\n",
                        cases[i].arch, cases[i].preset, (int)cases[i].type, kv_type, e);
            CHECK(memcmp(gpu->sel, cpu->sel, sizeof gpu->sel) == 0);
            CHECK(gpu->resid.accesses == cpu->resid.accesses && gpu->resid.accesses > 0);
            CHECK(gpu->packed && !cpu->packed);
        }
        const double serial_tol = f16 || q8 ? 1e-3 : 1e-5;
        if (serial && gpu && !(check_rel_l2(serial->logits, gpu->logits, n) < serial_tol)) {
            CHECK(0);
            fprintf(stderr, "  %s %s type %d, KV %s: token by token differs\n", cases[i].arch,
                    cases[i].preset, (int)cases[i].type, kv_type);
        }
        free_run(cpu), free_run(gpu), free_run(serial);
    }
    kv_type = NULL;
    preset_head_dim = 0;
    unsetenv("MOEVM_ATTN_MMA");
    setenv("MOEVM_PACK", "off", 1);
}

/* The logits batch_sequences wants, from three sequences' tokens evaluated with
 * mvm_ctx_eval_batch on `backend`, with experts moving (budget 0.5): a call of prompts, one
 * of a sequence's tokens apart in the batch, decode steps; NULL on failure. *rows: how many;
 * *accesses: the experts the layer steps asked for. */
static float *run_batches(const char *path, mvm_backend_kind backend, size_t *rows,
                          uint64_t *accesses)
{
    static const mvm_engine_token calls_[][7] = {
        {{5, 0, 0}, {77, 0, 0}, {300, 0, 1}, {12, 1, 1}, {9, 1, 1}, {410, 2, 1}},
        {{3, 1, 1}, {128, 0, 0}, {64, 1, 0}, {200, 0, 1}, {17, 2, 0}, {42, 2, 1}, {8, 0, 1}},
        {{250, 2, 1}, {8, 1, 1}, {5, 0, 1}}};
    static const uint32_t sizes[] = {6, 7, 3};
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    CHECK_ST(load(path, backend, 0.5, &m), MVM_OK);
    mvm_ctx_policies pol = {.residency = {.evict = "lru"}, .kv_type = "f32", .n_seq = 3};
    if (m)
        CHECK_ST(mvm_ctx_create(m, pool, 32, 4, &pol, &c), MVM_OK);
    float *out = c ? malloc(16 * m->hp.n_vocab * sizeof *out) : NULL;
    *rows = 0;
    for (size_t k = 0; out && k < 3; k++) {
        CHECK_ST(mvm_ctx_eval_batch(c, calls_[k], sizes[k], out + *rows * m->hp.n_vocab),
                 MVM_OK);
        for (uint32_t i = 0; i < sizes[k]; i++)
            *rows += calls_[k][i].logits != 0;
    }
    CHECK(!c || (mvm_ctx_seq_n_past(c, 0) == 7 && mvm_ctx_seq_n_past(c, 1) == 5 &&
                 mvm_ctx_seq_n_past(c, 2) == 4));
    mvm_resid_stats st = {0};
    if (c)
        mvm_resid_get_stats(mvm_ctx_residency(c), &st);
    *accesses = st.accesses;
    mvm_ctx_free(c);
    mvm_model_free(m);
    return out;
}

/* Batches of several sequences (mvm_ctx_eval_batch): the device pass takes each batch whole
 * (one MoE step per layer for all its sequences: the steps ask for the experts the CPU
 * pass's do, not those of each sequence's run apart), each sequence's tokens with its rows
 * of the cache; its logits are the CPU pass's (test_engine checks those against each
 * sequence alone). Grouped attention, gpt-oss's windows, MLA. */
static void test_batch_sequences(void)
{
    static const char *arches[] = {"llama", "gpt-oss", "deepseek2"};
    for (size_t i = 0; i < 3; i++) {
        const char *path = model_path(arches[i], MVM_W_F32);
        size_t rows_cpu, rows_gpu;
        uint64_t acc_cpu, acc_gpu;
        float *cpu = run_batches(path, MVM_BACKEND_HOST, &rows_cpu, &acc_cpu);
        float *gpu = run_batches(path, MVM_BACKEND_CUDA, &rows_gpu, &acc_gpu);
        const size_t n = rows_cpu * mvm_preset_find("tiny", arches[i])->spec.n_vocab;
        CHECK(cpu && gpu && rows_cpu == 11 && rows_gpu == rows_cpu &&
              check_rel_l2(gpu, cpu, n) < 1e-5);
        CHECK(acc_gpu == acc_cpu && acc_cpu > 0);
        free(cpu), free(gpu);
    }
}

/* The logits of a prompt of 150 tokens evaluated as one batch on `backend`, the rows
 * want[0..n_want) wanted (n_want 0: every row), into out; 0 on failure. */
static int run_logit_rows(const char *path, mvm_backend_kind backend, const uint32_t *want,
                          uint32_t n_want, float *out)
{
    enum { N = 150 };
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    CHECK_ST(load(path, backend, 1, &m), MVM_OK);
    if (!m)
        return 0;
    mvm_ctx_policies pol = {.kv_type = "f32"};
    CHECK_ST(mvm_ctx_create(m, pool, 160, 160, &pol, &c), MVM_OK);
    mvm_engine_token t[N];
    for (uint32_t i = 0; i < N; i++)
        t[i] = (mvm_engine_token){(int32_t)((i * 37 + 11) % m->hp.n_vocab), 0, !n_want};
    for (uint32_t i = 0; i < n_want; i++)
        t[want[i]].logits = 1;
    const int ok = c && mvm_ctx_eval_batch(c, t, N, out) == MVM_OK;
    CHECK(ok);
    mvm_ctx_free(c);
    mvm_model_free(m);
    return ok;
}

/* A batch's logits come down a chunk of MVM_CUDA_LOGIT_ROWS rows at a time: every row of
 * 150 (three chunks, the last partial), and rows scattered over them (a chunk's first and
 * last, one alone, the last of all), the CPU pass's each time. */
static void test_logit_chunks(void)
{
    static const uint32_t scattered[] = {3, 63, 64, 65, 127, 128, 149};
    const uint32_t n_sc = sizeof scattered / sizeof *scattered;
    const char *path = model_path("llama", MVM_W_F32);
    const size_t nv = mvm_preset_find("tiny", "llama")->spec.n_vocab;
    float *cpu = malloc(150 * nv * sizeof *cpu), *gpu = malloc(150 * nv * sizeof *gpu);
    for (int all = 1; cpu && gpu && all >= 0; all--) {
        const uint32_t rows = all ? 150 : n_sc;
        for (size_t i = 0; i < rows * nv; i++)
            gpu[i] = NAN; /* poisoned: every wanted row must be written */
        if (run_logit_rows(path, MVM_BACKEND_HOST, scattered, all ? 0 : n_sc, cpu) &&
            run_logit_rows(path, MVM_BACKEND_CUDA, scattered, all ? 0 : n_sc, gpu)) {
            const double e = check_rel_l2(gpu, cpu, rows * nv);
            CHECK(e < 1e-5);
            if (!(e < 1e-5))
                fprintf(stderr, "  %s rows: relative error %.3g\n", all ? "all" : "scattered",
                        e);
            /* the last row alone too: a partial chunk's, which the whole's error could hide */
            CHECK(check_rel_l2(gpu + (rows - 1) * nv, cpu + (rows - 1) * nv, nv) < 1e-5);
        }
    }
    free(cpu), free(gpu);
}

/* mvm_ctx_device_bytes, which an automatic budget leaves room for, is what a context then
 * takes of the device (the fake's cuMemGetInfo, before and after): at least that, and no more
 * than 256-byte rounding of each allocation above it (32 KiB: 4 KiB seen); for grouped-query attention, MLA and
 * gpt-oss's rings, F16, F32 and Q8_0 caches, several lengths, on a device of compute capability
 * 9.0 and 7.5 (whose experts take cuBLAS, not the mmq kernels: the sizing pass asks the
 * driver), with the predict module `predict` (NULL: none; SMoE's speculative one has
 * scratch of its own). A model without its space sizes the same (the load sizes it before
 * making the space). Returns what the context took. */
static uint64_t context_bytes_case(const char *arch, const char *preset, const char *kv,
                                   uint32_t n_ctx, uint32_t batch, int cc, const char *predict)
{
    /* cuMemGetInfo_v2 (0: CUDA_SUCCESS; this test does not include cuda.h) */
    int (*get_info)(size_t *, size_t *) =
        (int (*)(size_t *, size_t *))dlsym(driver_lib, "cuMemGetInfo_v2");
    CHECK(get_info != NULL);
    const char *path = preset_path(arch, preset, MVM_W_Q8_0);
    mvm_model *m = NULL, *probe = NULL;
    mvm_ctx *c = NULL;
    uint64_t used = 0;
    set_cc_major(cc);
    CHECK_ST(load(path, MVM_BACKEND_CUDA, 1, &m), MVM_OK);
    CHECK_ST(mvm_model_probe(path, &probe), MVM_OK);
    if (get_info && m && probe) {
        uint64_t w = 0, rest = 0, w_probe = 0, rest_probe = 0;
        CHECK_ST(mvm_ctx_device_bytes(m, n_ctx, batch, kv, predict, &w, &rest), MVM_OK);
        CHECK_ST(mvm_ctx_device_bytes(probe, n_ctx, batch, kv, predict, &w_probe, &rest_probe),
                 MVM_OK);
        const uint64_t est = w + rest;
        /* the probe of an older deepseek2 file lacks wk_b and wv_b (split from attn_kv_b at
         * load): its KV cache and scratch are the same */
        CHECK(rest == rest_probe && w > 0 && rest > 0 && w_probe <= w);
        size_t free0 = 0, free1 = 0, total = 0;
        mvm_ctx_policies pol = {.kv_type = kv, .prefetch = {.predict = predict ? predict : "none"}};
        CHECK_ST(mvm_ctx_create(m, pool, n_ctx, batch, &pol, &c), MVM_OK);
        CHECK(get_info(&free1, &total) == 0);
        mvm_ctx_free(c);
        CHECK(get_info(&free0, &total) == 0);
        used = free0 - free1;
        CHECK(used > 0 && est >= used && est - used < (32u << 10));
        if (!(est >= used && est - used < (32u << 10)))
            fprintf(stderr, "  %s, compute capability %d: sized %llu bytes, the context took "
                    "%llu\n", arch, cc, (unsigned long long)est, (unsigned long long)used);
    }
    set_cc_major(9);
    mvm_model_free(m), mvm_model_free(probe);
    return used;
}

/* The contexts of context_bytes_case; where the mmq kernels take every layer's experts (Q8_0
 * on compute capability 8.0 or later), no scratch for their batches on cuBLAS: the context
 * takes at least their bytes less than where they take cuBLAS (7.5). */
static void test_context_bytes(void)
{
    static const struct { const char *arch, *preset, *kv; uint32_t n_ctx, batch; } cases[] = {
        {"llama", "tiny", "f32", 32, 4}, {"qwen3moe", "tiny", "f16", 300, 32},
        {"deepseek2", "tiny-v3", "f16", 64, 8}, {"gpt-oss", "tiny", "f32", 100, 1},
        {"glm4moe", "tiny", "f16", 17, 17}, {"qwen3moe", "tiny", "q8_0", 300, 32},
        {"gpt-oss", "tiny", "q8_0", 100, 4}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint64_t used[2];
        preset_head_dim = strcmp(cases[i].kv, "q8_0") ? 0 : 32; /* whole blocks */
        for (int k = 0; k < 2; k++)
            used[k] = context_bytes_case(cases[i].arch, cases[i].preset, cases[i].kv,
                                         cases[i].n_ctx, cases[i].batch, k ? 7 : 9, NULL);
        preset_head_dim = 0;
        if (cases[i].batch < 32) /* no batch reaches MOEVM_GEMM_ROWS: no scratch either way */
            CHECK(used[0] == used[1]);
    }
    /* qwen3moe's shape: the expert batches' inputs, gate/up floats and unit */
    const mvm_preset *p = mvm_preset_find("tiny", "qwen3moe");
    CHECK(p != NULL);
    if (!p)
        return;
    const uint64_t B = 32, BK = B * p->spec.n_expert_used, D = p->spec.n_embd;
    const uint64_t F = mvm_spec_expert_ff(&p->spec);
    const uint64_t batches = (BK + B) * D * 2 + BK * (2 * F > D ? 2 * F : D) * 4 + BK * F * 2;
    const uint64_t sm90 = context_bytes_case("qwen3moe", "tiny", "f16", 300, 32, 9, NULL);
    const uint64_t sm75 = context_bytes_case("qwen3moe", "tiny", "f16", 300, 32, 7, NULL);
    CHECK(sm90 + batches <= sm75);
    if (!(sm90 + batches <= sm75))
        fprintf(stderr, "  mmq: the context took %llu bytes, %llu on a 7.5 device\n",
                (unsigned long long)sm90, (unsigned long long)sm75);
    /* SMoE's speculative pass: its three rows of activations and its rows' list, only in a
     * context that speculates, and sized so */
    const uint64_t spec = context_bytes_case("qwen3moe", "tiny", "f16", 300, 32, 9,
                                             "speculative");
    CHECK(spec >= sm90 + 3 * B * D * 4 + BK * 4);
    if (!(spec >= sm90 + 3 * B * D * 4 + BK * 4))
        fprintf(stderr, "  speculative: the context took %llu bytes, %llu without\n",
                (unsigned long long)spec, (unsigned long long)sm90);
    uint64_t none = 1, none2 = 1;
    mvm_model *m = NULL;
    CHECK_ST(mvm_model_probe(model_path("llama", MVM_W_F32), &m), MVM_OK);
    CHECK_ST(m ? mvm_ctx_device_bytes(m, 8, 1, "f8", NULL, &none, &none2) : MVM_ERR_INVALID,
             MVM_ERR_INVALID);
    CHECK(none == 0 && none2 == 0);
    CHECK_ST(m ? mvm_ctx_device_bytes(m, 8, 1, NULL, "oracle{", &none, &none2)
               : MVM_ERR_INVALID, MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "predict module 'oracle{'") != NULL);
    CHECK_ST(m ? mvm_ctx_device_bytes(m, 8, 1, NULL, "psychic", &none, &none2)
               : MVM_ERR_INVALID, MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "psychic") != NULL);
    mvm_model_free(m);
}

/* A budget of a fraction of the experts: the logits stay bit for bit those of the unlimited
 * run, the routing is the same and nothing stays pinned. Half the experts, every step
 * waiting for its copies: experts move, and every access computes a resident expert. An
 * eighth, no waiting, batches of 4 tokens whose experts cannot all be resident at once:
 * with HOST_NUMA the experts without room run from their homes through their device
 * addresses; without it the steps run in rounds that fit. */
static void test_residency(void)
{
    const char *path = model_path("llama", MVM_W_Q8_0);
    size_t n = N_PROMPT * mvm_preset_find("tiny", "llama")->spec.n_vocab;
    struct run *all = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
    struct run *half = run_prompt(path, MVM_BACKEND_CUDA, 0.5, 4, 1);
    struct run *eighth = run_prompt(path, MVM_BACKEND_CUDA, 0.125, 4, 0);
    if (all && half) {
        CHECK(memcmp(all->logits, half->logits, n * sizeof *all->logits) == 0);
        CHECK(half->space.pages_evicted > 0);
        CHECK(half->resid.bypassed == 0);
    }
    if (all && eighth) {
        CHECK(memcmp(all->logits, eighth->logits, n * sizeof *all->logits) == 0);
        CHECK(memcmp(all->sel, eighth->sel, sizeof all->sel) == 0);
        CHECK(eighth->space.pinned_experts == 0);
        if (home_mapped)
            CHECK(eighth->resid.bypassed > 0 && eighth->resid.extra_rounds == 0);
        else
            CHECK(eighth->resid.bypassed == 0 && eighth->resid.extra_rounds > 0);
    }
    free_run(all), free_run(half), free_run(eighth);
}

/* At a budget, with copies still on the bus when a step needs them (a copy delay): where
 * the homes are unmapped, MOEVM_LOAD_WAIT=device orders the compute stream after each copy
 * (cuStreamWaitEvent) instead of the host waiting for it to land, host does not, and
 * device-late orders it too but queues each round in one launch once all its copies are
 * queued, so that its launches do not depend on when the copies land (device's do: the
 * landed experts go first), as a run without the delay shows, and device-view reads the
 * copies in flight where they land, before their maps; all give the unlimited run's logits
 * bit for bit, and leave nothing pinned. With homes mapped none orders a stream: the host
 * waits. */
static void test_load_wait(void)
{
    const char *path = model_path("llama", MVM_W_Q8_0);
    size_t n = N_PROMPT * mvm_preset_find("tiny", "llama")->spec.n_vocab;
    struct run *all = run_prompt(path, MVM_BACKEND_CUDA, 1, 1, 0);
    const char *modes[] = {"device", "host", "device-late", "device-late", "device-view"};
    unsigned long launches[5] = {0};
    for (int i = 0; i < 5; i++) {
        setenv("MOEVM_LOAD_WAIT", modes[i], 1);
        setenv("MOEVM_DEVICE_ROUTING", "off", 1); /* every step through the host */
        /* each copy's fence done 5 ms after its record: a job lands no sooner, so an expert
         * pinned while its copy is in flight is ordered after it on any machine (a fence
         * done at its record let a fast one land most copies before their pins: 0 orders) */
        copy_delay(i != 3 ? 1000 : 0);
        event_delay(i != 3 ? 5000 : 0);
        const unsigned long waits = calls("cuStreamWaitEvent");
        launches[i] = calls("cuLaunchKernel");
        struct run *half = run_prompt(path, MVM_BACKEND_CUDA, 0.5, 1, 0);
        const unsigned long ordered = calls("cuStreamWaitEvent") - waits;
        launches[i] = calls("cuLaunchKernel") - launches[i];
        copy_delay(0);
        event_delay(0);
        unsetenv("MOEVM_DEVICE_ROUTING");
        unsetenv("MOEVM_LOAD_WAIT");
        if (all && half) {
            CHECK(memcmp(all->logits, half->logits, n * sizeof *all->logits) == 0);
            /* misses were copied; the space's count of pages loaded is not the witness: the
             * worker counts a copy when it finishes the job, after the landing, and the
             * device-ordered modes need not wait for that before the pass ends (it read 0
             * now and then with device-late) */
            CHECK(half->resid.hits < half->resid.accesses && half->space.pinned_experts == 0);
            CHECK(i == 1 || home_mapped ? ordered == 0 : i == 3 || ordered > 0);
            /* device-view read the copies in flight where they land */
            CHECK(i == 4 && !home_mapped ? half->resid.view_holds > 0
                                         : half->resid.view_holds == 0);
        }
        free_run(half);
    }
    if (!home_mapped)
        CHECK(launches[2] == launches[3] && launches[2] < launches[0]);
    free_run(all);
}

/* The device's logits of the prompt (poisoned first; NULL: not kept) with predict module
 * `pred` at `budget`, `batch` tokens a call, and its forecasts' statistics; with `again`,
 * those of a second pass over the same tokens, once the first has made every expert that
 * fits resident. */
static void run_spec(const char *path, const char *pred, double budget, uint32_t batch,
                     float *logits, int again, mvm_prefetch_stats *ps)
{
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    /* α 0.05: a forecast names most of the top-k, by a margin no rounding can cross */
    mvm_ctx_policies pol = {.residency = {.evict = "lru"},
                            .prefetch = {.predict = pred,
                                         .predict_args = strcmp(pred, "none") ? "alpha=0.05"
                                                                              : NULL},
                            .wait_loads = 1};
    *ps = (mvm_prefetch_stats){0};
    CHECK_ST(load(path, MVM_BACKEND_CUDA, budget, &m), MVM_OK);
    if (m)
        CHECK_ST(mvm_ctx_create(m, pool, 32, batch, &pol, &c), MVM_OK);
    size_t nv = m ? m->hp.n_vocab : 0;
    mvm_status st = c ? eval_prompt(c, nv, batch, logits) : MVM_ERR_INVALID;
    if (c && again) {
        mvm_prefetch_stats first;
        mvm_prefetcher_get_stats(mvm_ctx_prefetcher(c), &first);
        mvm_ctx_reset(c);
        if (st == MVM_OK)
            st = eval_prompt(c, nv, batch, NULL);
        mvm_prefetcher_get_stats(mvm_ctx_prefetcher(c), ps);
        ps->forecasts -= first.forecasts;
        ps->named -= first.named;
        ps->named_used -= first.named_used;
    } else if (c) {
        mvm_prefetcher_get_stats(mvm_ctx_prefetcher(c), ps);
    }
    CHECK_ST(st, MVM_OK);
    mvm_ctx_free(c);
    mvm_model_free(m);
}

/* SMoE's speculative pass on the device (forward_cuda.c, speculate) changes nothing the model
 * computes: every logit is bitwise the run's without a predictor, with experts moving (30%
 * of their pages), in batches of 4; its forecasts are made. And it estimates what it should:
 * with every expert resident and landed (a second pass at 100%, a token a batch), its input
 * is the next layer's own MoE input, so every expert it forecasts is routed to. Grouped
 * attention without shared experts (llama), a gated shared expert (qwen2moe, also in Q8_0,
 * whose experts read a quantized input that the pass's own products must not leave
 * changed), and deepseek2's latent attention, dense first block and ungated shared
 * experts. */
static void test_speculative(void)
{
    static const struct { const char *arch; enum mvm_wtype type; } models[] = {
        {"llama", MVM_W_F32}, {"qwen2moe", MVM_W_F32}, {"deepseek2", MVM_W_F32},
        {"qwen2moe", MVM_W_Q8_0}}; /* the pass's products must leave the experts' input */
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        const char *arch = models[i].arch;
        const char *path = model_path(arch, models[i].type);
        const size_t n = N_PROMPT * (size_t)mvm_preset_find("tiny", arch)->spec.n_vocab;
        float *plain = malloc(n * sizeof *plain), *spec = malloc(n * sizeof *spec);
        mvm_prefetch_stats ps;
        run_spec(path, "none", 0.3, 4, plain, 0, &ps);
        copy_delay(1000); /* copies still landing when the pass runs and the rounds begin */
        run_spec(path, "speculative", 0.3, 4, spec, 0, &ps);
        copy_delay(0);
        CHECK(plain && spec && memcmp(plain, spec, n * sizeof *plain) == 0 && plain[0] == plain[0]);
        CHECK(ps.forecasts > 0 && ps.named > 0);
        run_spec(path, "speculative", 1.0, 1, NULL, 1, &ps);
        CHECK(ps.named > 0 && ps.named_used == ps.named);
        if (ps.named_used != ps.named)
            fprintf(stderr, "  %s: %llu of %llu forecast experts used\n", arch,
                    (unsigned long long)ps.named_used, (unsigned long long)ps.named);
        free(plain), free(spec);
    }
}

/* MoEpic's prefetch window (MOEVM_PREFETCH=window) on the device pass, where its copies
 * must land before a kernel reads them: the logits are the all-resident run's, bit for bit,
 * copies were made and nothing stays pinned (the window's order and its cut are
 * tests/test_residency.c's to check). The top-k forecast's copies (the default) are taken
 * back too when their layer routes before they started (which ones, tests/test_sim.c's
 * test_prefetch_window): with every copy delayed 0.5 ms, the logits stay the same. */
static void test_window(void)
{
    const char *path = model_path("llama", MVM_W_Q8_0);
    size_t n = N_PROMPT * mvm_preset_find("tiny", "llama")->spec.n_vocab;
    struct run *all = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 1);
    setenv("MOEVM_PREFETCH", "window", 1);
    struct run *win = run_prompt(path, MVM_BACKEND_CUDA, 0.5, 4, 1);
    unsetenv("MOEVM_PREFETCH");
    copy_delay(500);
    struct run *top = run_prompt(path, MVM_BACKEND_CUDA, 0.5, 1, 1);
    copy_delay(0);
    if (all && win) {
        CHECK(memcmp(all->logits, win->logits, n * sizeof *all->logits) == 0);
        CHECK(win->resid.prefetches > 0 && win->resid.prefetches_cut <= win->resid.prefetches);
        CHECK(win->space.pinned_experts == 0);
    }
    CHECK(top != NULL);
    if (all && top) {
        CHECK(memcmp(all->logits, top->logits, n * sizeof *all->logits) == 0);
        CHECK(top->resid.prefetches > 0 && top->resid.prefetches_cut <= top->resid.prefetches);
        CHECK(top->space.pinned_experts == 0);
    }
    free_run(all), free_run(win), free_run(top);
}

/* The assign module runs experts on the CPU threads from their homes, beside the GPU's
 * (admission, on by default, loads some of them afterwards; off for the runs below that
 * check what the modules alone move):
 * greedy (DALI) at half the experts' bytes; presched (PreScope), which plans prefetches
 * from the predictor's forecasts (none without a predictor); gpu{zerocopy=1}, which never
 * loads, reads every expert in place (bit for bit the resident run's logits): at its own
 * address where the homes are mapped, else at its home's device address, and is refused,
 * saying why, where the device cannot read the homes. The CPU's rows agree with the
 * GPU's to float rounding, greedy's computed while the GPU's copies are still landing; the
 * routing is the same; nothing stays pinned. */
static void test_assign(void)
{
    const char *path = model_path("llama", MVM_W_F32);
    size_t n = N_PROMPT * mvm_preset_find("tiny", "llama")->spec.n_vocab;
    struct run *all = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
    assign = "greedy";
    copy_delay(1000); /* the CPU's experts run while the GPU's copies land */
    struct run *greedy = run_prompt(path, MVM_BACKEND_CUDA, 0.5, 4, 0);
    copy_delay(0);
    /* The modules' own decisions: no admission (policy/admit.h) of what they ran from the
     * homes. */
    setenv("MOEVM_ADMIT", "off", 1);
    assign = "presched"; /* plans from the predictor's forecasts */
    struct run *pre = run_prompt(path, MVM_BACKEND_CUDA, 0.5, 1, 0);
    predict = "none";
    struct run *blind = run_prompt(path, MVM_BACKEND_CUDA, 0.5, 1, 0);
    assign = "gpu";
    assign_args = "zerocopy=1";
    predict = "none"; /* nothing then moves at all */
    struct run *zc = run_prompt(path, MVM_BACKEND_CUDA, 0.125, 4, 0);
    if (!home_mapped)
        check_zerocopy_refused(path);
    unsetenv("MOEVM_ADMIT");
    assign = assign_args = NULL;
    predict = "gate";
    if (all && greedy) {
        CHECK(check_rel_l2(greedy->logits, all->logits, n) < 1e-5);
        CHECK(memcmp(all->sel, greedy->sel, sizeof all->sel) == 0);
        CHECK(greedy->resid.cpu_runs > 0 && greedy->resid.cpu_runs < greedy->resid.accesses);
        CHECK(greedy->resid.admitted <= greedy->resid.prefetches);
        CHECK(greedy->space.pinned_experts == 0);
        /* its CPU experts were timed against the model (mvm_resid_note_cpu): a model
         * exactly right to the last bit is the one outcome that cannot be */
        CHECK(greedy->resid.cpu_scale > 0 && greedy->resid.cpu_scale != 1);
    }
    if (all && pre && blind) {
        CHECK(check_rel_l2(pre->logits, all->logits, n) < 1e-5);
        CHECK(pre->resid.planned > 0 && pre->resid.planned <= pre->resid.prefetches);
        CHECK(blind->resid.planned == 0 && blind->resid.prefetches == 0);
        CHECK(pre->space.pinned_experts == 0 && blind->space.pinned_experts == 0);
    }
    CHECK(zc != NULL);
    if (all && zc) {
        CHECK(memcmp(all->sel, zc->sel, sizeof all->sel) == 0);
        CHECK(zc->space.pages_loaded == 0 && zc->space.pinned_experts == 0);
        CHECK(memcmp(all->logits, zc->logits, n * sizeof *all->logits) == 0);
        CHECK(zc->resid.zerocopy_runs == zc->resid.accesses && zc->resid.cpu_runs == 0);
    }
    free_run(all), free_run(greedy), free_run(zc), free_run(pre), free_run(blind);
}

/* Experts read at their homes beside resident experts in one step (gpu{zerocopy=1} at a
 * quarter of the experts' bytes, with admission: what a step read in place is loaded in
 * the background afterwards, its copies delayed, so that later steps find some landed and
 * some on their way, which the step waits for as a load). Where the homes are not mapped
 * the reads go to the homes' device addresses, at the front of the step's first round, the
 * resident experts after them. The same kernels read the same bytes: the logits are the
 * resident run's bit for bit, nothing stays pinned, and steps read in place. How many of
 * the admitted copies land before their next use is the machine's timing; with each copy
 * landing before the next decision (MOEVM_DETERMINISTIC), the same run also has hits. */
static void test_read_in_place(void)
{
    const char *path = model_path("llama", MVM_W_F32);
    size_t n = N_PROMPT * mvm_preset_find("tiny", "llama")->spec.n_vocab;
    struct run *all = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
    assign = "gpu";
    assign_args = "zerocopy=1";
    for (int ordered = 0; ordered < 2; ordered++) {
        if (ordered)
            setenv("MOEVM_DETERMINISTIC", "on", 1);
        copy_delay(ordered ? 0 : 200);
        struct run *mix = run_prompt(path, MVM_BACKEND_CUDA, 0.25, 4, 0);
        copy_delay(0);
        unsetenv("MOEVM_DETERMINISTIC");
        CHECK(mix != NULL);
        if (all && mix) {
            fprintf(stderr, "  %s: read in place %llu, hits %llu, of %llu accesses; %llu "
                    "pages loaded\n", ordered ? "deterministic" : "copies delayed",
                    (unsigned long long)mix->resid.zerocopy_runs,
                    (unsigned long long)mix->resid.hits,
                    (unsigned long long)mix->resid.accesses,
                    (unsigned long long)mix->space.pages_loaded);
            CHECK(memcmp(all->logits, mix->logits, n * sizeof *all->logits) == 0);
            CHECK(memcmp(all->sel, mix->sel, sizeof all->sel) == 0);
            CHECK(mix->resid.zerocopy_runs > 0 && (!ordered || mix->resid.hits > 0));
            CHECK(mix->resid.zerocopy_runs + mix->resid.hits <= mix->resid.accesses);
            CHECK(mix->space.pages_loaded > 0 && mix->space.pinned_experts == 0);
        }
        free_run(mix);
    }
    assign = assign_args = NULL;
    free_run(all);
}

/* Driver failures: named, and a failed step unpins its experts. */
static void test_failures(void)
{
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    CHECK_ST(load(model_path("llama", MVM_W_F32), MVM_BACKEND_CUDA, 1, &m), MVM_OK);
    if (!m)
        return;
    CHECK(set_fail("cuMemAlloc_v2:10:CUDA_ERROR_OUT_OF_MEMORY") == 0);
    CHECK_ST(mvm_ctx_create(m, pool, 32, 4, NULL, &c), MVM_ERR_NOMEM);
    CHECK(strstr(mvm_last_error(), "device context of 32 positions") != NULL);
    CHECK(strstr(mvm_last_error(), "CUDA_ERROR_OUT_OF_MEMORY") != NULL);
    set_fail(NULL);
    setenv("MOEVM_DEVICE_ROUTING", "off", 1); /* the steps' failures are the host's */
    CHECK_ST(mvm_ctx_create(m, pool, 32, 4, NULL, &c), MVM_OK);
    unsetenv("MOEVM_DEVICE_ROUTING");
    if (c) {
        /* The first expert kernel of the first step: after 7 launches, the attention's
         * (q, k and v in one, the rotation and the keys and values stored into the F16
         * cache in one, its output product adding the residual) and the FFN norm's and
         * router's of a llama layer with F32 weights. */
        CHECK(set_fail("cuLaunchKernel:8") == 0);
        CHECK_ST(mvm_ctx_eval(c, prompt, 2, NULL, 0), MVM_ERR_BACKEND);
        CHECK(strstr(mvm_last_error(), "mvm_g_expert_up_") != NULL);
        mvm_stats s;
        mvm_space_get_stats(m->space, &s);
        CHECK(s.pinned_experts == 0);
        set_fail(NULL);
        CHECK(mvm_ctx_n_past(c) == 0);
        CHECK_ST(mvm_ctx_eval(c, prompt, 2, NULL, 0), MVM_OK);
        /* the first layer's router input and logits, coming down together */
        CHECK(set_fail("cuMemcpyDtoHAsync:1") == 0);
        CHECK(mvm_ctx_eval(c, prompt + 2, 1, NULL, 0) != MVM_OK);
        CHECK(strstr(mvm_last_error(), "cuMemcpyDtoHAsync") != NULL);
        mvm_space_get_stats(m->space, &s);
        CHECK(s.pinned_experts == 0);
        set_fail(NULL);
    }
    mvm_ctx_free(c);
    c = NULL;
    /* the context's pinned staging memory refused: named, nothing left behind */
    CHECK(set_fail("cuMemHostRegister:1") == 0);
    CHECK(mvm_ctx_create(m, pool, 32, 4, NULL, &c) != MVM_OK && c == NULL);
    CHECK(strstr(mvm_last_error(), "cuMemHostRegister (the engine's staging memory)") != NULL);
    set_fail(NULL);
    /* the profile's timing failing is the pass's failure, named */
    setenv("MOEVM_GPU_PROFILE", "on", 1);
    CHECK_ST(mvm_ctx_create(m, pool, 32, 4, NULL, &c), MVM_OK);
    unsetenv("MOEVM_GPU_PROFILE");
    if (c) {
        CHECK(set_fail("cuEventElapsedTime:1") == 0);
        CHECK(mvm_ctx_eval(c, prompt, 2, NULL, 0) != MVM_OK);
        CHECK(strstr(mvm_last_error(), "cuEventElapsedTime (profile)") != NULL);
        set_fail(NULL);
    }
    mvm_ctx_free(c);
    mvm_model_free(m);
}

/* The driver calls of one decode step. */
struct step_calls {
    unsigned long launches, syncs, uploads, downloads;
};

/* The driver calls of one decode step routed by the host (a token after the prompt, its
 * logits), and the model's layers and whether it has a shared expert. Each copy lands
 * before the next is asked (MOEVM_DETERMINISTIC): a round whose copies are still landing
 * when it begins runs its landed experts in a launch of their own, which would count
 * here. */
static struct step_calls step_calls(const char *path, uint32_t *n_layer, int *shexp)
{
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    struct step_calls n = {0};
    CHECK_ST(load(path, MVM_BACKEND_CUDA, 1, &m), MVM_OK);
    setenv("MOEVM_DETERMINISTIC", "on", 1);
    setenv("MOEVM_DEVICE_ROUTING", "off", 1); /* the host routes every step */
    if (m)
        CHECK_ST(mvm_ctx_create(m, pool, 32, 4, NULL, &c), MVM_OK);
    unsetenv("MOEVM_DETERMINISTIC");
    unsetenv("MOEVM_DEVICE_ROUTING");
    if (c) {
        float *logits = malloc(m->hp.n_vocab * sizeof *logits);
        CHECK_ST(mvm_ctx_eval(c, prompt, 3, NULL, 0), MVM_OK);
        reset_counters();
        CHECK_ST(mvm_ctx_eval(c, prompt + 3, 1, logits, 0), MVM_OK);
        n = (struct step_calls){calls("cuLaunchKernel"), calls("cuStreamSynchronize"),
                                calls("cuMemcpyHtoDAsync"), calls("cuMemcpyDtoHAsync")};
        *n_layer = m->hp.n_layer;
        *shexp = m->hp.n_ff_shexp > 0;
        free(logits);
    }
    mvm_ctx_free(c);
    mvm_model_free(m);
    return n;
}

/* A matrix product's input is quantized once for the products that share it and its
 * activation format: q, k and v; the shared expert's gate, up and gate projection; and the
 * norm before q, k and v, or before the router (F32) and the routed experts, quantizes
 * their input in its own pass. The launches of a Q8_0 model's step less an F32 model's
 * (which quantizes nothing) are the quantizations launched on their own: per layer the
 * attention output's and the routed experts' down input's (decode's up, up1, leaves floats:
 * kernels/cuda/kernels.h), with a shared expert its gate/up/gate-projection's and its
 * down's; then the output's. */
static void test_quantize_once(void)
{
    static const char *const archs[] = {"llama", "qwen2moe"};
    for (size_t i = 0; i < 2; i++) {
        uint32_t layers = 0;
        int shexp = 0;
        unsigned long f32 = step_calls(model_path(archs[i], MVM_W_F32), &layers,
                                       &shexp).launches;
        unsigned long q8 = step_calls(model_path(archs[i], MVM_W_Q8_0), &layers,
                                      &shexp).launches;
        const unsigned long want = layers * (2u + (shexp ? 2u : 0u)) + 1u;
        CHECK(shexp == (i == 1));
        CHECK(q8 - f32 == want);
        if (q8 - f32 != want)
            fprintf(stderr, "%s: %lu quantizations in a step, not %lu\n", archs[i], q8 - f32,
                    want);
    }
}

/* llama.cpp's -ngl 99 --cpu-moe (--n-cpu-moe at least the layers) on a GPU: the CPU
 * computes every expert from its home, the GPU the rest, to the logits of the run with every
 * expert on the GPU (to float rounding, as the assign module's CPU rows); nothing loads into
 * the space, which holds one expert's pages; a module that would move or place experts is
 * refused by name. With MOEVM_DEVICE_CPU=on, decode routes on the device, every choice the
 * CPU's share (forward_cuda_cpu.c): the same, each token's layers routed and waited for
 * there. */
static void test_cpu_moe(void)
{
    const char *path = model_path("qwen2moe", MVM_W_Q8_0); /* a shared expert on the GPU */
    size_t n = N_PROMPT * mvm_preset_find("tiny", "qwen2moe")->spec.n_vocab;
    const char *keep = predict;
    predict = "none"; /* refused where nothing moves, as below */
    struct run *all = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
    cpu_moe = 99;
    struct run *cpu = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
    /* and decode routed on the device, the CPU's share every choice (MOEVM_DEVICE_CPU) */
    setenv("MOEVM_DEVICE_CPU", "on", 1);
    const unsigned long routed0 = fakecuda_engine_launches("mvm_g_route"),
                        waits0 = fakecuda_engine_launches("mvm_g_cpu_wait");
    struct run *share = run_prompt(path, MVM_BACKEND_CUDA, 1, 1, 0);
    const unsigned long routed = fakecuda_engine_launches("mvm_g_route") - routed0,
                        waits = fakecuda_engine_launches("mvm_g_cpu_wait") - waits0;
    unsetenv("MOEVM_DEVICE_CPU");
    predict = keep;
    struct run *runs[] = {cpu, share};
    for (int i = 0; i < 2 && all; i++) {
        CHECK(runs[i] != NULL);
        if (!runs[i])
            continue;
        CHECK(check_rel_l2(runs[i]->logits, all->logits, n) < 1e-5);
        CHECK(memcmp(all->sel, runs[i]->sel, sizeof all->sel) == 0);
        CHECK(runs[i]->resid.accesses > 0 &&
              runs[i]->resid.cpu_runs == runs[i]->resid.accesses);
        CHECK(runs[i]->space.pages_loaded == 0 && runs[i]->space.pinned_experts == 0);
    }
    CHECK(routed == N_PROMPT * 2 && waits == routed); /* every token, both MoE layers */
    mvm_model *m = NULL;
    CHECK_ST(load(path, MVM_BACKEND_CUDA, 1, &m), MVM_OK);
    mvm_space_info info;
    if (m && mvm_space_get_info(m->space, &info) == MVM_OK) {
        CHECK(m->experts_at_home && strcmp(info.backend, "cuda") == 0);
        CHECK(info.device_pages * info.page_size >= m->expert_bytes &&
              (info.device_pages - 1) * info.page_size < m->expert_bytes);
    }
    mvm_ctx *c = NULL;
    mvm_ctx_policies pol = {.residency = {.assign = "greedy"}};
    CHECK_ST(m ? mvm_ctx_create(m, pool, 32, 4, &pol, &c) : MVM_ERR_INVALID, MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "assign greedy: with --n-cpu-moe at least the layers") !=
          NULL);
    mvm_ctx_free(c);
    mvm_model_free(m);
    cpu_moe = 0;
    free_run(all), free_run(cpu), free_run(share);
}

/* The host's round trips of a decode step, with every expert resident: a layer waits for
 * the device once (the router's input and logits, downloaded together; the last layer's
 * step ends there), the logits once; a layer sends its rows and its experts' list in one
 * copy, after the token's embedding. */
static void test_round_trips(void)
{
    uint32_t layers = 0;
    int shexp = 0;
    struct step_calls n = step_calls(model_path("llama", MVM_W_F32), &layers, &shexp);
    CHECK(layers > 0 && n.syncs == layers + 1);
    CHECK(n.uploads == layers + 1 && n.downloads == 2 * layers + 1);
    if (n.syncs != layers + 1 || n.uploads != layers + 1)
        fprintf(stderr, "%u layers: %lu syncs, %lu uploads, %lu downloads\n", layers, n.syncs,
                n.uploads, n.downloads);
}

/* Decode routed on the device (engine/forward/forward_cuda_route.c), with every expert
 * resident: once the budget holds them all, the first token asks them all resident; once
 * they are, they stay pinned, and a token waits for the device once (its logits), sends
 * its embedding (and its position, in the same copy) and brings its logits and the steps'
 * stage down: no layer waits. Queued as a CUDA graph (`graph`, the default), its kernels
 * are one graph launch, the graph built once and launched as it is after: the kernels that
 * take the position read it on the device, so no node changes (an F16 cache here: the
 * keys and values staged, then stored); `launches` queues them one by one. The policies
 * see a routed token's steps once the next token is queued, or at mvm_ctx_settle, in
 * order: the route observer's last position lags by one until then. */
struct seen_steps {
    uint32_t n, last_pos, last_layer;
    int in_order;
};

static void see_step(void *ctx, const mvm_route_record *r)
{
    struct seen_steps *s = ctx;
    if (s->n)
        s->in_order &= r->pos > s->last_pos || r->layer > s->last_layer; /* a batch's go
                                                                          layer by layer */
    s->n++, s->last_pos = r->pos, s->last_layer = r->layer;
}

static void test_device_round_trips(void)
{
    static const char *const modes[] = {"graph", "launches"};
    for (int g = 0; g < 2; g++) {
        mvm_model *m = NULL;
        mvm_ctx *c = NULL;
        CHECK_ST(load(model_path("qwen2moe", MVM_W_Q8_0), MVM_BACKEND_CUDA, 1, &m), MVM_OK);
        setenv("MOEVM_DETERMINISTIC", "on", 1);
        setenv("MOEVM_DEVICE_ROUTING", modes[g], 1);
        if (m)
            CHECK_ST(mvm_ctx_create(m, pool, 32, 4, NULL, &c), MVM_OK);
        unsetenv("MOEVM_DETERMINISTIC");
        unsetenv("MOEVM_DEVICE_ROUTING");
        if (!c) {
            mvm_model_free(m);
            return;
        }
        const uint32_t all = m->hp.n_layer * m->hp.n_expert;
        float *logits = malloc(m->hp.n_vocab * sizeof *logits);
        struct seen_steps seen = {.in_order = 1};
        mvm_ctx_set_route_observer(c, see_step, &seen);
        CHECK_ST(mvm_ctx_eval(c, prompt, 3, NULL, 0), MVM_OK);
        mvm_stats st = {0};
        uint32_t t = 3; /* tokens until every expert is resident and pinned: the copies land */
        reset_counters();
        for (; t < N_PROMPT && st.pinned_experts < all; t++) {
            CHECK_ST(mvm_ctx_eval(c, prompt + t, 1, logits, 0), MVM_OK);
            mvm_space_get_stats(m->space, &st);
        }
        CHECK(st.pinned_experts == all && t + 2 < N_PROMPT);
        CHECK((calls("cuGraphAddKernelNode") > 0) == (g == 0)); /* the first routed token's */
        for (int k = 0; k < 2; k++, t++) { /* the next two tokens: the same graph */
            reset_counters();
            CHECK_ST(mvm_ctx_eval(c, prompt + t, 1, logits, 0), MVM_OK);
            unsigned long syncs = calls("cuStreamSynchronize"), up = calls("cuMemcpyHtoDAsync"),
                          down = calls("cuMemcpyDtoHAsync"), launches = calls("cuLaunchKernel"),
                          graphs = calls("cuGraphLaunch"), built = calls("cuGraphAddKernelNode"),
                          set = calls("cuGraphExecKernelNodeSetParams");
            CHECK(syncs == 1 && up == 1 && down == 2);
            if (g == 0)
                CHECK(launches == 0 && graphs == 1 && built == 0 && set == 0);
            else
                CHECK(launches > 0 && graphs == 0 && built == 0);
            if (syncs != 1 || up != 1 || (g == 0 && (launches || graphs != 1 || built || set)))
                fprintf(stderr, "a routed token (%s): %lu syncs, %lu uploads, %lu downloads, "
                        "%lu launches, %lu graph launches, %lu nodes, %lu updated\n", modes[g],
                        syncs, up, down, launches, graphs, built, set);
            CHECK(seen.last_pos + 1 == t && seen.last_layer + 1 == m->hp.n_layer);
            const uint32_t n_seen = seen.n;
            CHECK_ST(mvm_ctx_settle(c), MVM_OK);
            CHECK(seen.last_pos == t && seen.n == n_seen + m->hp.n_layer);
            CHECK_ST(mvm_ctx_settle(c), MVM_OK); /* nothing owed twice */
            CHECK(seen.n == n_seen + m->hp.n_layer && seen.in_order);
        }
        mvm_resid_stats r0, r1; /* a reader settles: the last token's steps counted */
        mvm_resid_get_stats(mvm_ctx_residency(c), &r0);
        CHECK_ST(mvm_ctx_eval(c, prompt + t, 1, logits, 0), MVM_OK);
        mvm_resid_get_stats(mvm_ctx_residency(c), &r1);
        CHECK(seen.last_pos == t && seen.in_order);
        CHECK(r1.accesses - r0.accesses == (uint64_t)m->hp.n_layer * m->hp.n_expert_used);
        CHECK_ST(mvm_ctx_eval(c, prompt + t + 1, 3, NULL, 0), MVM_OK); /* routed by the host */
        CHECK(seen.last_pos == t + 3 && seen.in_order);
        free(logits);
        mvm_ctx_free(c);
        mvm_space_get_stats(m->space, &st);
        CHECK(st.pinned_experts == 0); /* the context's end lets them go */
        mvm_model_free(m);
    }
}

/* A server's sequences decoded in turn, a token a call, every expert resident: each call
 * routed on the device and replayed from the same graph, updated for the sequence's rows of
 * the cache and its position; the logits those of the host's routing to the bit. Grouped
 * attention with an F16 cache (keys and values staged, then stored), gpt-oss's windows
 * (rings), MLA. */
static float *run_sequences(const char *path, const char *routing, uint32_t *graphs)
{
    static const int32_t toks[] = {5, 77, 300, 12, 9, 410, 3, 128, 64, 200, 17, 42};
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    CHECK_ST(load(path, MVM_BACKEND_CUDA, 1, &m), MVM_OK);
    setenv("MOEVM_DETERMINISTIC", "on", 1);
    setenv("MOEVM_DEVICE_ROUTING", routing, 1);
    mvm_ctx_policies pol = {.residency = {.evict = "lru"}, .kv_type = "f16", .n_seq = 3};
    if (m)
        CHECK_ST(mvm_ctx_create(m, pool, 32, 4, &pol, &c), MVM_OK);
    unsetenv("MOEVM_DETERMINISTIC");
    unsetenv("MOEVM_DEVICE_ROUTING");
    const size_t n = sizeof toks / sizeof *toks, nv = m ? m->hp.n_vocab : 0;
    float *out = c ? malloc(n * nv * sizeof *out) : NULL;
    reset_counters();
    for (size_t i = 0; out && i < n; i++) {
        mvm_engine_token t = {toks[i], (uint32_t)(i % 3), 1};
        CHECK_ST(mvm_ctx_eval_batch(c, &t, 1, out + i * nv), MVM_OK);
    }
    *graphs = (uint32_t)calls("cuGraphLaunch");
    mvm_ctx_free(c);
    mvm_model_free(m);
    return out;
}

static void test_device_sequences(void)
{
    static const char *arches[] = {"llama", "gpt-oss", "deepseek2"};
    /* the graph's updates do not depend on how the homes are mapped: one variant runs it */
    for (size_t i = 0; home_mapped && i < 3; i++) {
        const char *path = model_path(arches[i], MVM_W_F32);
        uint32_t g_host = 0, g_dev = 0;
        float *host = run_sequences(path, "off", &g_host);
        float *dev = run_sequences(path, "graph", &g_dev);
        const size_t n = 12 * mvm_preset_find("tiny", arches[i])->spec.n_vocab;
        CHECK(host && dev && memcmp(host, dev, n * sizeof *host) == 0);
        CHECK(g_host == 0 && g_dev > 6); /* routed once every expert was resident */
        if (g_dev <= 6)
            fprintf(stderr, "  %s: %u graph launches\n", arches[i], g_dev);
        free(host), free(dev);
    }
}

/* A driver that refuses a decode token's graph, at any of its calls: the token is queued
 * launch by launch instead (the same logits to the bit), and so is every token after it:
 * graph launches stop at the failure (counted with it, where it is cuGraphLaunch). An F32
 * cache, whose keys and values the products write in place, at the position's rows: its
 * nodes change from token to token (an F16 cache's read the position on the device). */
static void test_graph_faults(void)
{
    static const struct {
        const char *fail;
        unsigned long graph_launches;
    } cases[] = {{"cuGraphAddKernelNode:3", 0}, {"cuGraphInstantiateWithFlags:1", 0},
                 {"cuGraphExecKernelNodeSetParams:2", 1}, {"cuGraphLaunch:2", 2}};
    const char *path = model_path("llama", MVM_W_Q8_0);
    size_t n = N_PROMPT * mvm_preset_find("tiny", "llama")->spec.n_vocab;
    if (!home_mapped) /* nor does a graph's failure: one variant runs it */
        return;
    setenv("MOEVM_DETERMINISTIC", "on", 1);
    kv_type = "f32";
    struct run *clean = run_prompt(path, MVM_BACKEND_CUDA, 1, 1, 0);
    for (size_t i = 0; i < sizeof cases / sizeof *cases && clean; i++) {
        CHECK(set_fail(cases[i].fail) == 0);
        reset_counters();
        struct run *r = run_prompt(path, MVM_BACKEND_CUDA, 1, 1, 0);
        unsigned long graphs = calls("cuGraphLaunch");
        set_fail(NULL);
        CHECK(r && memcmp(r->logits, clean->logits, n * sizeof *r->logits) == 0);
        CHECK(graphs == cases[i].graph_launches);
        if (graphs != cases[i].graph_launches)
            fprintf(stderr, "  %s: %lu graph launches\n", cases[i].fail, graphs);
        free_run(r);
    }
    unsetenv("MOEVM_DETERMINISTIC");
    kv_type = NULL;
    free_run(clean);
}

/* The same tokens, one a call, routed by the host and on the device (its kernels launched
 * one by one, and as a graph): the same logits to the bit, the same choices and router
 * inputs seen by the route observer (a replayed trace's choices, where one is), the same
 * steps counted; routed on
 * the device only where every expert fits (budget 1: all pinned at the end), never at 0.5.
 * Softmax and sigmoid routers, a choosing bias, expert groups (V2's, V3's), gpt-oss's
 * biased router, shared experts. */
static void test_device_routing(void)
{
    static const struct {
        const char *arch, *preset;
        enum mvm_wtype type;
    } cases[] = {{"llama", "tiny", MVM_W_Q8_0},       {"qwen2moe", "tiny", MVM_W_Q4_K},
                 {"deepseek2", "tiny", MVM_W_Q8_0},   {"deepseek2", "tiny-v3", MVM_W_Q8_0},
                 {"minimax-m2", "tiny", MVM_W_F16},   {"gpt-oss", "tiny", MVM_W_MXFP4}};
    /* every router once, where the homes are mapped; the first elsewhere (steps in rounds),
     * at half the budget too, and with a replayed trace's routing (the last round) */
    const size_t n_cases = home_mapped ? sizeof cases / sizeof *cases : 1;
    for (size_t u = 0; u <= n_cases; u++)
        for (int half = 0; half < (u == 0 ? 2 : 1); half++) {
            const size_t i = u % n_cases;
            replayed = u == n_cases;
            const char *path = preset_path(cases[i].arch, cases[i].preset, cases[i].type);
            const size_t n =
                N_PROMPT * mvm_preset_find(cases[i].preset, cases[i].arch)->spec.n_vocab;
            const double budget = half ? 0.5 : 1;
            setenv("MOEVM_DETERMINISTIC", "on", 1); /* the copies asked land in time */
            setenv("MOEVM_DEVICE_ROUTING", "off", 1);
            struct run *host = run_prompt(path, MVM_BACKEND_CUDA, budget, 1, 0);
            setenv("MOEVM_DEVICE_ROUTING", "launches", 1);
            struct run *each = run_prompt(path, MVM_BACKEND_CUDA, budget, 1, 0);
            unsetenv("MOEVM_DEVICE_ROUTING"); /* graph */
            struct run *dev = run_prompt(path, MVM_BACKEND_CUDA, budget, 1, 0);
            unsetenv("MOEVM_DETERMINISTIC");
            if (host && each && dev)
                CHECK(memcmp(each->logits, dev->logits, n * sizeof *dev->logits) == 0 &&
                      memcmp(each->sel, dev->sel, sizeof dev->sel) == 0 &&
                      each->space.pinned_experts == dev->space.pinned_experts);
            free_run(each);
            if (host && dev) {
                const uint32_t all = dev->experts;
                int same = memcmp(host->logits, dev->logits, n * sizeof *host->logits) == 0;
                CHECK(same && memcmp(host->sel, dev->sel, sizeof host->sel) == 0);
                CHECK(memcmp(host->hidden, dev->hidden, sizeof host->hidden) == 0);
                CHECK(dev->resid.accesses == host->resid.accesses);
                CHECK(host->space.pinned_experts == 0);
                CHECK(dev->space.pinned_experts == (half ? 0 : all));
                if (!same || dev->space.pinned_experts != (half ? 0 : all))
                    fprintf(stderr, "  %s %s budget %.1f%s: logits %s, %u pinned\n",
                            cases[i].arch, cases[i].preset, budget,
                            replayed ? ", replayed" : "", same ? "same" : "differ",
                            dev->space.pinned_experts);
                if (replayed) { /* the trace's choice ran, not the router's */
                    int as_replayed = 1;
                    for (uint32_t p = 0; p < N_PROMPT; p++) {
                        int sel[2];
                        float w[2];
                        replay(NULL, 1, p, sel, w);
                        as_replayed &= dev->sel[p][1][0] == sel[0] && dev->sel[p][1][1] == sel[1];
                    }
                    CHECK(as_replayed);
                }
            }
            free_run(host), free_run(dev);
        }
    replayed = 0;
}

/* Prompt batches routed on the device (engine/forward/forward_cuda_prompt.c) against the
 * host's routing (MOEVM_PROMPT_ROUTING=host), in batches of 4 (the last of 2), every expert
 * resident (the first batch asks them all; routed on the device from the first batch that
 * finds them so): the same logits to the bit, the same choices and router inputs seen by the
 * route observer, the same accesses and hits counted. Softmax and sigmoid routers, a
 * choosing bias, expert groups, gpt-oss's biased router and down biases, shared experts,
 * K-quant experts on the mmq kernels, the other products and the attention on cuBLAS
 * beside mmq's experts (MOEVM_MMQ=experts), a benchmark's replayed routing; and six blocks, so that the stage's
 * ring of four
 * layers comes round (each layer replayed before its slot is taken again). A device whose
 * routing answers an expert out of range fails the batch, named; so do a failed wait for
 * a layer's stage and a second stream the driver refuses, and the next batch runs; pinned
 * rings the driver refuses leave the batches to the host's routing, with the same logits. */
static void test_prompt_routing(void)
{
    static const struct {
        const char *arch, *preset;
        enum mvm_wtype type;
        uint32_t layers;
        int gemm; /* the other products and the prompt's attention on cuBLAS, the experts
                     on mmq's kernels (MOEVM_MMQ=experts) */
        int replay; /* a benchmark's replayed routing (replay) */
    } cases[] = {{"llama", "tiny", MVM_W_Q8_0, 6, 0, 0},    {"qwen2moe", "tiny", MVM_W_Q4_K, 0, 0, 0},
                 {"olmoe", "tiny", MVM_W_Q4_K, 0, 0, 0},    {"deepseek2", "tiny", MVM_W_Q8_0, 0, 0, 0},
                 {"deepseek2", "tiny-v3", MVM_W_Q8_0, 0, 0, 0},
                 {"gpt-oss", "tiny", MVM_W_MXFP4, 0, 0, 0}, {"olmoe", "tiny", MVM_W_Q8_0, 0, 1, 0},
                 {"llama", "tiny", MVM_W_Q8_0, 0, 0, 1}};
    setenv("MOEVM_DETERMINISTIC", "on", 1);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        replayed = cases[i].replay;
        if (cases[i].gemm) {
            setenv("MOEVM_GEMM_ROWS", "2", 1);
            setenv("MOEVM_MMQ", "experts", 1);
        }
        preset_layers = cases[i].layers;
        const char *path = preset_path(cases[i].arch, cases[i].preset, cases[i].type);
        preset_layers = 0;
        const size_t n = N_PROMPT * mvm_preset_find(cases[i].preset, cases[i].arch)->spec.n_vocab;
        setenv("MOEVM_PROMPT_ROUTING", "host", 1);
        const unsigned long r0 = fakecuda_engine_launches("mvm_g_route_rows");
        struct run *host = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
        const unsigned long r1 = fakecuda_engine_launches("mvm_g_route_rows");
        unsetenv("MOEVM_PROMPT_ROUTING");
        reset_counters();
        struct run *dev = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
        const unsigned long routed = fakecuda_engine_launches("mvm_g_route_rows") - r1;
        CHECK(r1 == r0 && routed > 0);
        CHECK((calls("cublasGemmEx") > 0 && calls("cublasGemmBatchedEx") > 0) ==
              cases[i].gemm);
        if (host && dev) {
            const int same = memcmp(host->logits, dev->logits, n * sizeof *host->logits) == 0;
            CHECK(same && memcmp(host->sel, dev->sel, sizeof host->sel) == 0);
            CHECK(memcmp(host->hidden, dev->hidden, sizeof host->hidden) == 0);
            CHECK(dev->resid.accesses == host->resid.accesses && dev->seen == host->seen);
            fprintf(stderr, "  %s %s: logits %s, %llu/%llu accesses, %llu/%llu hits, %lu "
                    "layers routed\n", cases[i].arch, cases[i].preset, same ? "same" : "differ",
                    (unsigned long long)dev->resid.accesses,
                    (unsigned long long)host->resid.accesses,
                    (unsigned long long)dev->resid.hits, (unsigned long long)host->resid.hits,
                    routed);
            for (uint32_t p = 0; replayed && p < N_PROMPT; p++) { /* the trace's choice ran */
                int sel[2];
                float w[2];
                replay(NULL, 1, p, sel, w);
                CHECK(dev->sel[p][1][0] == sel[0] && dev->sel[p][1][1] == sel[1]);
            }
        }
        free_run(host), free_run(dev);
        unsetenv("MOEVM_GEMM_ROWS");
        unsetenv("MOEVM_MMQ");
    }
    replayed = 0;
    /* a wrong answer from the device, and a failed wait: named, the batch failed */
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    CHECK_ST(load(model_path("llama", MVM_W_Q8_0), MVM_BACKEND_CUDA, 1, &m), MVM_OK);
    if (m)
        CHECK_ST(mvm_ctx_create(m, pool, 32, 4, NULL, &c), MVM_OK);
    if (c) {
        CHECK_ST(mvm_ctx_eval(c, prompt, 4, NULL, 0), MVM_OK); /* every expert asked */
        setenv("FAKECUDA_ROUTE_BAD", "1", 1);
        CHECK(mvm_ctx_eval(c, prompt + 4, 4, NULL, 0) == MVM_ERR_BACKEND);
        CHECK(strstr(mvm_last_error(), "the device's routing chose expert") != NULL);
        unsetenv("FAKECUDA_ROUTE_BAD");
        CHECK(set_fail("cuEventSynchronize:1") == 0);
        CHECK(mvm_ctx_eval(c, prompt + 4, 4, NULL, 0) != MVM_OK);
        CHECK(strstr(mvm_last_error(), "cuEventSynchronize (mark)") != NULL);
        set_fail(NULL);
        CHECK_ST(mvm_ctx_eval(c, prompt + 4, 4, NULL, 0), MVM_OK);
    }
    mvm_ctx_free(c);
    /* the second stream refused (made at a context's first batch routed here, every expert
     * resident already): named, and the next batch makes it */
    c = NULL;
    if (m)
        CHECK_ST(mvm_ctx_create(m, pool, 32, 4, NULL, &c), MVM_OK);
    if (c) {
        CHECK(set_fail("cuStreamCreate:1") == 0);
        CHECK(mvm_ctx_eval(c, prompt, 4, NULL, 0) != MVM_OK);
        CHECK(strstr(mvm_last_error(), "cuStreamCreate (aside)") != NULL);
        set_fail(NULL);
        CHECK_ST(mvm_ctx_eval(c, prompt, 4, NULL, 0), MVM_OK);
    }
    mvm_ctx_free(c);
    /* the pinned rings refused: the host routes, the same logits */
    float *want = NULL, *got = NULL;
    const size_t nv = mvm_preset_find("tiny", "llama")->spec.n_vocab;
    for (int refuse = 0; refuse <= 1 && m; refuse++) {
        c = NULL;
        CHECK_ST(mvm_ctx_create(m, pool, 32, 4, NULL, &c), MVM_OK);
        float *l = malloc(4 * nv * sizeof *l);
        if (refuse)
            got = l;
        else
            want = l;
        const unsigned long r0 = fakecuda_engine_launches("mvm_g_route_rows");
        CHECK(!refuse || set_fail("cuMemHostRegister:1") == 0); /* the rings', once pinned */
        CHECK_ST(mvm_ctx_eval(c, prompt, 4, NULL, 0), MVM_OK); /* (all resident already) */
        set_fail(NULL);
        CHECK_ST(mvm_ctx_eval(c, prompt + 4, 4, l, 1), MVM_OK);
        CHECK((fakecuda_engine_launches("mvm_g_route_rows") > r0) == !refuse);
        mvm_ctx_free(c);
    }
    CHECK(want && got && memcmp(want, got, 4 * nv * sizeof *want) == 0);
    free(want), free(got);
    mvm_model_free(m);
    unsetenv("MOEVM_DETERMINISTIC");
}

/* Decode at a budget routed on the device (MOEVM_BUDGET_ROUTING=in-place and
 * read-through, forward_cuda_route.c): every token's layers queued at once, each expert
 * read where the table sent up before the token says, its own address once landed, else
 * its home's device address (its own is unmapped there where homes are not mapped: a wrong
 * table reads nothing there, and the fake faults), or read-through's slab while its map is
 * under way. The logits, choices and router inputs are the host-routed run's bit for bit;
 * every step is replayed to the policies, some read in place and some hits, nothing stays
 * pinned. In place, admission loads misses between tokens; read-through, the kernels keep
 * misses as they read them (a slab a token here: the budget holds four experts) and nothing
 * is admitted, and the pool is given back with the context. Read-through once more with
 * the worker's maps held from the third token's replay to the tenth's (homes unmapped,
 * where the host maps nothing itself; no MOEVM_DETERMINISTIC, which would wait for them):
 * what was kept meanwhile is read at its slab, as the table says while its map waits.
 * Read-through replays a token while the next one computes (forward_cuda_route.c,
 * land_early), but before it where a config module (fixedpoint here) evicts as it
 * observes: the same logits either way. */
static void test_budget_routing(void)
{
    const char *path = preset_path("llama", "tiny", MVM_W_Q8_0);
    const size_t n = N_PROMPT * mvm_preset_find("tiny", "llama")->spec.n_vocab;
    setenv("MOEVM_DETERMINISTIC", "on", 1); /* admission's copies land in time */
    struct run *host = run_prompt(path, MVM_BACKEND_CUDA, 0.3, 1, 0);
    for (int mode = 0; mode < 4; mode++) {
        const int through = mode > 0;
        if (mode == 2 && home_mapped)
            continue;
        if (mode == 2) { /* and no forecast, whose copies would wait for the maps too */
            unsetenv("MOEVM_DETERMINISTIC");
            hold_from = 2, hold_to = 9;
            predict = "none";
        }
        if (mode == 3) { /* a config module evicts as it observes: replays before a token */
            setenv("MOEVM_DETERMINISTIC", "on", 1);
            setenv("MOEVM_CONFIG", "fixedpoint", 1);
        }
        setenv("MOEVM_BUDGET_ROUTING", through ? "read-through" : "in-place", 1);
        setenv("MOEVM_ADMIT", "steps", 1);
        const unsigned long routed0 = fakecuda_engine_launches("mvm_g_route");
        struct run *dev = run_prompt(path, MVM_BACKEND_CUDA, 0.3, 1, 0);
        const unsigned long routed = fakecuda_engine_launches("mvm_g_route") - routed0;
        unsetenv("MOEVM_BUDGET_ROUTING");
        unsetenv("MOEVM_ADMIT");
        unsetenv("MOEVM_CONFIG");
        hold_maps(0);
        hold_from = hold_to = -1;
        predict = "gate";
        CHECK(host && dev);
        if (host && dev) {
            fprintf(stderr, "  %s at 30%%: %llu accesses, %llu hits, %llu read in place, %llu "
                    "admitted, %llu kept as read, %llu read at their slabs; %lu steps routed "
                    "on the device\n",
                    mode == 3   ? "read-through, replays before each token"
                    : mode == 2 ? "read-through, maps held"
                    : through   ? "read-through, replays behind"
                                : "in-place",
                    (unsigned long long)dev->resid.accesses,
                    (unsigned long long)dev->resid.hits,
                    (unsigned long long)dev->resid.zerocopy_runs,
                    (unsigned long long)dev->resid.admitted,
                    (unsigned long long)dev->resid.filled,
                    (unsigned long long)dev->resid.slab_reads, routed);
            CHECK(memcmp(host->logits, dev->logits, n * sizeof *host->logits) == 0);
            CHECK(memcmp(host->sel, dev->sel, sizeof host->sel) == 0);
            CHECK(memcmp(host->hidden, dev->hidden, sizeof host->hidden) == 0);
            CHECK(routed == N_PROMPT * 2); /* the tiny models' two MoE layers, every token */
            CHECK(dev->resid.accesses == host->resid.accesses);
            CHECK(dev->resid.zerocopy_runs > 0 && (mode == 2 || dev->resid.hits > 0));
            CHECK(dev->resid.hits + dev->resid.zerocopy_runs == dev->resid.accesses);
            CHECK(dev->space.pinned_experts == 0 && dev->reserved_left == 0);
            if (mode == 2) {
                CHECK(dev->resid.filled > 0 && dev->resid.slab_reads > 0);
            } else if (through) {
                CHECK(dev->resid.filled > 0 && dev->resid.admitted == 0);
                CHECK(dev->space.pages_filled > 0 && dev->space.reserved_pages > 0);
                CHECK(dev->resid.slab_reads == 0); /* each landed before the next token */
            } else {
                CHECK(dev->resid.admitted > 0 && dev->space.pages_loaded > 0);
                CHECK(dev->resid.filled == 0 && dev->space.pages_filled == 0);
            }
        }
        free_run(dev);
    }
    unsetenv("MOEVM_DETERMINISTIC");
    free_run(host);
}

/* A slot space (MOEVM_SLOTS=on, mvm_space_desc.slots): experts read where their copies
 * landed and never mapped at their own addresses (where a kernel that read one would fault
 * in the fake: nothing is mapped there), so no move maps anything (remap_ns 0); the logits
 * of every way a token is decoded at a budget are the run's with every expert resident, to
 * the bit: steps routed by the host (a prompt in batches of 4, its experts on the kernels,
 * then a token a call with each copy still on the bus, read where it lands) and decode
 * routed on the device (in place, read-through), its table sending the kernels to each
 * owned expert's slot. The experts take several pages each (load's 4 KiB), one slab;
 * pages under the device's granularity are tests/test_space.c's (test_slot_pages). And a
 * prompt's experts on cuBLAS, dequantized at their slots: the logits within F16's rounding
 * of the kernels'. */
static void test_slots(void)
{
    const char *path = preset_path("llama", "tiny", MVM_W_Q8_0);
    const size_t n = N_PROMPT * mvm_preset_find("tiny", "llama")->spec.n_vocab;
    struct run *all = run_prompt(path, MVM_BACKEND_CUDA, 1, 1, 0);
    CHECK(all && !all->slots);
    setenv("MOEVM_SLOTS", "on", 1);
    static const char *const modes[] = {"host, 4 a batch", "host, copies on the bus",
                                        "in-place", "read-through"};
    for (int mode = 0; mode < 4; mode++) {
        if (mode < 2)
            setenv("MOEVM_DEVICE_ROUTING", "off", 1);
        else {
            setenv("MOEVM_DETERMINISTIC", "on", 1); /* admission's copies land in time */
            setenv("MOEVM_BUDGET_ROUTING", mode == 2 ? "in-place" : "read-through", 1);
            setenv("MOEVM_ADMIT", "steps", 1);
        }
        copy_delay(mode == 1 ? 1000 : 0);
        event_delay(mode == 1 ? 5000 : 0); /* no copy lands before its round asks (load_wait) */
        struct run *dev = run_prompt(path, MVM_BACKEND_CUDA, 0.3, mode == 0 ? 4 : 1, 0);
        copy_delay(0);
        event_delay(0);
        unsetenv("MOEVM_DEVICE_ROUTING");
        unsetenv("MOEVM_DETERMINISTIC");
        unsetenv("MOEVM_BUDGET_ROUTING");
        unsetenv("MOEVM_ADMIT");
        CHECK(all && dev);
        if (!all || !dev) {
            free_run(dev);
            continue;
        }
        fprintf(stderr, "  slots, %s, %u pages an expert: %llu accesses, %llu hits, %llu pages "
                "loaded, %llu filled, %llu evicted, %llu read where they landed\n", modes[mode],
                dev->ppe,
                (unsigned long long)dev->resid.accesses, (unsigned long long)dev->resid.hits,
                (unsigned long long)dev->space.pages_loaded,
                (unsigned long long)dev->space.pages_filled,
                (unsigned long long)dev->space.pages_evicted,
                (unsigned long long)dev->resid.view_holds);
        CHECK(dev->slots && dev->ppe > 1);
        CHECK(memcmp(all->logits, dev->logits, n * sizeof *all->logits) == 0);
        CHECK(dev->space.pages_loaded > 0 && dev->space.pages_evicted > 0);
        CHECK(dev->space.remap_ns == 0);
        CHECK(dev->resid.hits > 0 && dev->resid.hits < dev->resid.accesses);
        CHECK(dev->space.pinned_experts == 0 && dev->reserved_left == 0);
        CHECK(mode != 1 || dev->resid.view_holds > 0);
        CHECK(mode != 3 || dev->space.pages_filled > 0);
        free_run(dev);
    }
    /* the tensor cores' batches (test_gemm's settings), four tokens a batch */
    setenv("MOEVM_GEMM_ROWS", "2", 1);
    setenv("MOEVM_MMQ", "off", 1);
    setenv("MOEVM_DEVICE_ROUTING", "off", 1);
    reset_counters();
    struct run *gemm = run_prompt(path, MVM_BACKEND_CUDA, 0.3, 4, 0);
    CHECK(calls("cublasGemmBatchedEx") > 0);
    CHECK(gemm && gemm->slots && gemm->space.remap_ns == 0 && gemm->space.pages_evicted > 0);
    const double e = all && gemm ? check_rel_l2(gemm->logits, all->logits, n) : 1;
    fprintf(stderr, "  slots, a prompt on cuBLAS: relative error %.3g\n", e);
    CHECK(e < 6e-2);
    unsetenv("MOEVM_GEMM_ROWS");
    unsetenv("MOEVM_MMQ");
    unsetenv("MOEVM_DEVICE_ROUTING");
    free_run(gemm);
    unsetenv("MOEVM_SLOTS");
    free_run(all);
}

/* A cost file `name` in the test's folder (docs/cost-format.md), its path into path. */
static void cost_file(char *path, size_t cap, const char *name, const char *json)
{
    snprintf(path, cap, "%s/cost-%s.json", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(json, f);
        fclose(f);
    }
}

/* A model at `budget` of its experts and a context of one-token batches for it, evict lru
 * (NULL where either failed; *m then as load left it). */
static mvm_ctx *one_token_ctx(const char *path, double budget, mvm_model **m)
{
    mvm_ctx *c = NULL;
    mvm_ctx_policies pol = {.residency = {.evict = "lru"}};
    CHECK_ST(load(path, MVM_BACKEND_CUDA, budget, m), MVM_OK);
    if (*m)
        CHECK_ST(mvm_ctx_create(*m, pool, 32, 1, &pol, &c), MVM_OK);
    return c;
}

/* The CPU's share of a token routed on the device (MOEVM_DEVICE_CPU=on,
 * forward_cuda_cpu.c), in place and read-through. With a cost model whose CPU finishes a
 * miss long before the link would, the route kernel gives the CPU's thread every miss: the
 * replay counts them as CPU runs, nothing is read in place or kept by a slab (admission
 * loads some between tokens, read-through too: the cache still fills), and the logits are the
 * host-routed run's up to the order of the sums (the CPU's summed apart); the choices and
 * router inputs are its bit for bit, and each layer's wait ran. With one whose link wins,
 * the CPU takes none, and the logits are bit for bit. A share naming an expert the model
 * has not (a device gone wrong) fails the token, saying so. A kernel launch failing in the
 * middle of a token fails that token and hangs nothing: the CPU's thread stops waiting for
 * layers that never come, and the next tokens run. */
static void test_device_cpu(void)
{
    const char *path = preset_path("llama", "tiny", MVM_W_Q8_0);
    const size_t n = N_PROMPT * mvm_preset_find("tiny", "llama")->spec.n_vocab;
    char cpu_wins[128], link_wins[128];
    cost_file(cpu_wins, sizeof cpu_wins, "cpu", "{\"cpu_mem_bw\": 1000, \"cpu_flops\": "
              "100000, \"cpu_setup\": 1, \"zerocopy_bw\": 0.01}");
    cost_file(link_wins, sizeof link_wins, "link", "{\"cpu_mem_bw\": 0.001, \"cpu_flops\": "
              "0.01, \"zerocopy_bw\": 1000}");
    setenv("MOEVM_DETERMINISTIC", "on", 1);
    struct run *host = run_prompt(path, MVM_BACKEND_CUDA, 0.3, 1, 0);
    setenv("MOEVM_DEVICE_CPU", "on", 1);
    for (int mode = 0; mode < 3; mode++) {
        const int through = mode != 1, cpu = mode < 2;
        setenv("MOEVM_BUDGET_ROUTING", through ? "read-through" : "in-place", 1);
        setenv("MOEVM_COST", cpu ? cpu_wins : link_wins, 1);
        const unsigned long waits0 = fakecuda_engine_launches("mvm_g_cpu_wait");
        struct run *dev = run_prompt(path, MVM_BACKEND_CUDA, 0.3, 1, 0);
        const unsigned long waits = fakecuda_engine_launches("mvm_g_cpu_wait") - waits0;
        CHECK(host && dev);
        if (host && dev) {
            fprintf(stderr, "  %s, the %s's cost model: %llu accesses, %llu on the CPU, %llu "
                    "read in place, %llu hits\n", through ? "read-through" : "in-place",
                    cpu ? "CPU" : "link", (unsigned long long)dev->resid.accesses,
                    (unsigned long long)dev->resid.cpu_runs,
                    (unsigned long long)dev->resid.zerocopy_runs,
                    (unsigned long long)dev->resid.hits);
            CHECK(waits == N_PROMPT * 2); /* the tiny models' two MoE layers, every token */
            CHECK(memcmp(host->sel, dev->sel, sizeof host->sel) == 0);
            CHECK(dev->resid.accesses == host->resid.accesses);
            CHECK(dev->resid.hits + dev->resid.zerocopy_runs + dev->resid.cpu_runs ==
                  dev->resid.accesses);
            CHECK(dev->space.pinned_experts == 0 && dev->reserved_left == 0);
            if (cpu) {
                CHECK(dev->resid.cpu_runs > 0 && dev->resid.zerocopy_runs == 0);
                CHECK(dev->resid.filled == 0 && dev->resid.admitted > 0); /* nor starved */
                CHECK(check_rel_l2(dev->logits, host->logits, n) < 1e-5);
                for (size_t i = 0; i < N_PROMPT; i++) /* the router inputs after the first */
                    for (int l = 0; l < 2; l++)
                        CHECK(fabs(dev->hidden[i][l] - host->hidden[i][l]) <=
                              1e-4 * (1 + fabs(host->hidden[i][l])));
            } else {
                CHECK(dev->resid.cpu_runs == 0 && dev->resid.zerocopy_runs > 0);
                CHECK(memcmp(host->logits, dev->logits, n * sizeof *host->logits) == 0);
                CHECK(memcmp(host->hidden, dev->hidden, sizeof host->hidden) == 0);
            }
        }
        free_run(dev);
    }
    /* a device whose share names an expert the model has not: the token fails, saying so */
    setenv("FAKECUDA_ROUTE_BAD", "2", 1);
    setenv("MOEVM_COST", cpu_wins, 1);
    mvm_model *bm = NULL;
    mvm_ctx *bc = one_token_ctx(path, 0.3, &bm);
    if (bc) {
        mvm_status got = MVM_OK;
        for (uint32_t i = 0; i < 4 && got == MVM_OK; i++)
            got = mvm_ctx_eval(bc, prompt + i, 1, NULL, 0);
        CHECK(got == MVM_ERR_BACKEND &&
              strstr(mvm_last_error(), "the device gave the CPU") != NULL);
    }
    mvm_ctx_free(bc);
    mvm_model_free(bm);
    unsetenv("FAKECUDA_ROUTE_BAD");
    /* a launch failing mid-token, its kernels queued one by one */
    setenv("MOEVM_DEVICE_ROUTING", "launches", 1);
    mvm_model *m = NULL;
    mvm_ctx *c = one_token_ctx(path, 0.3, &m);
    if (c) {
        CHECK_ST(mvm_ctx_eval(c, prompt, 1, NULL, 0), MVM_OK);
        reset_counters();
        const unsigned long one = fakecuda_engine_launches("mvm_g_route");
        CHECK_ST(mvm_ctx_eval(c, prompt + 1, 1, NULL, 0), MVM_OK);
        const unsigned long launches = calls("cuLaunchKernel");
        CHECK(fakecuda_engine_launches("mvm_g_route") == one + 2 && launches > 8);
        char fail[64]; /* a launch after the first layer's route kernel */
        snprintf(fail, sizeof fail, "cuLaunchKernel:%lu", launches / 2 + 2);
        CHECK(set_fail(fail) == 0);
        CHECK(mvm_ctx_eval(c, prompt + 2, 1, NULL, 0) != MVM_OK);
        set_fail(NULL);
        CHECK(strstr(mvm_last_error(), "cuLaunchKernel") != NULL);
        for (uint32_t i = 3; i < 6; i++)
            CHECK_ST(mvm_ctx_eval(c, prompt + i, 1, NULL, 0), MVM_OK);
    }
    mvm_ctx_free(c);
    if (m) {
        mvm_stats st;
        mvm_space_get_stats(m->space, &st);
        CHECK(st.pinned_experts == 0);
    }
    mvm_model_free(m);
    unsetenv("MOEVM_DEVICE_ROUTING");
    unsetenv("MOEVM_DEVICE_CPU");
    unsetenv("MOEVM_BUDGET_ROUTING");
    unsetenv("MOEVM_COST");
    unsetenv("MOEVM_DETERMINISTIC");
    free_run(host);
}

/* A request as the distributed mode's server takes it (dist_serve.c): 5 tokens, the rows of
 * experts 1, 3 and 6 of a layer, grouped by expert in expert order; tokens 0, 2 and 4 have
 * both their top-2 rows here, 1 and 3 one. */
static const int32_t req_experts[] = {1, 3, 6};
static const uint32_t req_tok[] = {0, 2, 4, 1, 2, 0, 3, 4};
static uint32_t req_cnt[8] = {0, 3, 0, 2, 0, 0, 3, 0}, req_off[8] = {0, 0, 3, 3, 5, 5, 5, 8};

static mvm_expert_rows request(uint32_t layer, const float *hidden, const float *w)
{
    return (mvm_expert_rows){.layer = layer, .n_tok = 5, .n_exp = 3, .experts = req_experts,
                             .cnt = req_cnt, .off = req_off, .row_tok = req_tok, .row_w = w,
                             .hidden = hidden};
}

/* The same sums on the CPU, from the host backend's experts (experts_cpu.h), as the CPU's
 * server computes them. */
static void rows_on_cpu(mvm_model *m, uint32_t layer, const float *hidden, const float *w,
                        float *out)
{
    mvm_cpu_experts *x = NULL;
    CHECK_ST(mvm_cpu_experts_create(m, pool, 8, &x), MVM_OK);
    mvm_moe s = {.cnt = req_cnt, .off = req_off, .row_tok = (uint32_t *)req_tok,
                 .row_w = (float *)w};
    s.step.layer = layer;
    memset(out, 0, 5 * m->hp.n_embd * sizeof *out);
    if (x) {
        mvm_cpu_experts_run(x, &s, hidden, 5, req_experts, 3, 1);
        mvm_cpu_experts_add(x, &s, out, 5);
    }
    mvm_cpu_experts_free(x);
}

/* The relative L2 error of request(layer)'s sums served by c (poisoned first) against the
 * CPU's on host; NaN when any is. */
static double served_error(mvm_ctx *c, mvm_model *host, uint32_t layer, const float *hidden,
                           const float *w, float *got, float *want)
{
    const size_t D = host->hp.n_embd;
    for (size_t i = 0; i < 5 * D; i++)
        got[i] = NAN;
    mvm_expert_rows r = request(layer, hidden, w);
    CHECK_ST(mvm_ctx_expert_rows(c, &r, got), MVM_OK);
    rows_on_cpu(host, layer, hidden, w, want);
    double err = 0, norm = 0;
    for (size_t i = 0; i < 5 * D; i++) {
        err += (got[i] - want[i]) * (double)(got[i] - want[i]);
        norm += want[i] * (double)want[i];
    }
    return norm > 0 ? sqrt(err / norm) : NAN;
}

/* mvm_ctx_expert_rows: another rank's rows on the GPU equal the CPU's, on a budget of a
 * quarter of the pages (the step's experts loaded and evicted by the residency policies,
 * which count it); between the context's own batches it changes nothing of theirs; bad
 * requests and a CPU context are refused. */
static void test_expert_rows(void)
{
    const char *path = model_path("qwen3moe", MVM_W_Q8_0);
    mvm_model *host = NULL, *m = NULL;
    mvm_ctx *c = NULL;
    CHECK_ST(load(path, MVM_BACKEND_HOST, 1, &host), MVM_OK);
    CHECK_ST(load(path, MVM_BACKEND_CUDA, 0.25, &m), MVM_OK);
    /* each step waits for its copies: the evictions below do not depend on timing (with
     * loads still in flight the module has fewer candidates, and runs experts at home) */
    mvm_ctx_policies pol = {.residency = {.evict = "lru"}, .prefetch = {.predict = predict},
                            .wait_loads = 1};
    if (m)
        CHECK_ST(mvm_ctx_create(m, pool, 32, 5, &pol, &c), MVM_OK);
    if (!host || !c) {
        mvm_model_free(host), mvm_ctx_free(c), mvm_model_free(m);
        return;
    }
    const size_t D = m->hp.n_embd, V = m->hp.n_vocab;
    float *hidden = malloc(5 * D * sizeof *hidden), *got = malloc(5 * D * sizeof *got);
    float *want = malloc(5 * D * sizeof *want), w[8];
    unsigned seed = 7;
    for (size_t i = 0; i < 5 * D; i++)
        hidden[i] = (float)rand_r(&seed) / RAND_MAX * 2.0f - 1.0f;
    for (size_t i = 0; i < 8; i++)
        w[i] = 0.25f + (float)rand_r(&seed) / RAND_MAX;
    mvm_resid_stats before, after;
    for (uint32_t layer = 0; layer < 2; layer++) {
        mvm_resid_get_stats(mvm_ctx_residency(c), &before);
        CHECK(served_error(c, host, layer, hidden, w, got, want) < 1e-4); /* NaN fails too */
        mvm_resid_get_stats(mvm_ctx_residency(c), &after);
        CHECK(after.accesses == before.accesses + 3);
    }
    mvm_stats sp;
    mvm_space_get_stats(m->space, &sp);
    CHECK(sp.pages_evicted > 0); /* two layers' experts through a quarter's budget */


    /* Served between the context's own batches: the same logits as without. */
    float *alone = malloc(N_PROMPT * V * sizeof *alone);
    float *served = malloc(N_PROMPT * V * sizeof *served);
    CHECK_ST(eval_prompt(c, V, 4, alone), MVM_OK);
    mvm_ctx_reset(c);
    for (size_t i = 0; i < N_PROMPT * V; i++)
        served[i] = NAN;
    mvm_expert_rows r = request(1, hidden, w);
    for (uint32_t done = 0; done < N_PROMPT; done += 4) {
        uint32_t n = N_PROMPT - done < 4 ? N_PROMPT - done : 4;
        CHECK_ST(mvm_ctx_eval(c, prompt + done, n, served + done * V, 1), MVM_OK);
        CHECK_ST(mvm_ctx_expert_rows(c, &r, got), MVM_OK);
    }
    CHECK(memcmp(alone, served, N_PROMPT * V * sizeof *alone) == 0);

    /* Refused: a token with three rows of a top-2 model, more tokens than the batch. */
    static const uint32_t three_tok[] = {0, 2, 4, 1, 2, 0, 2, 4};
    mvm_expert_rows bad = request(0, hidden, w);
    bad.row_tok = three_tok;
    CHECK_ST(mvm_ctx_expert_rows(c, &bad, got), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "more than 2 rows of token 2") != NULL);
    bad = request(0, hidden, w);
    bad.n_tok = 6; /* the context's batches are 5 */
    CHECK_ST(mvm_ctx_expert_rows(c, &bad, got), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "batches of up to 5") != NULL);
    mvm_ctx_free(c);
    c = NULL;
    /* DALI's greedy assignment puts some of a served step's experts on the CPU threads
     * (from their homes, on the hidden states the request brought): the same sums. */
    mvm_ctx *greedy = NULL;
    pol.residency.assign = "greedy";
    CHECK_ST(mvm_ctx_create(m, pool, 32, 5, &pol, &greedy), MVM_OK);
    for (uint32_t round = 0; greedy && round < 3; round++)
        for (uint32_t layer = 0; layer < 2; layer++)
            CHECK(served_error(greedy, host, layer, hidden, w, got, want) < 1e-4);
    if (greedy) {
        mvm_resid_get_stats(mvm_ctx_residency(greedy), &after);
        CHECK(after.cpu_runs > 0 && after.accesses == 18);
    }
    mvm_ctx_free(greedy);
    CHECK_ST(mvm_ctx_create(host, pool, 32, 8, NULL, &c), MVM_OK);
    r = request(0, hidden, w);
    if (c)
        CHECK_ST(mvm_ctx_expert_rows(c, &r, got), MVM_ERR_UNSUPPORTED);
    mvm_ctx_free(c);
    free(alone), free(served), free(hidden), free(got), free(want);
    mvm_model_free(m);
    mvm_model_free(host);
}

/* mvm_ctx_time_experts: a positive time for one expert or a step's worth in one launch,
 * each expert evicted after unless it was resident (also when a later one's load fails), the
 * context still computing the same logits; refused on the CPU, out of range and for an
 * expert named twice. */
static void test_time_expert(void)
{
    const char *path = model_path("qwen2moe", MVM_W_Q4_K);
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    CHECK_ST(load(path, MVM_BACKEND_CUDA, 1, &m), MVM_OK);
    if (m)
        CHECK_ST(mvm_ctx_create(m, pool, 32, 4, NULL, &c), MVM_OK);
    if (!c) {
        mvm_model_free(m);
        return;
    }
    size_t nv = m->hp.n_vocab;
    float *want = malloc(nv * sizeof *want), *got = malloc(nv * sizeof *got);
    float *x = malloc(4 * m->hp.n_embd * sizeof *x);
    for (uint32_t i = 0; i < 4 * m->hp.n_embd; i++)
        x[i] = sinf(0.37f * (float)i + 0.1f);
    CHECK_ST(mvm_ctx_eval(c, prompt, 3, want, 0), MVM_OK);
    mvm_ctx_reset(c);
    double t = -1;
    mvm_residency r;
    const uint32_t K = m->hp.n_expert_used;
    CHECK(K >= 2);
    CHECK_ST(mvm_evict(m->space, 1, 5, 0), MVM_OK);
    CHECK_ST(mvm_ctx_time_experts(c, 1, (const int32_t[]){5}, 1, x, 4, &t), MVM_OK);
    CHECK(t > 0 && t < 10);
    CHECK_ST(mvm_expert_residency(m->space, 1, 5, &r), MVM_OK);
    CHECK(r.resident == 0 && r.pins == 0);
    /* a step's two experts in one launch: the one resident before stays, the other goes */
    CHECK_ST(mvm_make_resident(m->space, 0, 2, MVM_ALL_PAGES), MVM_OK);
    CHECK_ST(mvm_evict(m->space, 0, 3, 0), MVM_OK);
    t = -1;
    CHECK_ST(mvm_ctx_time_experts(c, 0, (const int32_t[]){3, 2}, 2, x, 1, &t), MVM_OK);
    CHECK(t > 0 && t < 10);
    CHECK_ST(mvm_expert_residency(m->space, 0, 2, &r), MVM_OK);
    CHECK(r.resident == r.n_pages && r.pins == 0);
    CHECK_ST(mvm_expert_residency(m->space, 0, 3, &r), MVM_OK);
    CHECK(r.resident == 0 && r.pins == 0);
    const int32_t two[] = {2, 3}, twice[] = {2, 2}, beyond[] = {(int32_t)m->hp.n_expert};
    CHECK_ST(mvm_ctx_time_experts(c, 0, two, 1, x, 5, &t), MVM_ERR_INVALID);
    CHECK_ST(mvm_ctx_time_experts(c, 2, two, 1, x, 1, &t), MVM_ERR_INVALID);
    CHECK_ST(mvm_ctx_time_experts(c, 0, beyond, 1, x, 1, &t), MVM_ERR_INVALID);
    CHECK_ST(mvm_ctx_time_experts(c, 0, two, 0, x, 1, &t), MVM_ERR_INVALID);
    CHECK_ST(mvm_ctx_time_experts(c, 0, two, K + 1, x, 1, &t), MVM_ERR_INVALID);
    CHECK_ST(mvm_ctx_time_experts(c, 0, twice, 2, x, 1, &t), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "expert 2 is named twice") != NULL);
    /* the second expert's load fails: the first, loaded and pinned, goes home again too.
     * Its copy is found by counting: a load's copies, and a timing's (the inputs' first,
     * then both loads') */
    const char *up = "cuMemcpyHtoDAsync";
    CHECK_ST(mvm_evict(m->space, 0, 2, 0), MVM_OK);
    unsigned long n0 = calls(up);
    CHECK_ST(mvm_make_resident(m->space, 0, 3, MVM_ALL_PAGES), MVM_OK);
    const unsigned long per_load = calls(up) - n0;
    CHECK_ST(mvm_evict(m->space, 0, 3, 0), MVM_OK);
    n0 = calls(up);
    CHECK_ST(mvm_ctx_time_experts(c, 0, two, 2, x, 1, &t), MVM_OK);
    const unsigned long timing = calls(up) - n0;
    CHECK(per_load >= 1 && timing >= 2 * per_load);
    mvm_stats before, after;
    CHECK_ST(mvm_space_get_stats(m->space, &before), MVM_OK);
    char fail[64];
    snprintf(fail, sizeof fail, "%s:%lu", up, timing - per_load + 1);
    CHECK(set_fail(fail) == 0);
    CHECK(mvm_ctx_time_experts(c, 0, two, 2, x, 1, &t) != MVM_OK);
    set_fail(NULL);
    for (uint32_t j = 0; j < 2; j++) {
        CHECK_ST(mvm_expert_residency(m->space, 0, (uint32_t)two[j], &r), MVM_OK);
        CHECK(r.resident == 0 && r.loading == 0 && r.pins == 0);
    }
    CHECK_ST(mvm_space_get_stats(m->space, &after), MVM_OK);
    CHECK(after.free_pages == before.free_pages);
    CHECK(mvm_ctx_n_past(c) == 0);
    CHECK_ST(mvm_ctx_eval(c, prompt, 3, got, 0), MVM_OK);
    CHECK(memcmp(want, got, nv * sizeof *got) == 0);
    free(want);
    free(got);
    free(x);
    mvm_ctx_free(c);
    mvm_model_free(m);

    CHECK_ST(load(path, MVM_BACKEND_HOST, 1, &m), MVM_OK);
    if (m && mvm_ctx_create(m, pool, 32, 4, NULL, &c) == MVM_OK) {
        CHECK_ST(mvm_ctx_time_experts(c, 0, (const int32_t[]){0}, 1, (const float[1]){0.5f},
                                      1, &t),
                 MVM_ERR_UNSUPPORTED);
        CHECK(strstr(mvm_last_error(), "computes on the cpu") != NULL);
        mvm_ctx_free(c);
    }
    mvm_model_free(m);
}

/* The tensor-core path (forward_cuda_gemm.c) over the fake's cuBLAS (fake_cublas.c): with
 * MOEVM_GEMM_ROWS=2 a batch's products and the experts with two or more of its tokens take
 * it, the others the kernels. In F16 and BF16 models, whose weights F16 holds (almost)
 * exactly, the logits are the CPU's to F16 rounding of the activations, in every layout:
 * MLA's per-head products (deepseek2, with and without V3's q bottleneck), gpt-oss's unit,
 * biases and windows, shared experts and a dense block (glm4moe). In quantized models the
 * CPU rounds each product's input to 8 bits (Q8_0, Q8_K) where this path rounds it to F16,
 * and the random tiny models amplify that difference through their layers, so the bound is
 * looser: Q8_0 blocks, Q4_K's mix (a Q6_K down in some layers, 256-channel groups), Q4_0,
 * and gpt-oss's MXFP4 experts (kernels/cuda/gemm.cu's dequantization is held bit for bit to
 * the CPU's in tests/test_cuda_kernels.cc). A scratch of one row or group makes every
 * product go in chunks, to the same logits. Without cuBLAS, or with one that will not start,
 * the kernels take everything, as before; a product that fails is named and leaves nothing
 * pinned. */
static void test_gemm(void)
{
    static const struct {
        const char *arch, *preset;
        enum mvm_wtype type;
    } cases[] = {{"deepseek2", "tiny", MVM_W_F16},   {"deepseek2", "tiny-v3", MVM_W_F16},
                 {"gpt-oss", "tiny", MVM_W_F16},     {"glm4moe", "tiny", MVM_W_F16},
                 {"qwen3moe", "tiny", MVM_W_BF16},   {"olmoe", "tiny", MVM_W_Q8_0},
                 {"qwen2moe", "tiny", MVM_W_Q4_K},   {"gpt-oss", "tiny", MVM_W_MXFP4},
                 {"llama", "tiny", MVM_W_Q4_0}};
    setenv("MOEVM_GEMM_ROWS", "2", 1);
    setenv("MOEVM_MMQ", "off", 1); /* Q8_0's experts too on cuBLAS (test_mmq has mmq's) */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *path = preset_path(cases[i].arch, cases[i].preset, cases[i].type);
        size_t n = N_PROMPT * mvm_preset_find(cases[i].preset, cases[i].arch)->spec.n_vocab;
        struct run *cpu = run_prompt(path, MVM_BACKEND_HOST, 1, 4, 0);
        reset_counters();
        struct run *gpu = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
        /* the dense products one by one, the experts' in batches (forward_cuda_gemm.c) */
        CHECK(calls("cublasGemmEx") > 0 && calls("cublasGemmBatchedEx") > 0);
        if (cpu && gpu) {
            double e = check_rel_l2(gpu->logits, cpu->logits, n);
            fprintf(stderr, "  %s %s type %d on the tensor cores: relative error %.3g\n",
                    cases[i].arch, cases[i].preset, (int)cases[i].type, e);
            const int exact = cases[i].type == MVM_W_F16 || cases[i].type == MVM_W_BF16;
            CHECK(e < (exact ? 3e-3 : 6e-2));
        }
        free_run(cpu), free_run(gpu);
    }
    /* a Q8_0 cache (heads of 32): the prompt's attention reads its rows converted to F16
     * (llama: every position; gpt-oss: its blocks with windows too, whose rows below the
     * window are not converted); the same logits as by the attention kernel, which reads the
     * blocks (MOEVM_GEMM_BATCH=off), to F16's rounding of the queries and weights; the
     * CPU's within the quantized bound (keys computed from F16 inputs here move quants) */
    static const char *const q8_archs[] = {"llama", "gpt-oss"};
    for (size_t i = 0; i < sizeof q8_archs / sizeof *q8_archs; i++) {
        preset_head_dim = 32;
        const char *path = preset_path(q8_archs[i], "tiny", MVM_W_F16);
        preset_head_dim = 0;
        size_t n = N_PROMPT * mvm_preset_find("tiny", q8_archs[i])->spec.n_vocab;
        kv_type = "q8_0";
        struct run *cpu = run_prompt(path, MVM_BACKEND_HOST, 1, 8, 0);
        const unsigned long conv0 = fakecuda_engine_launches("mvm_g_dequant_q8_0");
        struct run *gpu = run_prompt(path, MVM_BACKEND_CUDA, 1, 8, 0);
        CHECK(fakecuda_engine_launches("mvm_g_dequant_q8_0") > conv0);
        setenv("MOEVM_GEMM_BATCH", "off", 1);
        struct run *kernel = run_prompt(path, MVM_BACKEND_CUDA, 1, 8, 0);
        unsetenv("MOEVM_GEMM_BATCH");
        kv_type = NULL;
        double e = gpu && kernel ? check_rel_l2(gpu->logits, kernel->logits, n) : 1;
        double e_cpu = gpu && cpu ? check_rel_l2(gpu->logits, cpu->logits, n) : 1;
        fprintf(stderr, "  %s tiny, a Q8_0 cache, on the tensor cores: relative error %.3g "
                "(the CPU's: %.3g)\n", q8_archs[i], e, e_cpu);
        CHECK(e < 3e-3 && e_cpu < 6e-2);
        free_run(cpu), free_run(gpu), free_run(kernel);
    }
    /* a scratch for one row or channel group: every matrix and expert in chunks, the
     * chunks of an expert's down adding up in its rows, and a batch's attention in chunks
     * of queries (the second batch of 8: 6 queries, 4 a chunk over its 16 positions); the
     * same logits but for the order of the F32 sums */
    static const char *const chunked[][2] = {{"olmoe", "q"}, {"gpt-oss", "f16"},
                                             {"deepseek2", "f16"}};
    for (size_t i = 0; i < sizeof chunked / sizeof *chunked; i++) {
        const char *path = model_path(chunked[i][0], chunked[i][1][0] == 'q' ? MVM_W_Q8_0
                                                                            : MVM_W_F16);
        size_t n = N_PROMPT * mvm_preset_find("tiny", chunked[i][0])->spec.n_vocab;
        struct run *whole = run_prompt(path, MVM_BACKEND_CUDA, 1, 8, 0);
        setenv("MOEVM_GEMM_SCRATCH", "1", 1);
        struct run *parts = run_prompt(path, MVM_BACKEND_CUDA, 1, 8, 0);
        unsetenv("MOEVM_GEMM_SCRATCH");
        double e = whole && parts ? check_rel_l2(parts->logits, whole->logits, n) : 1;
        fprintf(stderr, "  %s in chunks: relative error %.3g\n", chunked[i][0], e);
        CHECK(e < 1e-4);
        free_run(whole), free_run(parts);
    }
    /* a scratch for one whole expert: every batch of one expert, to the same logits as
     * batches of several, each padded to its largest (the fake's products are exact) */
    {
        const mvm_model_spec *sp = &mvm_preset_find("tiny", "olmoe")->spec;
        const char *path = model_path("olmoe", MVM_W_Q8_0);
        size_t n = N_PROMPT * sp->n_vocab;
        char one[32];
        snprintf(one, sizeof one, "%llu",
                 3ull * sp->n_embd * mvm_spec_expert_ff(sp) * sizeof(uint16_t));
        struct run *many = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
        setenv("MOEVM_GEMM_SCRATCH", one, 1);
        struct run *single = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
        unsetenv("MOEVM_GEMM_SCRATCH");
        CHECK(many && single && memcmp(many->logits, single->logits, n * sizeof(float)) == 0);
        free_run(many), free_run(single);
    }
    /* MOEVM_GEMM_BATCH=off, the way before: an expert at a time and attention by the
     * kernel, no batched product; the logits those of the batches to the attention's F16
     * rounding (queries and weights) */
    static const char *const unbatched[] = {"gpt-oss", "deepseek2"};
    for (size_t i = 0; i < sizeof unbatched / sizeof *unbatched; i++) {
        const char *path = model_path(unbatched[i], MVM_W_F16);
        size_t n = N_PROMPT * mvm_preset_find("tiny", unbatched[i])->spec.n_vocab;
        struct run *on = run_prompt(path, MVM_BACKEND_CUDA, 1, 8, 0);
        setenv("MOEVM_GEMM_BATCH", "off", 1);
        reset_counters();
        struct run *off = run_prompt(path, MVM_BACKEND_CUDA, 1, 8, 0);
        CHECK(calls("cublasGemmEx") > 0 && calls("cublasGemmBatchedEx") == 0);
        unsetenv("MOEVM_GEMM_BATCH");
        double e = on && off ? check_rel_l2(off->logits, on->logits, n) : 1;
        fprintf(stderr, "  %s unbatched: relative error %.3g\n", unbatched[i], e);
        CHECK(e < 3e-3);
        free_run(on), free_run(off);
    }
    /* no cuBLAS: the kernels take every product, with a warning */
    const char *path = model_path("olmoe", MVM_W_Q8_0);
    size_t n = N_PROMPT * mvm_preset_find("tiny", "olmoe")->spec.n_vocab;
    setenv("MOEVM_GEMM_ROWS", "0", 1);
    struct run *kernels = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
    setenv("MOEVM_GEMM_ROWS", "2", 1);
    setenv("MOEVM_CUBLAS_LIBRARY", "/nonexistent/libcublas.so", 1);
    reset_counters();
    struct run *none = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
    CHECK(calls("cublasGemmEx") == 0);
    CHECK(kernels && none && memcmp(kernels->logits, none->logits, n * sizeof(float)) == 0);
    free_run(none);
    setenv("MOEVM_CUBLAS_LIBRARY", getenv("MOEVM_CUDA_LIBRARY"), 1);
    /* a cuBLAS that will not start (cublasCreate failing): the same */
    CHECK(set_fail("cublasCreate:1") == 0);
    reset_counters();
    none = run_prompt(path, MVM_BACKEND_CUDA, 1, 4, 0);
    set_fail(NULL);
    CHECK(calls("cublasCreate") == 1 && calls("cublasGemmEx") == 0);
    CHECK(kernels && none && memcmp(kernels->logits, none->logits, n * sizeof(float)) == 0);
    free_run(kernels), free_run(none);
    /* a product failing mid-step: the pass's error names it, nothing stays pinned, and the
     * context goes on */
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    CHECK_ST(load(path, MVM_BACKEND_CUDA, 1, &m), MVM_OK);
    if (m)
        CHECK_ST(mvm_ctx_create(m, pool, 32, 4, NULL, &c), MVM_OK);
    static const char *const fails[] = {"cublasGemmEx:6", "cublasGemmBatchedEx:3"};
    for (size_t i = 0; c && i < sizeof fails / sizeof *fails; i++) {
        CHECK(set_fail(fails[i]) == 0);
        CHECK_ST(mvm_ctx_eval(c, prompt, 4, NULL, 0), MVM_ERR_BACKEND);
        const char *named = strstr(mvm_last_error(), "cublas"); /* the call that failed */
        CHECK(named && strncmp(named, fails[i], strcspn(fails[i], ":")) == 0);
        mvm_stats s;
        mvm_space_get_stats(m->space, &s);
        CHECK(s.pinned_experts == 0);
        set_fail(NULL);
        CHECK(mvm_ctx_n_past(c) == 0);
        CHECK_ST(mvm_ctx_eval(c, prompt, 4, NULL, 0), MVM_OK);
        mvm_ctx_reset(c);
    }
    mvm_ctx_free(c);
    mvm_model_free(m);
    unsetenv("MOEVM_GEMM_ROWS");
    unsetenv("MOEVM_MMQ");
}

/* A machine of two nodes of one core each, the fake device (0000:fe:00.0) on the second,
 * for hwloc (HWLOC_XMLFILE): what a server with its GPU on one socket looks like. */
static const char two_nodes_xml[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
    "<topology version=\"2.0\">\n"
    " <object type=\"Machine\" os_index=\"0\" cpuset=\"0x3\" complete_cpuset=\"0x3\" "
    "allowed_cpuset=\"0x3\" nodeset=\"0x3\" complete_nodeset=\"0x3\" allowed_nodeset=\"0x3\" "
    "gp_index=\"1\">\n"
    "  <object type=\"Package\" os_index=\"0\" cpuset=\"0x1\" complete_cpuset=\"0x1\" "
    "nodeset=\"0x1\" complete_nodeset=\"0x1\" gp_index=\"2\">\n"
    "   <object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x1\" complete_cpuset=\"0x1\" "
    "nodeset=\"0x1\" complete_nodeset=\"0x1\" gp_index=\"3\" local_memory=\"1073741824\"/>\n"
    "   <object type=\"Core\" os_index=\"0\" cpuset=\"0x1\" complete_cpuset=\"0x1\" "
    "nodeset=\"0x1\" complete_nodeset=\"0x1\" gp_index=\"4\">\n"
    "    <object type=\"PU\" os_index=\"0\" cpuset=\"0x1\" complete_cpuset=\"0x1\" "
    "nodeset=\"0x1\" complete_nodeset=\"0x1\" gp_index=\"5\"/>\n"
    "   </object>\n"
    "  </object>\n"
    "  <object type=\"Package\" os_index=\"1\" cpuset=\"0x2\" complete_cpuset=\"0x2\" "
    "nodeset=\"0x2\" complete_nodeset=\"0x2\" gp_index=\"6\">\n"
    "   <object type=\"NUMANode\" os_index=\"1\" cpuset=\"0x2\" complete_cpuset=\"0x2\" "
    "nodeset=\"0x2\" complete_nodeset=\"0x2\" gp_index=\"7\" local_memory=\"1073741824\"/>\n"
    "   <object type=\"Core\" os_index=\"1\" cpuset=\"0x2\" complete_cpuset=\"0x2\" "
    "nodeset=\"0x2\" complete_nodeset=\"0x2\" gp_index=\"8\">\n"
    "    <object type=\"PU\" os_index=\"1\" cpuset=\"0x2\" complete_cpuset=\"0x2\" "
    "nodeset=\"0x2\" complete_nodeset=\"0x2\" gp_index=\"9\"/>\n"
    "   </object>\n"
    "   <object type=\"Bridge\" gp_index=\"10\" bridge_type=\"0-1\" depth=\"0\" "
    "bridge_pci=\"0000:[fe-fe]\">\n"
    "    <object type=\"PCIDev\" gp_index=\"11\" pci_busid=\"0000:fe:00.0\" "
    "pci_type=\"0302 [10de:2330] [10de:16c1] a1\" pci_link_speed=\"0.000000\"/>\n"
    "   </object>\n"
    "  </object>\n"
    " </object>\n"
    "</topology>\n";

/* The engine's pool, made per core before the space from every core of both nodes, moves
 * to the one core near the GPU once the model's space on it is made (engine/model/model.c,
 * pool_near_gpu), and its run still computes the model. A pool given its count keeps it. */
static void test_pool_near_gpu(void)
{
    char xml[96];
    snprintf(xml, sizeof xml, "%s/two_nodes.xml", dir);
    FILE *fx = fopen(xml, "w");
    CHECK(fx && fputs(two_nodes_xml, fx) >= 0);
    if (fx)
        fclose(fx);
    /* hwloc reads HWLOC_XMLFILE only without HWLOC_COMPONENTS, which the sanitizer builds
     * set (tests/CMakeLists.txt; the XML needs none of the plugins it names) */
    const char *components = getenv("HWLOC_COMPONENTS");
    char *keep = components ? strdup(components) : NULL;
    unsetenv("HWLOC_COMPONENTS");
    setenv("HWLOC_XMLFILE", xml, 1);
    setenv("HWLOC_THISSYSTEM", "1", 1);
    const char *spin = getenv("MOEVM_MOVE_SPIN"); /* the test's setting, put back after */
    char *keep_spin = spin ? strdup(spin) : NULL;
    setenv("MOEVM_MOVE_SPIN", "0", 1); /* no core left to the worker: one thread stays */
    mvm_topo every;
    CHECK_ST(mvm_topo_probe(NULL, &every), MVM_OK);
    CHECK(every.n_numa_nodes == 2 && every.n_cores == 2);
    for (int given = 0; given <= 2; given += 2) {
        mvm_pool *p = NULL;
        CHECK_ST(mvm_pool_create(given, &every, &p), MVM_OK);
        mvm_space_desc d;
        mvm_space_desc_init(&d);
        d.backend = MVM_BACKEND_CUDA;
        d.page_size = 4096;
        d.device_budget = 0;
        d.device_budget_frac = 0.5;
        mvm_model *m = NULL;
        if (p)
            CHECK_ST(mvm_model_load(model_path("llama", MVM_W_F32),
                                    &(mvm_load_args){.desc = &d, .pool = p}, &m),
                     MVM_OK);
        if (p && m) {
            const mvm_topo *t = mvm_pool_topo(p);
            CHECK(t && t->n_cores == 1 && CPU_ISSET(1, &t->cores) && !CPU_ISSET(0, &t->cores));
            CHECK(mvm_pool_size(p) == (given ? given : 1));
            mvm_ctx *c = NULL;
            CHECK_ST(mvm_ctx_create(m, p, 32, 4, NULL, &c), MVM_OK);
            if (c)
                CHECK_ST(mvm_ctx_eval(c, prompt, N_PROMPT, NULL, 0), MVM_OK);
            mvm_ctx_free(c);
        }
        mvm_model_free(m);
        mvm_pool_destroy(p);
    }
    if (keep_spin)
        setenv("MOEVM_MOVE_SPIN", keep_spin, 1);
    else
        unsetenv("MOEVM_MOVE_SPIN");
    free(keep_spin);
    unsetenv("HWLOC_THISSYSTEM");
    unsetenv("HWLOC_XMLFILE");
    if (keep)
        setenv("HWLOC_COMPONENTS", keep, 1);
    free(keep);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: FAKECUDA_KERNELS=plugin.so test_forward_gpu "
                        "path/to/fake/libcuda.so.1\n");
        return 2;
    }
    setenv("MOEVM_CUDA_LIBRARY", argv[1], 1);
    setenv("MOEVM_CUBLAS_LIBRARY", argv[1], 1); /* its cuBLAS calls too (fake_cublas.c) */
    /* the tests of moves at a budget of every expert: pages (test_matches_cpu packs) */
    setenv("MOEVM_PACK", "off", 1);
    snprintf(dir, sizeof dir, "/tmp/moevm-fwdgpu-XXXXXX");
    if (!mkdtemp(dir) || mvm_pool_create(2, NULL, &pool) != MVM_OK)
        return 1;
    void *driver = driver_lib = dlopen(argv[1], RTLD_NOW);
    set_fail = driver ? (fakecuda_set_fail_fn)dlsym(driver, "fakecuda_set_fail") : NULL;
    calls = driver ? (fakecuda_calls_fn)dlsym(driver, "fakecuda_calls") : NULL;
    reset_counters =
        driver ? (fakecuda_reset_counters_fn)dlsym(driver, "fakecuda_reset_counters") : NULL;
    copy_delay = driver ? (fakecuda_set_copy_delay_us_fn)dlsym(driver,
                                                              "fakecuda_set_copy_delay_us")
                        : NULL;
    set_cc_major = driver ? (fakecuda_set_cc_major_fn)dlsym(driver, "fakecuda_set_cc_major")
                          : NULL;
    event_delay = driver ? (fakecuda_set_event_sync_delay_us_fn)dlsym(
                               driver, "fakecuda_set_event_sync_delay_us")
                         : NULL;
    hold_maps = driver ? (void (*)(int))dlsym(driver, "fakecuda_hold_maps") : NULL;
    CHECK(set_fail && calls && reset_counters && copy_delay && set_cc_major && event_delay &&
          hold_maps);
    mvm_model *m = NULL;
    CHECK_ST(load(model_path("llama", MVM_W_F32), MVM_BACKEND_CUDA, 1, &m), MVM_OK);
    if (!m || !set_fail || !calls || !reset_counters || !copy_delay || !set_cc_major ||
        !event_delay || !hold_maps)
        TEST_END();
    mvm_space_info info;
    mvm_space_get_info(m->space, &info);
    home_mapped = info.home_mapped;
    mvm_model_free(m);
    fprintf(stderr, "fake device %s HOST_NUMA VMM\n", home_mapped ? "with" : "without");
    RUN(test_matches_cpu);
    RUN(test_batch_sequences);
    RUN(test_context_bytes);
    RUN(test_kv_types_refused);
    RUN(test_logit_chunks);
    RUN(test_residency);
    RUN(test_load_wait);
    RUN(test_speculative);
    RUN(test_window);
    RUN(test_assign);
    RUN(test_read_in_place);
    RUN(test_failures);
    RUN(test_quantize_once);
    RUN(test_round_trips);
    RUN(test_device_round_trips);
    RUN(test_device_routing);
    RUN(test_prompt_routing);
    RUN(test_budget_routing);
    RUN(test_slots);
    RUN(test_other_threads);
    RUN(test_device_cpu);
    RUN(test_graph_faults);
    RUN(test_device_sequences);
    RUN(test_cpu_moe);
    RUN(test_pool_near_gpu);
    RUN(test_time_expert);
    RUN(test_expert_rows);
    RUN(test_gemm);
    RUN(test_mmq);
    mvm_pool_destroy(pool);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    TEST_END();
}
