/*
 * The engine's device (engine/compute/gpu.c) over tests/fakecuda, with the engine's kernels
 * emulated on the CPU (FAKECUDA_KERNELS: tests/fakecuda/fake_engine_kernels.cc). What runs is
 * the real path: the embedded PTX loaded as modules, every kernel found by name, argument
 * structs passed as the kernels' one parameter, shapes from kernels/cuda/kernels.h, copies
 * and launches in stream order. Results are checked against the CPU kernels on random data
 * (the kernels' own numerics: tests/test_cuda_kernels.cc); failures of the driver name the
 * module or kernel.
 *
 * usage: test_gpu path/to/fake/libcuda.so.1 (FAKECUDA_KERNELS set by the caller); on a GPU
 * machine, test_gpu path/to/the/real/libcuda.so.1 checks the PTX's kernels on the device
 * (tests/gpu/kernels.sh).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compute/gpu.h"
#include "fakecuda.h"
#include "kernels/cpu/kernels.h"
#include "tests/check.h"
#include "vmm/error.h"

static uint64_t rng = 0x243F6A8885A308D3ull;
static mvm_gpu *g;                   /* the device the tests share */
static fakecuda_set_fail_fn set_fail; /* the fake's fault injection */
static fakecuda_calls_fn calls;       /* and its count of each driver function's calls */
static fakecuda_set_cc_major_fn set_cc_major; /* and the compute capability it reports */
static int on_fake;                  /* the kernels are the fake's plugin, on the CPU */

static float rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

static float *randoms(size_t n)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = rnd();
    return v;
}

static double rel_err(const float *got, const float *want, size_t n)
{
    double err = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        err = isnan(d) || d > err ? (isnan(d) ? INFINITY : d) : err;
        scale = fabs((double)want[i]) > scale ? fabs((double)want[i]) : scale;
    }
    return err / scale;
}

/* Device copies of host buffers, freed at the end of each test. */
static mvm_dptr up(const void *src, size_t bytes)
{
    mvm_dptr p = 0;
    CHECK_ST(mvm_gpu_alloc(g, bytes, &p), MVM_OK);
    if (p)
        CHECK_ST(mvm_gpu_upload(g, p, src, bytes), MVM_OK);
    return p;
}

/* The activations of n_tok rows of n floats at dx for weights of type t, on the device:
 * the rows themselves for the float types, their Q8_0 or Q8_K blocks (mvm_g_quantize) for
 * the Q and K types, checked against the CPU's. *stride: bytes per row. */
static mvm_dptr device_act(enum mvm_wtype t, mvm_dptr dx, const float *x, uint32_t n,
                           uint32_t n_tok, size_t *stride)
{
    *stride = mvm_k_act_bytes(t, n);
    if (mvm_k_block_elems(t) == 1)
        return dx;
    mvm_dptr dq = 0;
    uint8_t *want = malloc(n_tok * *stride), *got = malloc(n_tok * *stride);
    for (uint32_t i = 0; i < n_tok; i++)
        mvm_k_prepare_act(t, x + (size_t)i * n, want + i * *stride, n);
    CHECK_ST(mvm_gpu_alloc(g, n_tok * *stride, &dq), MVM_OK);
    mvm_g_quantize_args qa = {dx, dq, n, *stride, n, n_tok, t, 0};
    CHECK_ST(mvm_gpu_quantize(g, 0, &qa), MVM_OK);
    CHECK_ST(mvm_gpu_download(g, got, dq, n_tok * *stride), MVM_OK);
    CHECK(memcmp(got, want, n_tok * *stride) == 0); /* the same rounding, bit for bit */
    free(want), free(got);
    return dq;
}

/* One product of n_tok tokens by n_out rows in weight type t (split warps a row; mmq: by
 * mmq's kernel instead), its relative error against the CPU's in *err; the launch's
 * status. */
static mvm_status product_once(enum mvm_wtype t, uint32_t n_out, uint32_t n_tok, uint32_t split,
                               int mmq, double *err)
{
    const uint32_t n_in = mvm_k_is_k(t) ? 768 : 320; /* several warp steps */
    const size_t rb = mvm_k_row_bytes(t, n_in);
    const size_t ab = mvm_k_act_bytes(t, n_in), ny = (size_t)n_tok * n_out;
    float *wf = randoms((size_t)n_out * n_in), *x = randoms((size_t)n_tok * n_in);
    uint8_t *w = malloc(n_out * rb), *act = malloc(n_tok * ab);
    float *want = malloc(ny * sizeof *want), *got = malloc(ny * sizeof *got);
    mvm_k_quantize(t, wf, w, (size_t)n_out * n_in);
    for (uint32_t k = 0; k < n_tok; k++)
        mvm_k_prepare_act(t, x + k * n_in, act + k * ab, n_in);
    mvm_k_matmul(t, w, rb, n_in, act, ab, n_tok, want, n_out, 0, n_out);
    size_t as = 0;
    mvm_dptr dw = up(w, n_out * rb), dx = up(x, n_tok * n_in * 4), dy = 0;
    mvm_dptr da = device_act(t, dx, x, n_in, n_tok, &as);
    CHECK_ST(mvm_gpu_alloc(g, ny * sizeof *got, &dy), MVM_OK);
    mvm_g_matvec_args ma = {.w = dw, .act = da, .y = dy, .row_bytes = rb, .act_stride = as,
                            .y_stride = n_out, .n_in = n_in, .n_out = n_out, .n_tok = n_tok,
                            .split = split};
    memset(got, 0xff, ny * sizeof *got);
    CHECK_ST(mvm_gpu_upload(g, dy, got, ny * sizeof *got), MVM_OK);
    mvm_status st = mmq ? mvm_gpu_mmq_matmul(g, t, &ma) : mvm_gpu_matvec(g, t, &ma);
    CHECK_ST(mvm_gpu_download(g, got, dy, ny * sizeof *got), MVM_OK);
    *err = rel_err(got, want, ny);
    if (da != dx)
        mvm_gpu_free(g, da);
    mvm_gpu_free(g, dw), mvm_gpu_free(g, dx), mvm_gpu_free(g, dy);
    free(wf), free(x), free(w), free(act), free(want), free(got);
    return st;
}

/* One product of 2 tokens by 7 rows on the integer kernels (product_once). */
static mvm_status matvec_once(enum mvm_wtype t, uint32_t split, double *err)
{
    return product_once(t, 7, 2, split, 0, err);
}

/* A matrix product in every weight type, against the CPU: a warp a row, and a block a row
 * (mvm_g_matvec_split); and a batch's by mmq's kernel in its types, where the device has
 * it: two tiles of rows and of tokens, each second partial (70 rows, 67 tokens). */
static void test_matvec(void)
{
    for (int i = 0; i < MVM_W_COUNT; i++) {
        const enum mvm_wtype t = (enum mvm_wtype)i;
        const uint32_t splits[] = {1, MVM_G_WARPS};
        for (size_t s = 0; s < sizeof splits / sizeof *splits; s++) {
            double e = 1;
            CHECK_ST(matvec_once(t, splits[s], &e), MVM_OK);
            if (e >= 1e-5)
                fprintf(stderr, "matvec_%s (split %u): relative error %g\n",
                        mvm_k_wtype_name(t), splits[s], e);
            CHECK(e < 1e-5);
        }
        if (!mvm_gpu_has(g, MVM_GK_MMQ_MATMUL, t))
            continue;
        double e = 1;
        CHECK_ST(product_once(t, 70, 67, 1, 1, &e), MVM_OK);
        if (e >= 1e-5)
            fprintf(stderr, "mmq_matmul_%s: relative error %g\n", mvm_k_wtype_name(t), e);
        CHECK(e < 1e-5);
    }
}

/* Q8_K activations made by a warp per block, to the CPU's bytes where the lanes must agree:
 * the largest magnitude twice with opposite signs in other lanes' floats (the first one
 * sets the sign of the scale), in one lane's floats, a row of zeros, one nonzero float. */
static void test_quantize_k(void)
{
    const uint32_t n = 4 * MVM_QK_K, rows = 2;
    float *x = randoms((size_t)rows * n);
    x[200] = 2.0f, x[40] = -2.0f;           /* lanes 25 and 5: -2 first */
    x[256 + 9] = 3.0f, x[256 + 12] = -3.0f;  /* one lane: 3 first */
    memset(x + 512, 0, MVM_QK_K * sizeof *x); /* all zeros */
    memset(x + 768, 0, MVM_QK_K * sizeof *x), x[768 + 255] = -0.5f; /* one float */
    x[n + 100] = -1.5f, x[n + 101] = 1.5f;  /* one lane again: -1.5 */
    size_t stride = 0;
    mvm_dptr dx = up(x, (size_t)rows * n * 4);
    mvm_dptr dq = device_act(MVM_W_Q4_K, dx, x, n, rows, &stride); /* checks the bytes */
    mvm_gpu_free(g, dq), mvm_gpu_free(g, dx);
    free(x);
}

/* The largest argument struct: one expert for T tokens (at most 3), up, down and sum,
 * against the CPU; with one_row (T 1), decode's up (up1) and the blocks down reads; with
 * mmq, the tensor cores' int8 kernels (kernels/cuda/mmq.cu: on a real GPU, the mma
 * fragments' layout). */
static void expert_case(mvm_k_expert_fmt f, uint32_t T, uint32_t one_row, uint32_t mmq)
{
    /* more units than a warp step of the device kernels takes (row_dot_tile) */
    const uint32_t D = mvm_k_is_k(f.gate_up) ? 768 : 320, F = mvm_k_is_k(f.down) ? 512 : 96;
    const uint32_t G = F / (uint32_t)mvm_k_expert_group_channels(f);
    const size_t row = mvm_k_row_bytes(f.gate_up, D), drow = mvm_k_row_bytes(f.down, F);
    const size_t ebytes = G * mvm_k_expert_group_bytes(f, D);
    float *gate = randoms((size_t)F * D), *upw = randoms((size_t)F * D),
          *down = randoms((size_t)D * F), *x = randoms((size_t)T * D),
          *x0 = malloc(T * D * 4), *want = malloc(T * D * 4), *got = malloc(T * D * 4);
    uint8_t *gq = malloc(F * row), *uq = malloc(F * row), *dq = malloc(D * drow),
            *expert = malloc(ebytes), *act = malloc(mvm_k_act_bytes(f.gate_up, D));
    mvm_k_quantize(f.gate_up, gate, gq, (size_t)F * D);
    mvm_k_quantize(f.gate_up, upw, uq, (size_t)F * D);
    mvm_k_quantize(f.down, down, dq, (size_t)D * F);
    mvm_k_expert_pack(f, gq, uq, dq, D, F, expert);
    float w[3] = {0.5f, -1.25f, 0.75f};
    memcpy(x0, x, T * D * 4);
    memcpy(want, x, T * D * 4);
    for (uint32_t i = 0; i < T; i++) {
        mvm_k_prepare_act(f.gate_up, x + i * D, act, D);
        mvm_k_expert_ffn(f, expert, D, act, w[i], want + i * D, 0, G);
    }
    uint32_t active[1] = {0}, off[1] = {0}, cnt[1] = {T}, row_tok[3] = {0, 1, 2};
    uint32_t tok_rows[3] = {0, 1, 2};
    size_t as = 0, hs = mvm_k_act_bytes(f.down, F);
    mvm_dptr de = up(expert, ebytes), dx = up(x, T * D * 4), dxa = up(x, T * D * 4),
             da = up(active, 4), doff = up(off, 4), dcnt = up(cnt, 4),
             drt = up(row_tok, sizeof row_tok), drw = up(w, sizeof w),
             dtr = up(tok_rows, sizeof tok_rows), dh = 0, dout = 0;
    mvm_dptr dact = device_act(f.gate_up, dxa, x, D, T, &as);
    CHECK_ST(mvm_gpu_alloc(g, T * hs, &dh), MVM_OK);
    CHECK_ST(mvm_gpu_alloc(g, T * D * 4, &dout), MVM_OK);
    mvm_dptr dhf = 0; /* up's floats, before down's blocks */
    CHECK_ST(mvm_gpu_alloc(g, T * F * 4, &dhf), MVM_OK);
    mvm_g_expert_args ea = {.experts = de, .act = dact, .active = da, .off = doff,
                            .cnt = dcnt, .row_tok = drt, .row_w = drw, .h = dh, .out = dout,
                            .hf = dhf, .expert_stride = ebytes, .act_stride = as,
                            .h_stride = hs, .n_embd = D, .n_groups = G, .n_active = 1,
                            .gate_up = f.gate_up, .down = f.down, .glu = f.glu,
                            .one_row = one_row, .mmq = mmq};
    mvm_g_expert_sum_args sa = {dx, dout, dtr, D, T, 1, 0};
    CHECK_ST(mvm_gpu_experts(g, &ea), MVM_OK);
    CHECK_ST(mvm_gpu_expert_sum(g, 0, &sa), MVM_OK);
    CHECK_ST(mvm_gpu_download(g, got, dx, T * D * 4), MVM_OK);
    for (uint32_t i = 0; i < T * D; i++) /* the experts' part: x0 would hide it */
        got[i] -= x0[i], want[i] -= x0[i];
    double e = rel_err(got, want, T * D);
    if (e >= 1e-4)
        fprintf(stderr, "experts %s/%s%s: relative error %g\n", mvm_k_wtype_name(f.gate_up),
                mvm_k_wtype_name(f.down), one_row ? " (up1)" : mmq ? " (mmq)" : "", e);
    CHECK(e < 1e-4);
    mvm_dptr all[] = {de, dx, dxa, da, doff, dcnt, drt, drw, dtr, dh, dout, dhf,
                      dact != dxa ? dact : 0};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        mvm_gpu_free(g, all[i]);
    free(gate), free(upw), free(down), free(x), free(x0), free(want), free(got);
    free(gq), free(uq), free(dq), free(expert), free(act);
}

/* Every weight type, and a K-quant file's mixes (Q4_K_M's Q6_K down, the Q5_0 fallback);
 * three rows, and decode's one; Q8_0, the K-quant files' types (Q2_K's, Q3_K_M's, Q4_K_M's,
 * Q5_K_M's, Q2_K, Q3_K, Q5_K, Q6_K) and the table types (MXFP4, IQ4_NL) by the mmq kernels
 * where the device has them
 * (compute capability 8.0; the fake's is 9.0). */
static void test_experts(void)
{
    for (uint32_t one_row = 0; one_row < 2; one_row++) {
        const uint32_t T = one_row ? 1 : 3;
        for (int t = 0; t < MVM_W_COUNT; t++)
            expert_case(mvm_k_expert_uniform((enum mvm_wtype)t), T, one_row, 0);
        expert_case((mvm_k_expert_fmt){MVM_W_Q4_K, MVM_W_Q6_K}, T, one_row, 0);
        expert_case((mvm_k_expert_fmt){MVM_W_Q4_K, MVM_W_Q5_0}, T, one_row, 0);
    }
    if (mvm_gpu_has(g, MVM_GK_EXPERT_MMQ_UP, MVM_W_Q8_0)) {
        expert_case(mvm_k_expert_uniform(MVM_W_Q8_0), 3, 0, 1);
        expert_case(mvm_k_expert_uniform(MVM_W_Q4_K), 3, 0, 1);
        expert_case((mvm_k_expert_fmt){MVM_W_Q4_K, MVM_W_Q6_K}, 3, 0, 1);
        expert_case((mvm_k_expert_fmt){MVM_W_Q5_K, MVM_W_Q6_K}, 3, 0, 1);
        expert_case(mvm_k_expert_uniform(MVM_W_Q5_K), 3, 0, 1);
        expert_case(mvm_k_expert_uniform(MVM_W_Q6_K), 3, 0, 1);
        expert_case((mvm_k_expert_fmt){MVM_W_Q3_K, MVM_W_Q4_K}, 3, 0, 1);
        expert_case(mvm_k_expert_uniform(MVM_W_Q3_K), 3, 0, 1);
        expert_case((mvm_k_expert_fmt){MVM_W_Q2_K, MVM_W_Q3_K}, 3, 0, 1);
        expert_case(mvm_k_expert_uniform(MVM_W_Q2_K), 3, 0, 1);
        expert_case(mvm_k_expert_uniform(MVM_W_IQ4_XS), 3, 0, 1);
        expert_case(mvm_k_expert_uniform(MVM_W_MXFP4), 3, 0, 1);
        expert_case(mvm_k_expert_uniform(MVM_W_IQ4_NL), 3, 0, 1);
    } else
        fprintf(stderr, "the device is older than compute capability 8.0: no mmq kernels to "
                "test\n");
}

/* Launches and a device copy run in the order queued: y = rmsnorm(x); y += x; copy. */
static void test_stream_order(void)
{
    const uint32_t n = 150;
    float *x = randoms(n), want[150], got[150];
    mvm_k_rmsnorm(want, x, NULL, n, 1e-5f);
    for (uint32_t i = 0; i < n; i++)
        want[i] += x[i];
    mvm_dptr dx = up(x, n * 4), dy = 0, dz = 0;
    CHECK_ST(mvm_gpu_alloc(g, n * 4, &dy), MVM_OK);
    CHECK_ST(mvm_gpu_alloc(g, n * 4, &dz), MVM_OK);
    mvm_g_rmsnorm_args ra = {.x = dx, .out = dy, .x_stride = n, .out_stride = n, .n = n,
                             .n_rows = 1, .eps = 1e-5f};
    mvm_g_add_args aa = {dy, dx, 0, n, n, 1};
    CHECK_ST(mvm_gpu_rmsnorm(g, 0, &ra), MVM_OK);
    CHECK_ST(mvm_gpu_add(g, 0, &aa), MVM_OK);
    CHECK_ST(mvm_gpu_copy(g, dz, dy, n * 4), MVM_OK);
    CHECK_ST(mvm_gpu_download(g, got, dz, n * 4), MVM_OK);
    CHECK(rel_err(got, want, n) < 1e-6);
    mvm_gpu_free(g, dx), mvm_gpu_free(g, dy), mvm_gpu_free(g, dz);
    free(x);
}

/* Strided rows device to device (MLA's rotary part of each head's query): 10 rows of 3
 * floats, 15 apart, into rows 5 apart whose other floats keep their poison. */
static void test_copy_rows(void)
{
    float *x = randoms(150), got[50];
    for (int i = 0; i < 50; i++)
        got[i] = NAN;
    mvm_dptr dx = up(x, 150 * 4), dy = up(got, sizeof got);
    CHECK_ST(mvm_gpu_copy_rows(g, dy, 5 * 4, dx + 2 * 4, 15 * 4, 3 * 4, 10), MVM_OK);
    CHECK_ST(mvm_gpu_download(g, got, dy, sizeof got), MVM_OK);
    int ok = 1;
    for (int r = 0; r < 10; r++)
        for (int j = 0; j < 5; j++)
            ok &= j < 3 ? got[r * 5 + j] == x[r * 15 + 2 + j] : isnan(got[r * 5 + j]);
    CHECK(ok);
    mvm_gpu_free(g, dx), mvm_gpu_free(g, dy);
    free(x);
}

/* The count of `name`'s row in a profile report, -1 without one. */
static long prof_calls(const char *report, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, "\n  %s ", name);
    const char *row = strstr(report, key);
    return row ? strtol(row + strlen(key), NULL, 10) : -1;
}

/* MOEVM_GPU_PROFILE's timing (engine/compute/gpu_profile.c) on a device of its own: every
 * launch and copy counted under its kind, across more operations between two syncs than
 * the profile has slots (it then syncs by itself), and the device's busy time reported. */
static void test_profile(void)
{
    mvm_gpu *p = NULL;
    CHECK_ST(mvm_gpu_open(0, 0, &p), MVM_OK);
    if (!p)
        return;
    CHECK_ST(mvm_gpu_profile(p), MVM_OK);
    const uint32_t n = 64;
    float *x = randoms(n), got[64];
    mvm_dptr dx = 0, dy = 0;
    CHECK_ST(mvm_gpu_alloc(p, n * 4, &dx), MVM_OK);
    CHECK_ST(mvm_gpu_alloc(p, n * 4, &dy), MVM_OK);
    for (int i = 0; i < 700; i++)
        CHECK_ST(mvm_gpu_upload(p, dx, x, n * 4), MVM_OK);
    mvm_g_rmsnorm_args ra = {.x = dx, .out = dy, .x_stride = n, .out_stride = n, .n = n,
                             .n_rows = 1, .eps = 1e-5f};
    for (int i = 0; i < 3; i++)
        CHECK_ST(mvm_gpu_rmsnorm(p, 0, &ra), MVM_OK);
    CHECK_ST(mvm_gpu_copy(p, dx, dy, n * 4), MVM_OK);
    CHECK_ST(mvm_gpu_download(p, got, dx, n * 4), MVM_OK);
    char *report = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&report, &len);
    mvm_gpu_profile_report(p, f);
    fclose(f);
    CHECK(report && strstr(report, "gpu profile: ") == report &&
          strstr(report, "the device busy") && strstr(report, "; 2 syncs"));
    CHECK(prof_calls(report, "copy host -> device") == 700);
    CHECK(prof_calls(report, "mvm_g_rmsnorm") == 3);
    CHECK(prof_calls(report, "copy or zero on the device") == 1);
    CHECK(prof_calls(report, "copy device -> host") == 1);
    CHECK(prof_calls(report, "mvm_g_matvec") == -1); /* none: no row */
    free(report);
    mvm_gpu_free(p, dx), mvm_gpu_free(p, dy);
    mvm_gpu_close(p);
    free(x);
}

/* Attention through mvm_gpu_attention_on (the splits, then their combination) against the
 * CPU's mvm_k_attn_heads at 1024 positions of an F16 cache, one query and two, each launch in
 * several splits, on ops.cu's kernel and on the tensor cores' (the fake is compute capability
 * 9: attention_mma.cu's module is loaded; mvm_gpu_attention takes it): Qwen3-30B-A3B's heads
 * (32 over 4 kv heads of 128) and DeepSeek-V2-Lite's latent rows (16 heads over one 576-wide
 * row that is its own value). test_cuda_kernels checks the kernels' other cases. */
static void attention_case(uint32_t nh, uint32_t nkv, uint32_t hd, int latent)
{
    const uint32_t n_ctx = 1024, q_dim = nh * hd, kv_dim = nkv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *q = randoms(2 * q_dim), *k = randoms((size_t)n_ctx * kv_dim);
    float *v = randoms((size_t)n_ctx * kv_dim), *scratch = malloc(n_ctx * sizeof *scratch);
    float *want = malloc(2 * q_dim * sizeof *want), *got = malloc(2 * q_dim * sizeof *got);
    uint16_t *kc = malloc((size_t)n_ctx * kv_dim * 2), *vc = malloc((size_t)n_ctx * kv_dim * 2);
    mvm_k_quantize(MVM_W_F16, k, kc, (size_t)n_ctx * kv_dim);
    mvm_k_quantize(MVM_W_F16, latent ? k : v, vc, (size_t)n_ctx * kv_dim);
    mvm_dptr dq = up(q, 2 * q_dim * 4), dk = up(kc, (size_t)n_ctx * kv_dim * 2);
    mvm_dptr dv = latent ? dk : up(vc, (size_t)n_ctx * kv_dim * 2), dout = 0, dpart = 0;
    CHECK_ST(mvm_gpu_alloc(g, 2 * q_dim * 4, &dout), MVM_OK);
    CHECK_ST(mvm_gpu_alloc(g, mvm_g_attention_part_bytes(2, nh, nkv, hd), &dpart), MVM_OK);
    for (uint32_t n_tok = 1; n_tok <= 2; n_tok++) {
        const uint32_t pos0 = n_ctx - n_tok;
        for (uint32_t i = 0; i < n_tok; i++)
            for (uint32_t h = 0; h < nh; h++) {
                const size_t kvo = (size_t)(h / (nh / nkv)) * hd;
                mvm_k_attn_heads(q + i * q_dim + h * hd, 1, MVM_W_F16, kc + kvo, vc + kvo,
                                 kv_dim, pos0 + i + 1, hd, scale, NULL, scratch,
                                 want + i * q_dim + h * hd);
            }
        mvm_g_attention_args a = {.q = dq, .kc = dk, .vc = dv, .out = dout, .part = dpart,
                                  .n_tok = n_tok, .pos0 = pos0, .n_head = nh, .n_head_kv = nkv,
                                  .head_dim = hd, .n_ctx = n_ctx, .kv_type = MVM_W_F16, .scale = scale};
        CHECK(mvm_g_attention_splits(&a) > 1);
        CHECK(mvm_g_attention_mma_takes(&a));
        for (int mma = 0; mma < 3; mma++) { /* off, on, mvm_gpu_attention's choice */
            const unsigned long mma0 = fakecuda_engine_launches("mvm_g_attention_mma");
            CHECK_ST(mma < 2 ? mvm_gpu_attention_on(g, 0, &a, mma) : mvm_gpu_attention(g, 0, &a),
                     MVM_OK);
            /* the plugin counts launches; a real driver runs the PTX (none counted) */
            CHECK(!on_fake ||
                  fakecuda_engine_launches("mvm_g_attention_mma") - mma0 == (mma > 0));
            CHECK_ST(mvm_gpu_download(g, got, dout, n_tok * q_dim * 4), MVM_OK);
            const double e = rel_err(got, want, n_tok * q_dim);
            if (e >= 1e-5)
                fprintf(stderr, "attention %u/%u x %u, %u queries, mma %d: relative error %g\n",
                        nh, nkv, hd, n_tok, mma, e);
            CHECK(e < 1e-5);
        }
    }
    mvm_gpu_free(g, dq), mvm_gpu_free(g, dk), mvm_gpu_free(g, dout), mvm_gpu_free(g, dpart);
    if (!latent)
        mvm_gpu_free(g, dv);
    free(q), free(k), free(v), free(scratch), free(want), free(got), free(kc), free(vc);
}

static void test_attention(void)
{
    attention_case(32, 4, 128, 0);
    attention_case(16, 1, 576, 1);
}

/* A failing driver call is named, with the module or kernel it was for. */
static void test_failures(void)
{
    mvm_gpu_close(g);
    g = NULL;
    CHECK_ST(mvm_gpu_open(3, 0, &g), MVM_ERR_RANGE);
    CHECK(g == NULL);
    CHECK(set_fail("cuModuleLoadData:2") == 0);
    CHECK_ST(mvm_gpu_open(0, 0, &g), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "cuModuleLoadData (kernels/cuda/expert.cu) failed") != NULL);
    CHECK(set_fail("cuModuleGetFunction:2:CUDA_ERROR_NOT_FOUND") == 0);
    CHECK_ST(mvm_gpu_open(0, 0, &g), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "cuModuleGetFunction (mvm_g_expert_quantize) failed: "
                                   "CUDA_ERROR_NOT_FOUND") != NULL);
    CHECK(set_fail("cuLaunchKernel:1") == 0);
    CHECK_ST(mvm_gpu_open(0, 0, &g), MVM_OK);
    float x[32] = {0};
    mvm_dptr dx = g ? up(x, sizeof x) : 0;
    mvm_g_rmsnorm_args ra = {.x = dx, .out = dx, .x_stride = 32, .out_stride = 32, .n = 32,
                             .n_rows = 1, .eps = 1e-5f};
    if (g) {
        CHECK_ST(mvm_gpu_rmsnorm(g, 0, &ra), MVM_ERR_BACKEND);
        CHECK(strstr(mvm_last_error(), "cuLaunchKernel (mvm_g_rmsnorm) failed") != NULL);
        mvm_g_matvec_args ma = {0};
        CHECK_ST(mvm_gpu_matvec(g, MVM_W_COUNT, &ma), MVM_ERR_INVALID);
        mvm_gpu_free(g, dx);
    }
    mvm_gpu_close(g);
    g = NULL;
    set_fail(NULL);
}

/* Each weight type's kernels are a module of their own (kernels/cuda/typed.cu), loaded at
 * the first launch of one of them: once, whatever launches follow; a load or lookup that
 * fails is named, leaves nothing behind, and the next launch loads it again. */
static void test_typed_modules(void)
{
    mvm_gpu_close(g);
    const unsigned long before = calls("cuModuleLoadData");
    CHECK_ST(mvm_gpu_open(0, 0, &g), MVM_OK);
    if (!g)
        return;
    const unsigned long at_open = calls("cuModuleLoadData");
    CHECK(at_open == before + 6); /* the kernels of no type, mmq and attention_mma too */
    CHECK(mvm_gpu_has(g, MVM_GK_MATVEC, MVM_W_Q8_0)); /* there to load */
    double e = 1;
    CHECK_ST(matvec_once(MVM_W_Q8_0, 1, &e), MVM_OK);
    CHECK(e < 1e-5);
    CHECK(calls("cuModuleLoadData") == at_open + 1);
    CHECK_ST(matvec_once(MVM_W_Q8_0, MVM_G_WARPS, &e), MVM_OK);
    CHECK_ST(matvec_once(MVM_W_F32, 1, &e), MVM_OK); /* f32's kernels are in q8_0's module */
    CHECK(e < 1e-5);
    CHECK(calls("cuModuleLoadData") == at_open + 1);
    CHECK_ST(matvec_once(MVM_W_Q4_K, 1, &e), MVM_OK);
    CHECK(calls("cuModuleLoadData") == at_open + 2);

    CHECK(set_fail("cuModuleLoadData:1") == 0);
    CHECK_ST(matvec_once(MVM_W_Q6_K, 1, &e), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "cuModuleLoadData (kernels/cuda/typed.cu, q6_K) failed"));
    const unsigned long unloads = calls("cuModuleUnload");
    CHECK(set_fail("cuModuleGetFunction:3:CUDA_ERROR_NOT_FOUND") == 0);
    CHECK_ST(matvec_once(MVM_W_Q6_K, 1, &e), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "cuModuleGetFunction (mvm_g_expert_up1_q6_K) failed: "
                                   "CUDA_ERROR_NOT_FOUND"));
    CHECK(calls("cuModuleUnload") == unloads + 1); /* the half-looked-up module */
    set_fail(NULL);
    e = 1;
    CHECK_ST(matvec_once(MVM_W_Q6_K, 1, &e), MVM_OK);
    CHECK(e < 1e-5);
    CHECK(calls("cuModuleLoadData") == at_open + 5);
}

/* The chain x += y, y += x, ... (n_kernels launches, each reading the one before's output) as
 * one graph, twice from x = y = 1: Fibonacci's numbers, exact in floats, wherever a kernel
 * read its input before the one before had written it they are not. *pdl_edges: the
 * graph's programmatic edges. */
static void fibonacci_graph(uint32_t n_kernels, uint64_t *pdl_edges)
{
    enum { N = 4096 }; /* 32 blocks a launch */
    float *ones = malloc(N * sizeof *ones), *got = malloc(N * sizeof *got);
    for (uint32_t j = 0; j < N; j++)
        ones[j] = 1.0f;
    mvm_dptr x = up(ones, N * sizeof *ones), y = up(ones, N * sizeof *ones);
    CHECK(mvm_gpu_graphs(g));
    for (int round = 0; round < 2; round++) {
        CHECK_ST(mvm_gpu_upload(g, x, ones, N * sizeof *ones), MVM_OK);
        CHECK_ST(mvm_gpu_upload(g, y, ones, N * sizeof *ones), MVM_OK);
        mvm_gpu_record(g);
        for (uint32_t k = 0; k < n_kernels; k++) {
            mvm_g_add_args a = {.x = k % 2 ? y : x, .y = k % 2 ? x : y, .n = N, .n_tok = 1};
            CHECK_ST(mvm_gpu_add(g, 0, &a), MVM_OK);
        }
        CHECK_ST(mvm_gpu_replay(g), MVM_OK);
        CHECK_ST(mvm_gpu_sync(g), MVM_OK);
        double fib[2] = {1, 1}; /* x, y */
        for (uint32_t k = 0; k < n_kernels; k++)
            fib[k % 2] += fib[1 - k % 2];
        for (int v = 0; v < 2; v++) {
            CHECK_ST(mvm_gpu_download(g, got, v ? y : x, N * sizeof *got), MVM_OK);
            int bad = 0;
            for (uint32_t j = 0; j < N; j++)
                bad += got[j] != (float)fib[v];
            CHECK(bad == 0);
        }
    }
    uint64_t built, updated;
    mvm_gpu_graph_stats(g, &built, &updated, pdl_edges);
    CHECK(built == 1 && updated == 0); /* the second round replayed the first's graph */
    mvm_gpu_free(g, x), mvm_gpu_free(g, y);
    free(ones), free(got);
}

/* Programmatic dependent launch (MVM_GPU_PDL: engine/compute/ptx_pdl.c, gpu_graph.c): on a
 * compute capability 9.0 device a graph's kernels follow each other by programmatic edges
 * (over the fake, which refuses one into a kernel whose PTX does not wait, and on a GPU,
 * where such a kernel could read its input early: tests/gpu/kernels.sh), and the chain's
 * results are exact; on an older device, or where the driver refuses the edges, the
 * kernels wait for each other in full, with the same results. */
static void test_pdl(void)
{
    const uint32_t n_kernels = 24;
    uint64_t edges = 0;
    mvm_gpu_close(g);
    CHECK_ST(mvm_gpu_open(0, MVM_GPU_PDL, &g), MVM_OK);
    if (!g)
        return;
    int cc9 = 0;
    CHECK_ST(mvm_gpu_device_cc(0, 9, &cc9), MVM_OK);
    fibonacci_graph(n_kernels, &edges);
    CHECK(edges == (cc9 ? n_kernels - 1 : 0));
    mvm_gpu_close(g);
    if (set_fail) { /* the driver refuses the edges: a graph without */
        CHECK_ST(mvm_gpu_open(0, MVM_GPU_PDL, &g), MVM_OK);
        CHECK(set_fail("cuGraphAddDependencies:1") == 0);
        if (g)
            fibonacci_graph(n_kernels, &edges);
        CHECK(edges == 0);
        set_fail(NULL);
        mvm_gpu_close(g);
    }
    if (set_cc_major) { /* a device older than 9.0 */
        set_cc_major(8);
        CHECK_ST(mvm_gpu_open(0, MVM_GPU_PDL, &g), MVM_OK);
        if (g)
            fibonacci_graph(n_kernels, &edges);
        CHECK(edges == 0);
        set_cc_major(9);
        mvm_gpu_close(g);
    }
    g = NULL;
    CHECK_ST(mvm_gpu_open(0, 0, &g), MVM_OK);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: [FAKECUDA_KERNELS=plugin.so] test_gpu path/to/libcuda.so.1\n");
        return 2;
    }
    /* Over the fake the kernels are the plugin's; over a real driver (tests/gpu/kernels.sh)
     * they are the PTX's, on the GPU, and the fault injection is skipped. */
    on_fake = getenv("FAKECUDA_KERNELS") != NULL;
    setenv("MOEVM_CUDA_LIBRARY", argv[1], 1);
    CHECK_ST(mvm_gpu_open(0, 0, &g), MVM_OK);
    if (!g)
        TEST_END();
    RUN(test_matvec);
    RUN(test_quantize_k);
    RUN(test_experts);
    RUN(test_stream_order);
    RUN(test_copy_rows);
    RUN(test_attention);
    RUN(test_profile);
    void *driver = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
    set_fail = driver ? (fakecuda_set_fail_fn)dlsym(driver, "fakecuda_set_fail") : NULL;
    CHECK(!on_fake || set_fail != NULL);
    calls = driver ? (fakecuda_calls_fn)dlsym(driver, "fakecuda_calls") : NULL;
    set_cc_major =
        driver ? (fakecuda_set_cc_major_fn)dlsym(driver, "fakecuda_set_cc_major") : NULL;
    RUN(test_pdl);
    if (set_fail && calls)
        RUN(test_typed_modules);
    if (set_fail)
        RUN(test_failures);
    mvm_gpu_close(g);
    TEST_END();
}
