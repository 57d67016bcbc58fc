/*
 * The engine's device kernels (the .cu files of kernels/cuda) run on the CPU through
 * tests/cuda_emu.h, against the CPU kernels (kernels/cpu), which tests/ref checks against
 * NumPy: every kernel, every weight type, on random data, with shapes that cross the tile
 * of tokens, the lanes of a warp and the threads of a block, strides with gaps, and blocks
 * run in a shuffled order. Outputs start poisoned (NaN): an output a kernel forgets stays
 * NaN and fails, and the gaps between strided rows must still hold the poison afterwards.
 * Under AddressSanitizer+UBSan a kernel's read outside its buffers or misaligned for its
 * type fails too, as it would fault on a GPU.
 */
#include "tests/cuda_emu.h"

#include "kernels/cuda/attention_mma.cu"
#include "kernels/cuda/expert.cu"
#include "kernels/cuda/gemm.cu"
#include "kernels/cuda/matvec.cu"
#include "kernels/cuda/mmq.cu"
#include "kernels/cuda/ops.cu"

extern "C" {
#include "kernels/cpu/kernels.h"
}

#include <math.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "tests/check.h"

static std::mt19937_64 rng(20261121);

static const float POISON = NAN;

static mvm_dptr dp(const void *p) { return (mvm_dptr)(uintptr_t)p; }

/* Runs kernel k on a in the shape given, its blocks in a random order. */
template <typename A> static void launch(void (*k)(A), const A &a, mvm_g_shape s)
{
    /* the device's limits (the emulator has none): a grid of 65535 rows at most */
    CHECK(s.gx <= 0x7fffffffu && s.gy <= 65535 && s.block <= 1024);
    std::vector<unsigned> order(s.gx * s.gy);
    for (unsigned i = 0; i < order.size(); i++)
        order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    emu_launch(dim3{s.gx, s.gy, 1}, s.block, order, [&] { k(a); });
}

static std::vector<float> randoms(size_t n, float scale = 1.0f)
{
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (float &x : v)
        x = u(rng);
    return v;
}

/* rows of n random weights of type t, row_bytes apart (gaps filled with junk) */
static std::vector<uint8_t> weights(int t, size_t rows, size_t n, size_t row_bytes)
{
    std::vector<uint8_t> w(rows * row_bytes, 0xA5);
    for (size_t r = 0; r < rows; r++) {
        std::vector<float> f = randoms(n);
        mvm_k_quantize((enum mvm_wtype)t, f.data(), w.data() + r * row_bytes, n);
    }
    return w;
}

/* max |got - want| over max |want|: the error relative to the outputs' scale */
static double rel_err(const float *got, const float *want, size_t n)
{
    double err = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        err = std::isnan(d) ? INFINITY : std::max(err, d);
        scale = std::max(scale, fabs((double)want[i]));
    }
    return err / scale;
}

static bool poisoned(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!std::isnan(x[i]))
            return false;
    return true;
}

/* n activations per row for weights of type t, act_stride bytes apart */
static std::vector<uint8_t> activations(int t, size_t n_tok, size_t n, size_t act_stride,
                                        std::vector<float> &x)
{
    x = randoms(n_tok * n);
    std::vector<uint8_t> act(n_tok * act_stride, 0x5A);
    for (size_t i = 0; i < n_tok; i++)
        mvm_k_prepare_act((enum mvm_wtype)t, x.data() + i * n, act.data() + i * act_stride, n);
    return act;
}

/* The emulator's one-exchange sums (tests/cuda_emu.h: emu_xor_sums, which device.cuh's
 * xor_sums takes here) against the shuffle rounds they stand for, emulated lane by lane:
 * floats of magnitudes 2^-20 to 2^20, whose sums round differently in any other order of
 * additions (checked: the other direction's differs), and int32s, in every group size both
 * ways, two warps of a block, a pair and one value. */
template <typename V> static V rounds_of(V v, uint32_t lanes, bool nearest_first)
{
    for (uint32_t i = 1; i < lanes; i <<= 1)
        v += __shfl_xor_sync(FULL_MASK, v, (int)(nearest_first ? i : lanes / 2 / i));
    return v;
}

static void test_xor_sums(void)
{
    std::vector<float> f(64);
    std::vector<int32_t> n(64);
    std::uniform_int_distribution<int> e(-20, 20);
    std::uniform_int_distribution<int32_t> big(-(1 << 25), 1 << 25); /* 32 add up */
    for (int i = 0; i < 64; i++)
        f[i] = ldexpf(randoms(1)[0], e(rng)), n[i] = big(rng);
    int order_seen = 0;
    for (uint32_t lanes = 1; lanes <= 32; lanes *= 2)
        for (int near = 0; near < 2; near++) {
            std::vector<float> fa(64), fb(64), fw(64), fother(64);
            std::vector<int32_t> na(64), nw(64);
            emu_launch(dim3{1, 1, 1}, 64, {}, [&] {
                const unsigned t = threadIdx.x;
                float a = f[t], b = f[63 - t];
                int32_t c = n[t];
                xor_sums(&a, &b, lanes, near);
                xor_sums<int32_t>(&c, NULL, lanes, near);
                fa[t] = a, fb[t] = b, na[t] = c;
                fw[t] = rounds_of(f[t], lanes, near);
                fother[t] = rounds_of(f[t], lanes, !near);
                nw[t] = rounds_of(n[t], lanes, near);
            });
            for (int t = 0; t < 64; t++) {
                CHECK(memcmp(&fa[t], &fw[t], sizeof(float)) == 0);
                CHECK(memcmp(&fb[t], &fw[63 - t], sizeof(float)) == 0);
                CHECK(na[t] == nw[t]);
                order_seen += fw[t] != fother[t];
            }
        }
    CHECK(order_seen > 0);
}

/* The emulator's half to float (its tensor cores' inputs) against the CPU kernels' own
 * converter, every half: the same float, or NaN for NaN. */
static void test_emu_h2f(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = emu_h2f(h), b = mvm_k_h2f((uint16_t)h);
        bad += std::isnan(b) ? !std::isnan(a) : memcmp(&a, &b, sizeof a) != 0;
    }
    CHECK(bad == 0);
}

/* Rows of floats to Q8_0 (the Q types' activations) and Q8_K (the K-quants'): bit for bit
 * the CPU's rounding, the gaps between rows untouched. 150 Q8_0 blocks and 140 Q8_K blocks
 * a row: two blocks of threads, the second partial. The first row's blocks 1 and 2 hold a
 * NaN (within the block, and last: the CPU's running max restarts after one), block 3 is
 * zeros, block 4's largest magnitude comes twice with both signs. */
static void quantize_case(enum mvm_wtype t, uint32_t n)
{
    const uint32_t rows = 3;
    const uint64_t x_stride = n + 5, q_stride = mvm_k_act_bytes(t, n) + 8;
    std::vector<float> x = randoms(rows * x_stride, 3.0f);
    if (!mvm_k_is_k(t)) {
        x[32 + 8] = NAN, x[64 + 31] = NAN;
        std::fill(x.begin() + 96, x.begin() + 128, 0.0f);
        x[128 + 3] = 7.0f, x[128 + 20] = -7.0f;
    }
    std::vector<uint8_t> q(rows * q_stride, 0xEE), want(rows * q_stride, 0xEE);
    for (uint32_t r = 0; r < rows; r++)
        mvm_k_prepare_act(t, x.data() + r * x_stride, want.data() + r * q_stride, n);
    mvm_g_quantize_args a = {dp(x.data()), dp(q.data()), x_stride, q_stride, n, rows, t, 0};
    launch(mvm_g_quantize, a, mvm_g_quantize_shape(&a));
    CHECK(q == want);
}

static void test_quantize(void)
{
    quantize_case(MVM_W_Q4_0, 32 * 150);
    quantize_case(MVM_W_Q4_K, 256 * 140);
}

#define KERNEL_FN(name, T) mvm_g_matvec_##name,
static void (*const matvec_fn[MVM_W_COUNT])(mvm_g_matvec_args) = {MVM_G_FOR_TYPES(KERNEL_FN)};
#undef KERNEL_FN

/* mmq's kernels of type t (kernels/cuda/mmq.cu): the experts' up and down, the dense
 * product; NULL where it has none */
#define MMQ_FN(part, A)                                                                        \
    static void (*mmq_##part##_fn(enum mvm_wtype t))(A)                                        \
    {                                                                                          \
        switch (t) {                                                                           \
            MVM_G_MMQ_TYPES(MMQ_CASE_##part)                                                   \
        default: return NULL;                                                                  \
        }                                                                                      \
    }
#define MMQ_CASE_up(name, T)                                                                   \
    case T: return mvm_g_expert_mmq_up_##name;
#define MMQ_CASE_down(name, T)                                                                 \
    case T: return mvm_g_expert_mmq_down_##name;
#define MMQ_CASE_matmul(name, T)                                                               \
    case T: return mvm_g_mmq_matmul_##name;
MMQ_FN(up, mvm_g_expert_args)
MMQ_FN(down, mvm_g_expert_args)
MMQ_FN(matmul, mvm_g_matvec_args)
#undef MMQ_FN

/* Launches matvec's product of type t, or with mmq mmq's (the same arguments and results). */
static void launch_product(enum mvm_wtype t, const mvm_g_matvec_args &a, bool mmq)
{
    if (mmq)
        launch(mmq_matmul_fn(t), a, mvm_g_mmq_matmul_shape(&a));
    else
        launch(matvec_fn[t], a, mvm_g_matvec_shape(&a));
}

/* n_tok tokens through n_head matrices of n_out rows (1: one matrix), laid out as MLA's
 * per-head products are: head g's rows after head g-1's (with a gap), its activations and
 * outputs interleaved by token ([token][head][...], gaps between heads' outputs). Each head
 * against mvm_k_matmul on its own rows. With mmq, by mmq's kernel. */
static void matvec_case(enum mvm_wtype t, uint32_t n_in, uint32_t n_out, uint32_t n_tok,
                        uint32_t n_head = 1, bool accumulate = false, uint32_t split = 1,
                        bool aligned = false, bool mmq = false)
{
    /* rows and activations 16-byte aligned (aligned), or only 4-byte */
    const uint64_t row_bytes = mvm_k_row_bytes(t, n_in) + (aligned ? 16 : 8);
    const uint64_t act_row = mvm_k_act_bytes(t, n_in) + (aligned ? 16 : 4), y_head = n_out + 3;
    const uint64_t w_head = (n_out + 1) * row_bytes; /* a row of gap */
    const uint64_t act_stride = n_head * act_row, y_stride = n_head * y_head;
    std::vector<uint8_t> w = weights(t, n_head * (n_out + 1), n_in, row_bytes);
    std::vector<float> x;
    std::vector<uint8_t> act = activations(t, n_tok * n_head, n_in, act_row, x);
    std::vector<float> y(n_tok * y_stride, POISON), want(n_tok * y_stride, POISON);
    for (uint32_t g = 0; g < n_head; g++)
        mvm_k_matmul(t, w.data() + g * w_head, row_bytes, n_in, act.data() + g * act_row,
                     act_stride, n_tok, want.data() + g * y_head, y_stride, 0, n_out);
    if (accumulate) /* a residual in y, the product added to it (outside the rows: poison) */
        for (uint32_t i = 0; i < n_tok * n_head; i++)
            for (uint32_t r = 0; r < n_out; r++) {
                y[i * y_head + r] = (float)(i + 1) - 0.25f * (float)r;
                want[i * y_head + r] = y[i * y_head + r] + want[i * y_head + r];
            }
    mvm_g_matvec_args a = {.w = dp(w.data()), .act = dp(act.data()), .y = dp(y.data()),
                           .row_bytes = row_bytes, .act_stride = act_stride,
                           .y_stride = y_stride, .w_head = w_head, .act_head = act_row,
                           .y_head = y_head, .n_in = n_in, .n_out = n_out, .n_tok = n_tok,
                           .n_head = n_head, .accumulate = accumulate, .split = split, .w2 = 0,
                           .y2 = 0,
                           .w3 = 0, .y3 = 0, .y_stride2 = 0, .y_stride3 = 0, .n_out2 = 0,
                           .n_out3 = 0};
    const std::vector<float> y0 = y;
    launch_product(t, a, mmq);
    bool ok = true;
    if (t == MVM_W_F32 && aligned) {
        /* F32 rows over a tile (matvec_f32_tile): the bits of a warp's own loads, which an
         * activation copy only 4-byte aligned takes */
        std::vector<uint8_t> act4(act.size() + 4);
        std::copy(act.begin(), act.end(), act4.begin() + 4);
        std::vector<float> y4 = y0;
        mvm_g_matvec_args b = a;
        b.act = dp(act4.data() + 4), b.y = dp(y4.data());
        launch(matvec_fn[t], b, mvm_g_matvec_shape(&b));
        const bool same = memcmp(y4.data(), y.data(), y.size() * sizeof(float)) == 0;
        if (!same)
            fprintf(stderr, "matvec_f32 n_in %u n_tok %u n_head %u: not the warps' own bits\n",
                    n_in, n_tok, n_head);
        ok = ok && same;
    }
    for (uint32_t i = 0; i < n_tok * n_head; i++) {
        double e = rel_err(&y[i * y_head], &want[i * y_head], n_out);
        ok = ok && e < 1e-5 && poisoned(&y[i * y_head + n_out], y_head - n_out);
        if (e >= 1e-5)
            fprintf(stderr, "%s_%s n_in %u n_out %u n_tok %u n_head %u split %u: row %u "
                    "relative error %g\n", mmq ? "mmq_matmul" : "matvec", mvm_k_wtype_name(t),
                    n_in, n_out, n_tok, n_head, split, i, e);
    }
    CHECK(ok);
}

/* One launch of three matrices of the same type and width over the same activations (a
 * layer's q, k and v: 13, 5 and 7 rows), each into its own outputs with its own stride,
 * against mvm_k_matmul on each; the rows past each part's keep their poison. */
static void matvec_parts_case(enum mvm_wtype t, uint32_t n_in, uint32_t n_tok,
                              uint32_t split = 1, bool aligned = false, bool mmq = false)
{
    const uint32_t rows[3] = {13, 5, 7};
    const uint64_t row_bytes = mvm_k_row_bytes(t, n_in) + (aligned ? 16 : 8);
    const uint64_t act_row = mvm_k_act_bytes(t, n_in);
    std::vector<float> x;
    std::vector<uint8_t> act = activations(t, n_tok, n_in, act_row, x);
    std::vector<uint8_t> w[3];
    std::vector<float> y[3], want[3];
    uint64_t stride[3];
    for (int p = 0; p < 3; p++) {
        w[p] = weights(t, rows[p], n_in, row_bytes);
        stride[p] = rows[p] + 2 + p;
        y[p].assign(n_tok * stride[p], POISON);
        want[p].assign(n_tok * stride[p], POISON);
        mvm_k_matmul(t, w[p].data(), row_bytes, n_in, act.data(), act_row, n_tok,
                     want[p].data(), stride[p], 0, rows[p]);
    }
    mvm_g_matvec_args a = {.w = dp(w[0].data()), .act = dp(act.data()), .y = dp(y[0].data()),
                           .row_bytes = row_bytes, .act_stride = act_row, .y_stride = stride[0],
                           .w_head = 0, .act_head = 0, .y_head = 0, .n_in = n_in,
                           .n_out = rows[0], .n_tok = n_tok, .n_head = 1, .accumulate = 0,
                           .split = split, .w2 = dp(w[1].data()), .y2 = dp(y[1].data()),
                           .w3 = dp(w[2].data()),
                           .y3 = dp(y[2].data()), .y_stride2 = stride[1],
                           .y_stride3 = stride[2], .n_out2 = rows[1], .n_out3 = rows[2]};
    launch_product(t, a, mmq);
    for (int p = 0; p < 3; p++)
        for (uint32_t i = 0; i < n_tok; i++) {
            const double e = rel_err(&y[p][i * stride[p]], &want[p][i * stride[p]], rows[p]);
            CHECK(e < 1e-5 && poisoned(&y[p][i * stride[p] + rows[p]], stride[p] - rows[p]));
            if (e >= 1e-5)
                fprintf(stderr, "%s_%s, part %d of 3: relative error %g\n",
                        mmq ? "mmq_matmul" : "matvec", mvm_k_wtype_name(t), p, e);
        }
}

static void test_matvec(void)
{
    for (int i = 0; i < MVM_W_COUNT; i++) {
        const enum mvm_wtype t = (enum mvm_wtype)i;
        /* rows shorter and longer than a warp's pass (32 elements, blocks or 32-element chunks
         * of super-blocks); 13 rows: the last block of 4 warps is partly idle; 11 tokens: a
         * full tile and a partial one; 3 heads over 11 tokens: each head's tiles apart */
        const uint32_t short_in = mvm_k_is_k(t) ? 256 : mvm_k_is_q(t) ? 96 : 100;
        const uint32_t long_in = mvm_k_is_k(t) ? 1280 : mvm_k_is_q(t) ? 1088 : 1100;
        matvec_case(t, short_in, 13, 1);
        /* a long decode row: many rounds of the unrolled four, and a partial last one
         * (device.cuh, row_dot_tile: 8 Q8_0 blocks a round, one Q4_K super-block) */
        matvec_case(t, mvm_k_is_k(t) ? 256 * 37 : 32 * 150, 13, 1);
        matvec_case(t, long_in, 13, 11);
        matvec_case(t, short_in, 5, 8);
        matvec_case(t, short_in, 6, 11, 3);
        matvec_case(t, short_in, 5, 1, 4);
        matvec_case(t, long_in, 13, 3, 1, true);
        if (t == MVM_W_F32 || t == MVM_W_Q8_0 || t == MVM_W_Q4_K || t == MVM_W_Q6_K ||
            t == MVM_W_MXFP4) { /* which part a row is of does not depend on the type */
            matvec_parts_case(t, short_in, 1);
            matvec_parts_case(t, long_in, 11);
        }
    }
    /* A block a row (mvm_g_matvec_split, as decode's products of few rows run), a type of
     * each way a row splits into runs (floats by 32, F16's too; Q blocks, a table type's;
     * K super-blocks; MXFP4's): rows of fewer runs than warps (short_in), uneven parts (37
     * super-blocks, 150 blocks or 4800 floats over four warps), a float row's tail past its
     * last 32 (100, 1100), a tile of tokens and a partial one, a residual added, three
     * matrices. */
    const enum mvm_wtype split_types[] = {MVM_W_F32,  MVM_W_F16,  MVM_W_Q8_0, MVM_W_IQ4_NL,
                                          MVM_W_Q4_K, MVM_W_Q6_K, MVM_W_MXFP4};
    for (const enum mvm_wtype t : split_types) {
        const uint32_t W = MVM_G_WARPS;
        const uint32_t short_in = mvm_k_is_k(t) ? 256 : mvm_k_is_q(t) ? 96 : 100;
        const uint32_t long_in = mvm_k_is_k(t) ? 1280 : mvm_k_is_q(t) ? 1088 : 1100;
        matvec_case(t, short_in, 13, 1, 1, false, W);
        matvec_case(t, mvm_k_is_k(t) ? 256 * 37 : 32 * 150, 13, 1, 1, false, W);
        matvec_case(t, long_in, 13, 11, 1, false, W);
        matvec_case(t, long_in, 13, 1, 1, true, W);
        matvec_parts_case(t, long_in, 1, W);
    }
    /* F32 rows over several tokens, 16-byte aligned (a prompt's router: matvec_f32_tile):
     * a chunk of the tile's activations and a partial one (1100 floats), four chunks (2048),
     * a block's rows partly idle (13), a tile and a partial one (11), heads, a residual, and
     * three matrices */
    matvec_case(MVM_W_F32, 1100, 13, 11, 1, false, 1, true);
    matvec_case(MVM_W_F32, 2048, 64, 19, 1, false, 1, true);
    matvec_case(MVM_W_F32, 1100, 6, 11, 3, false, 1, true);
    matvec_case(MVM_W_F32, 1100, 13, 3, 1, true, 1, true);
    matvec_parts_case(MVM_W_F32, 1100, 11, 1, true);
}

/* mmq's product (a prompt batch's dense matrices on the int8 tensor cores) in each of its
 * types, against mvm_k_matmul as matvec's: a matrix of fewer rows than its tile of 64 and
 * one of two tiles, the second partial (70); tokens in one partial tile, and in three, the
 * last of 2 (130: its other 62 rows computed and never written); heads; a residual; the
 * 16-byte loads of aligned Q4_K and Q5_K rows; three matrices in one launch, each's last
 * tile partial. */
static void test_mmq_matmul(void)
{
    for (int i = 0; i < MVM_W_COUNT; i++) {
        const enum mvm_wtype t = (enum mvm_wtype)i;
        if (!mmq_matmul_fn(t))
            continue;
        const uint32_t short_in = mvm_k_is_k(t) ? 256 : 96;
        const uint32_t long_in = mvm_k_is_k(t) ? 1280 : 1088;
        matvec_case(t, long_in, 13, 11, 1, false, 1, false, true);
        matvec_case(t, short_in, 70, 130, 1, false, 1, false, true);
        matvec_case(t, short_in, 6, 11, 3, false, 1, false, true);
        matvec_case(t, long_in, 13, 9, 1, true, 1, false, true);
        matvec_case(t, long_in, 70, 67, 1, false, 1, true, true);
        matvec_parts_case(t, long_in, 11, 1, false, true);
        matvec_parts_case(t, short_in, 70, 1, true, true);
    }
}

#define KERNEL_FN(name, T) mvm_g_expert_up_##name,
static void (*const up_fn[MVM_W_COUNT])(mvm_g_expert_args) = {MVM_G_FOR_TYPES(KERNEL_FN)};
#undef KERNEL_FN
#define KERNEL_FN(name, T) mvm_g_expert_up1_##name,
static void (*const up1_fn[MVM_W_COUNT])(mvm_g_expert_args) = {MVM_G_FOR_TYPES(KERNEL_FN)};
#undef KERNEL_FN
#define KERNEL_FN(name, T) mvm_g_expert_down_##name,
static void (*const down_fn[MVM_W_COUNT])(mvm_g_expert_args) = {MVM_G_FOR_TYPES(KERNEL_FN)};
#undef KERNEL_FN
#define KERNEL_FN(name, T) mvm_g_expert_down1_##name,
static void (*const down1_fn[MVM_W_COUNT])(mvm_g_expert_args) = {MVM_G_FOR_TYPES(KERNEL_FN)};
#undef KERNEL_FN
#define KERNEL_FN(name, T) mvm_g_expert_up1_keep_##name,
static void (*const up1_keep_fn[MVM_W_COUNT])(mvm_g_expert_args) = {MVM_G_FOR_TYPES(KERNEL_FN)};
#undef KERNEL_FN
#define KERNEL_FN(name, T) mvm_g_expert_down1_keep_##name,
static void (*const down1_keep_fn[MVM_W_COUNT])(mvm_g_expert_args) = {
    MVM_G_FOR_TYPES(KERNEL_FN)};
#undef KERNEL_FN

/* One MoE layer's routed experts: the three kernels against mvm_k_expert_ffn per (token,
 * expert). Expert 0 serves every token (more rows than a tile), expert E-1 none. With
 * gpt-oss's unit (MVM_GLU_OAI) the experts have gate/up biases of up to ±9, so that both
 * clamps fire, and down biases, added weighted per row. */
static void experts_case(mvm_k_expert_fmt f, uint32_t n_embd, uint32_t n_ff, uint32_t n_tok)
{
    /* Each case's data from its own parameters, not from what the cases before it drew: the
     * device rounds gate/up in another order than the CPU, so an intermediate activation can
     * fall on the other side of a Q8_0 step now and then, and a case must not change its
     * data (and meet or miss such a step) because a weight type was added to the loop. */
    rng.seed(20261121u ^ (uint64_t)f.gate_up << 8 ^ (uint64_t)f.down << 16 ^
             (uint64_t)f.glu << 24 ^ (uint64_t)n_embd << 32 ^ (uint64_t)n_ff << 44 ^
             (uint64_t)n_tok << 56);
    const uint32_t E = 5, K = 2, G = n_ff / (uint32_t)mvm_k_expert_group_channels(f);
    const bool oai = f.glu == MVM_GLU_OAI;
    const uint64_t expert_bytes = G * mvm_k_expert_group_bytes(f, n_embd);
    const uint64_t stride = (expert_bytes + 255) / 256 * 256 + 256;
    std::vector<uint8_t> experts(E * stride, 0xC3);
    const uint64_t row = mvm_k_row_bytes(f.gate_up, n_embd);
    const uint64_t down_row = mvm_k_row_bytes(f.down, n_ff);
    std::vector<float> down_bias = randoms(E * n_embd, 2.0f);
    for (uint32_t e = 0; e < E; e++) {
        std::vector<uint8_t> gate = weights(f.gate_up, n_ff, n_embd, row);
        std::vector<uint8_t> up = weights(f.gate_up, n_ff, n_embd, row);
        std::vector<uint8_t> down = weights(f.down, n_embd, n_ff, down_row);
        mvm_k_expert_pack(f, gate.data(), up.data(), down.data(), n_embd, n_ff,
                          experts.data() + e * stride);
        std::vector<float> gate_b = randoms(n_ff, 9.0f), up_b = randoms(n_ff, 9.0f);
        if (oai)
            mvm_k_expert_pack_bias(f, gate_b.data(), up_b.data(), n_embd, n_ff,
                                   experts.data() + e * stride);
    }
    std::vector<uint32_t> sel(n_tok * K);
    std::vector<float> selw = randoms(n_tok * K);
    for (uint32_t i = 0; i < n_tok; i++) {
        sel[i * K] = 0;
        sel[i * K + 1] = 1 + (uint32_t)(rng() % (E - 2));
    }
    /* the rows grouped by expert, as the engine dispatches them */
    std::vector<uint32_t> cnt(E, 0), off(E, 0xFFFFFFFF), active, row_tok(n_tok * K),
        tok_rows(n_tok * K);
    std::vector<float> row_w(n_tok * K);
    for (uint32_t s : sel)
        cnt[s]++;
    for (uint32_t e = 0, o = 0; e < E; e++) {
        if (cnt[e])
            active.push_back(e), off[e] = o;
        o += cnt[e];
    }
    std::vector<uint32_t> fill(E, 0);
    for (uint32_t i = 0; i < n_tok; i++)
        for (uint32_t k = 0; k < K; k++) {
            uint32_t e = sel[i * K + k], r = off[e] + fill[e]++;
            row_tok[r] = i;
            row_w[r] = selw[i * K + k];
            tok_rows[i * K + k] = r;
        }
    /* rows of floats and Q8_K blocks stay 4-aligned, Q8_0 blocks only 2-aligned */
    const uint64_t act_stride =
        mvm_k_act_bytes(f.gate_up, n_embd) + (mvm_k_is_q(f.gate_up) ? 2 : 4);
    std::vector<float> xin;
    std::vector<uint8_t> act = activations(f.gate_up, n_tok, n_embd, act_stride, xin);
    std::vector<float> x0 = randoms(n_tok * n_embd), want = x0;
    for (uint32_t i = 0; i < n_tok; i++)
        for (uint32_t k = 0; k < K; k++) {
            const uint32_t e = sel[i * K + k];
            mvm_k_expert_ffn(f, experts.data() + e * stride, n_embd,
                             act.data() + i * act_stride, selw[i * K + k],
                             want.data() + i * n_embd, 0, G);
            for (uint32_t j = 0; oai && j < n_embd; j++)
                want[i * n_embd + j] += selw[i * K + k] * down_bias[e * n_embd + j];
        }
    const uint64_t h_stride = mvm_k_act_bytes(f.down, n_ff) + 8;
    const size_t rows = n_tok * K;
    /* a decode step (one token: an expert's one row) also through up1 and down1, as the
     * engine runs it (mvm_gpu_experts), with the same data */
    /* and, for mmq's types (Q8_0, IQ4_NL, MXFP4; Q2_K to Q6_K, IQ4_XS) of several rows,
     * through the tensor cores' mmq kernels */
    void (*mmq_up)(mvm_g_expert_args) = mmq_up_fn(f.gate_up);
    void (*mmq_down)(mvm_g_expert_args) = mmq_down_fn(f.down);
    const bool mmq_ok = mmq_up && mmq_down &&
                        mvm_k_is_k(f.gate_up) == mvm_k_is_k(f.down) && n_tok > 1;
    /* device-view's per-launch addresses (wptr): each active expert read from a copy
     * elsewhere, the experts' own place poisoned, must give the same rows; for mmq's types
     * the copies 4-byte aligned, not 16 (gpt-oss's float biases need 4), so that mmq's word
     * loads of weights that its 16-byte loads cannot take are checked too */
    const size_t shift = mmq_ok ? 4 : 0;
    std::vector<uint8_t> moved(experts.size() + shift), poisoned(experts.size(), 0x7F);
    std::copy(experts.begin(), experts.end(), moved.begin() + shift);
    std::vector<uint64_t> wptr(active.size());
    for (size_t i = 0; i < active.size(); i++)
        wptr[i] = (uint64_t)(uintptr_t)(moved.data() + shift + active[i] * stride);
    /* via 2, a decode step read-through (up1 and down1 with wstore): each active expert but
     * the first read in place (wptr) and stored as read into a slab of its own, poisoned
     * before, which must then hold the whole expert; the first's stays as it was */
    std::vector<uint8_t> slabs(active.size() * stride, 0x5A);
    std::vector<uint64_t> wstore(active.size());
    for (size_t i = 1; i < active.size(); i++)
        wstore[i] = (uint64_t)(uintptr_t)(slabs.data() + i * stride);
    /* (several rows read through wptr: the tiled and mmq kernels' addressing is the same
     * for every type, so only where mmq runs too, for the suite's time; and the tiled
     * kernels' only below mmq's tile of 64 rows, where it is the same code on fewer rows:
     * Q4_K_M's 70-row case took 17 s under ASan, most of it in the tiled kernels) */
    const bool tiled_wptr = mmq_ok && n_tok < 64;
    for (uint32_t via = 0; via <= 1 + (n_tok == 1); via++)
    for (uint32_t mmq = via == 1 && n_tok > 1 && !tiled_wptr;
         mmq <= (mmq_ok && via < 2) && (via != 1 || n_tok == 1 || mmq_ok); mmq++)
    for (uint32_t one_row = via == 2; one_row <= (n_tok == 1); one_row++) {
        std::vector<uint8_t> h(rows * h_stride, 0xFF);
        std::vector<float> out(rows * n_embd, POISON);
        std::vector<float> hf(rows * n_ff, POISON);
        std::vector<float> x = x0;
        mvm_g_expert_args a = {dp(via ? poisoned.data() : experts.data()), dp(act.data()),
                               dp(active.data()), dp(off.data()), dp(cnt.data()),
                               dp(row_tok.data()), dp(row_w.data()), dp(h.data()),
                               dp(out.data()), oai ? dp(down_bias.data()) : 0, dp(hf.data()),
                               via ? dp(wptr.data()) : 0, via == 2 ? dp(wstore.data()) : 0,
                               stride, act_stride, h_stride, n_embd, G, (uint32_t)active.size(),
                               f.gate_up, f.down, f.glu, one_row, mmq};
        if (mmq) {
            launch(mmq_up, a, mvm_g_expert_mmq_up_shape(&a));
            if (mvm_k_is_k(f.down))
                launch(mvm_g_expert_quantize, a, mvm_g_expert_quantize_shape(&a));
            launch(mmq_down, a, mvm_g_expert_mmq_down_shape(&a));
        } else {
            if (one_row) /* read-through (via 2) by the _keep twins, as the engine does */
                launch((via == 2 ? up1_keep_fn : up1_fn)[f.gate_up], a,
                       mvm_g_expert_up1_shape(&a));
            else
                launch(up_fn[f.gate_up], a, mvm_g_expert_up_shape(&a));
            if (mvm_k_is_k(f.down) || (one_row && mvm_k_block_elems(f.down) > 1))
                launch(mvm_g_expert_quantize, a, mvm_g_expert_quantize_shape(&a));
            if (one_row)
                launch((via == 2 ? down1_keep_fn : down1_fn)[f.down], a,
                       via == 2 ? mvm_g_expert_down1_keep_shape(&a)
                                : mvm_g_expert_down1_shape(&a));
            else
                launch(down_fn[f.down], a, mvm_g_expert_down_shape(&a));
        }
        mvm_g_expert_sum_args s = {dp(x.data()), dp(out.data()), dp(tok_rows.data()), n_embd, n_tok,
                                   K, 0};
        launch(mvm_g_expert_sum, s, mvm_g_expert_sum_shape(&s));
        /* compare the experts' contributions, not x: x0 would hide a small one */
        std::vector<float> dg(x.size()), dw(x.size());
        for (size_t i = 0; i < x.size(); i++)
            dg[i] = x[i] - x0[i], dw[i] = want[i] - x0[i];
        double e = rel_err(dg.data(), dw.data(), dg.size());
        bool gaps = true;
        for (size_t r = 0; r < rows; r++)
            for (uint64_t b = h_stride - 8; b < h_stride; b++)
                gaps = gaps && h[r * h_stride + b] == 0xFF;
        if (e >= 1e-4)
            fprintf(stderr, "experts %s/%s%s n_embd %u n_ff %u n_tok %u%s%s%s: relative error "
                    "%g\n", mvm_k_wtype_name(f.gate_up), mvm_k_wtype_name(f.down),
                    oai ? " oai" : "", n_embd, n_ff, n_tok, one_row ? " (up1, down1)" : "",
                    via == 2 ? " (read-through)" : via ? " (wptr)" : "", mmq ? " (mmq)" : "",
                    e);
        CHECK(e < 1e-4);
        CHECK(gaps);
        bool kept = true;
        for (size_t i = 0; via == 2 && i < active.size(); i++)
            kept = kept && (i ? memcmp(slabs.data() + i * stride,
                                       experts.data() + active[i] * stride, expert_bytes) == 0
                              : slabs[0] == 0x5A && slabs[stride - 1] == 0x5A);
        for (size_t i = 1; via == 2 && i < active.size(); i++) /* nothing past the expert */
            kept = kept && slabs[i * stride + expert_bytes] == 0x5A;
        if (!kept)
            fprintf(stderr, "experts %s/%s%s n_embd %u n_ff %u: read-through's slabs differ\n",
                    mvm_k_wtype_name(f.gate_up), mvm_k_wtype_name(f.down), oai ? " oai" : "",
                    n_embd, n_ff);
        CHECK(kept);
    }
}

static void test_experts(void)
{
    for (int i = 0; i < MVM_W_COUNT; i++) {
        const enum mvm_wtype t = (enum mvm_wtype)i;
        if (mvm_k_is_k(t)) {
            /* two 256-channel groups, a tile and a partial one */
            experts_case(mvm_k_expert_uniform(t), 256, 512, 9);
            experts_case(mvm_k_expert_uniform(t), 256, 256, 1); /* decode */
        } else {
            /* 160 outputs: two blocks of down threads, one partial */
            experts_case(mvm_k_expert_uniform(t), 160, 96, 11);
            experts_case(mvm_k_expert_uniform(t), 64, 64, 1); /* decode */
        }
    }
    /* down of another type, as llama.cpp's K-quant files have it: Q4_K_M's Q6_K down, and
     * the fallbacks where the expert's channels are not whole super-blocks (Qwen2-MoE) */
#define MIX(g, d) {MVM_W_##g, MVM_W_##d, MVM_GLU_SILU, 0}
    static const mvm_k_expert_fmt mixed[] = {MIX(Q4_K, Q6_K), MIX(Q4_K, Q5_0), MIX(Q4_K, Q8_0),
                                             MIX(Q5_K, Q5_1), MIX(Q3_K, IQ4_NL), MIX(F16, Q4_K)};
#undef MIX
    for (const mvm_k_expert_fmt &f : mixed) {
        const int two_groups = f.down == MVM_W_Q6_K; /* and a tile and a partial one */
        experts_case(f, 256, two_groups ? 512 : mvm_k_is_k(f.down) ? 256 : 96,
                     two_groups ? 9 : 3);
    }
    /* the mmq kernels: an expert of more rows than their tile of 64 (two tiles, the second
     * partial), K in stages of four blocks and a partial one (n_embd 288: nine), and gpt-oss's
     * unit and biases on Q8_0 experts */
    experts_case(mvm_k_expert_uniform(MVM_W_Q8_0), 288, 64, 70);
    experts_case({MVM_W_Q8_0, MVM_W_Q8_0, MVM_GLU_OAI, 0}, 160, 96, 11);
    /* and Q4_K_M's: two super-blocks of K each way, two tiles of rows; Q5_K_M's (Q5_K
     * gate/up, Q6_K down), Q5_K's and Q6_K's through all three K types of gate/up and down */
    experts_case(mixed[0], 512, 512, 70);
    experts_case({MVM_W_Q5_K, MVM_W_Q6_K, MVM_GLU_SILU, 0}, 512, 512, 70);
    experts_case({MVM_W_Q6_K, MVM_W_Q5_K, MVM_GLU_SILU, 0}, 256, 512, 11);
    experts_case(mvm_k_expert_uniform(MVM_W_Q5_K), 512, 256, 11);
    /* Q3_K_M's (Q3_K gate/up over a Q4_K or Q5_K down), and Q3_K's down */
    experts_case({MVM_W_Q3_K, MVM_W_Q4_K, MVM_GLU_SILU, 0}, 512, 512, 70);
    experts_case({MVM_W_Q3_K, MVM_W_Q5_K, MVM_GLU_SILU, 0}, 256, 256, 11);
    experts_case(mvm_k_expert_uniform(MVM_W_Q3_K), 256, 512, 11);
    /* Q2_K's (Q2_K gate/up over a Q3_K down, as llama-quantize's Q2_K mix has them), and
     * Q2_K's down: a scale and a min per 16 */
    experts_case({MVM_W_Q2_K, MVM_W_Q3_K, MVM_GLU_SILU, 0}, 512, 512, 70);
    experts_case(mvm_k_expert_uniform(MVM_W_Q2_K), 256, 512, 11);
    /* IQ4_XS's (its files' experts; a Q6_K down beside) */
    experts_case(mvm_k_expert_uniform(MVM_W_IQ4_XS), 512, 512, 70);
    experts_case({MVM_W_IQ4_XS, MVM_W_Q6_K, MVM_GLU_SILU, 0}, 256, 256, 11);
    /* the table types (IQ4_NL, MXFP4: gpt-oss's experts, whose 17-byte blocks leave their
     * nibbles byte-aligned), a partial stage of K (nine blocks) and two tiles of rows */
    experts_case(mvm_k_expert_uniform(MVM_W_MXFP4), 288, 64, 70);
    experts_case(mvm_k_expert_uniform(MVM_W_IQ4_NL), 288, 96, 70);
    experts_case({MVM_W_MXFP4, MVM_W_Q8_0, MVM_GLU_SILU, 0}, 160, 64, 11);
    /* decode: up1's long rows, its two rows' rounds past the unrolled four (device.cuh,
     * row_dot_tile) */
    experts_case(mvm_k_expert_uniform(MVM_W_Q8_0), 2400, 64, 1);
    experts_case(mixed[0], 4352, 512, 1); /* Q4_K, a Q6_K down */
    /* read-through's down1_keep: a last block of fewer outputs than its 16 warps */
    experts_case(mvm_k_expert_uniform(MVM_W_F32), 40, 64, 1);
    /* gpt-oss's unit and biases: its MXFP4 experts, floats, and 256-channel groups */
    static const mvm_k_expert_fmt oai[] = {{MVM_W_MXFP4, MVM_W_MXFP4, MVM_GLU_OAI, 0},
                                           {MVM_W_F32, MVM_W_F32, MVM_GLU_OAI, 0},
                                           {MVM_W_Q4_K, MVM_W_Q6_K, MVM_GLU_OAI, 0}};
    for (const mvm_k_expert_fmt &f : oai) {
        const int k = mvm_k_is_k(f.down);
        experts_case(f, k ? 256 : 160, k ? 512 : 96, 11);
        experts_case(f, k ? 256 : 64, k ? 256 : 64, 1); /* decode */
    }
}

/* Rows of n floats, x_stride xs and out_stride os apart; the kernel's threads take 8
 * rounds of 128 floats at once, so 300 is one partial round and 2100 two whole and a
 * partial one. */
static void rmsnorm_case(uint32_t n, uint64_t xs, uint64_t os)
{
    const uint32_t rows = 3;
    std::vector<float> x = randoms(rows * xs, 2.0f), w = randoms(n);
    for (int with_w = 0; with_w < 2; with_w++) {
        std::vector<float> out(rows * os, POISON), want(rows * os, POISON);
        for (uint32_t r = 0; r < rows; r++)
            mvm_k_rmsnorm(&want[r * os], &x[r * xs], with_w ? w.data() : NULL, n, 1e-5f);
        mvm_g_rmsnorm_args a = {.x = dp(x.data()), .out = dp(out.data()),
                                .w = with_w ? dp(w.data()) : 0, .q = 0, .out2 = 0, .x2 = 0,
                                .w2 = 0, .sum_out = 0, .sum_rows = 0, .x_stride = xs,
                                .out_stride = os, .q_stride = 0,
                                .n = n, .n_rows = rows, .q_type = 0, .n_rows2 = 0,
                                .eps = 1e-5f, .sum_k = 0};
        launch(mvm_g_rmsnorm, a, mvm_g_rmsnorm_shape(&a));
        for (uint32_t r = 0; r < rows; r++) {
            CHECK(rel_err(&out[r * os], &want[r * os], n) < 1e-6);
            CHECK(poisoned(&out[r * os + n], os - n));
        }
    }
    /* in place */
    std::vector<float> y = x, want = x;
    for (uint32_t r = 0; r < rows; r++)
        mvm_k_rmsnorm(&want[r * xs], &want[r * xs], w.data(), n, 1e-6f);
    /* in place, with a second tensor of 5 rows and its own weights in the same launch (a
     * layer's query and key heads) */
    const uint32_t rows2 = 5;
    std::vector<float> y2 = randoms(rows2 * xs, 3.0f), want2 = y2, w2 = randoms(n);
    for (uint32_t r = 0; r < rows2; r++)
        mvm_k_rmsnorm(&want2[r * xs], &want2[r * xs], w2.data(), n, 1e-6f);
    mvm_g_rmsnorm_args a = {.x = dp(y.data()), .out = dp(y.data()), .w = dp(w.data()),
                            .q = 0, .out2 = 0, .x2 = dp(y2.data()), .w2 = dp(w2.data()),
                            .sum_out = 0, .sum_rows = 0,
                            .x_stride = xs, .out_stride = xs, .q_stride = 0, .n = n,
                            .n_rows = rows, .q_type = 0, .n_rows2 = rows2, .eps = 1e-6f,
                            .sum_k = 0};
    launch(mvm_g_rmsnorm, a, mvm_g_rmsnorm_shape(&a));
    CHECK(rel_err(y.data(), want.data(), y.size()) < 1e-6);
    CHECK(rel_err(y2.data(), want2.data(), y2.size()) < 1e-6);
}

static void test_rmsnorm(void)
{
    rmsnorm_case(300, 310, 305);
    rmsnorm_case(2100, 2110, 2105);
}

/* The norm's rows also quantized in its pass, for a Q type's product (Q8_0 blocks) and a
 * K type's (Q8_K): the bytes mvm_g_quantize writes from the same floats (the CPU's rounding),
 * the gaps between rows untouched; and copied to a second place, the same floats. 1280 floats: 40 Q8_0 blocks, 5 Q8_K blocks a row, more
 * than a block's threads or warps take in one round. */
/* The norm taking the routed experts' rows first (sum_out): x after it is what
 * mvm_g_expert_sum leaves, and its output what the norm makes of that, to the bit; and the
 * CPU's norm of the CPU's sum, near. 3 tokens of top-K rows among 12: top-4 in rows of
 * 300 floats (more than the block has threads, fewer than a round of its columns), top-10
 * (two rounds of experts) in rows of 1100 (three rounds of columns, the last partial). */
static void rmsnorm_sum_case(uint32_t K, uint32_t n)
{
    const uint32_t n_tok = 3, n_rows = 12;
    const std::vector<float> x = randoms(n_tok * n, 2.0f), rows = randoms(n_rows * n, 2.0f);
    const std::vector<float> w = randoms(n);
    std::vector<uint32_t> tok_rows(n_tok * K);
    for (uint32_t i = 0; i < n_tok * K; i++)
        tok_rows[i] = (i * 7 + 3) % n_rows;
    std::vector<float> x1 = x, out1(n_tok * n, POISON), x2 = x, out2(n_tok * n, POISON);
    mvm_g_expert_sum_args s = {dp(x1.data()), dp(rows.data()), dp(tok_rows.data()), n, n_tok, K,
                               0};
    launch(mvm_g_expert_sum, s, mvm_g_expert_sum_shape(&s));
    mvm_g_rmsnorm_args a = {.x = dp(x1.data()), .out = dp(out1.data()), .w = dp(w.data()),
                            .q = 0, .out2 = 0, .x2 = 0, .w2 = 0, .sum_out = 0, .sum_rows = 0,
                            .x_stride = n, .out_stride = n, .q_stride = 0, .n = n,
                            .n_rows = n_tok, .q_type = 0, .n_rows2 = 0, .eps = 1e-5f,
                            .sum_k = 0};
    launch(mvm_g_rmsnorm, a, mvm_g_rmsnorm_shape(&a));
    a.x = dp(x2.data()), a.out = dp(out2.data());
    a.sum_out = dp(rows.data()), a.sum_rows = dp(tok_rows.data()), a.sum_k = K;
    launch(mvm_g_rmsnorm, a, mvm_g_rmsnorm_shape(&a));
    CHECK(x2 == x1 && out2 == out1);
    std::vector<float> want = x, normed(n_tok * n);
    for (uint32_t i = 0; i < n_tok; i++) {
        for (uint32_t j = 0; j < n; j++) {
            float sum = 0;
            for (uint32_t k = 0; k < K; k++)
                sum += rows[tok_rows[i * K + k] * n + j];
            want[i * n + j] += sum;
        }
        mvm_k_rmsnorm(&normed[i * n], &want[i * n], w.data(), n, 1e-5f);
    }
    CHECK(rel_err(x2.data(), want.data(), want.size()) < 1e-6);
    CHECK(rel_err(out2.data(), normed.data(), normed.size()) < 1e-6);
}

static void test_rmsnorm_sum(void)
{
    rmsnorm_sum_case(4, 300);
    rmsnorm_sum_case(10, 1100);
}

static void test_rmsnorm_quantize(void)
{
    const uint32_t n = 1280, rows = 3;
    const uint64_t xs = n + 7;
    std::vector<float> x = randoms(rows * xs, 2.0f), w = randoms(n);
    for (enum mvm_wtype t : {MVM_W_Q8_0, MVM_W_Q4_0, MVM_W_Q4_K, MVM_W_Q6_K}) {
        const uint64_t qs = mvm_k_act_bytes(t, n) + 12;
        std::vector<float> out(rows * xs, POISON), out2(rows * xs, POISON);
        std::vector<uint8_t> q(rows * qs, 0xEE), want(rows * qs, 0xEE);
        mvm_g_rmsnorm_args a = {.x = dp(x.data()), .out = dp(out.data()), .w = dp(w.data()),
                                .q = dp(q.data()), .out2 = dp(out2.data()), .x2 = 0, .w2 = 0,
                                .sum_out = 0, .sum_rows = 0,
                                .x_stride = xs, .out_stride = xs, .q_stride = qs, .n = n,
                                .n_rows = rows, .q_type = t, .n_rows2 = 0, .eps = 1e-5f,
                                .sum_k = 0};
        launch(mvm_g_rmsnorm, a, mvm_g_rmsnorm_shape(&a));
        for (uint32_t r = 0; r < rows; r++) {
            mvm_k_prepare_act(t, &out[r * xs], &want[r * qs], n);
            CHECK(memcmp(&out2[r * xs], &out[r * xs], n * sizeof(float)) == 0);
            CHECK(poisoned(&out2[r * xs + n], xs - n));
        }
        CHECK(q == want);
    }
}

/* Alone, and with a second tensor of other heads, head size and stride in the same launch
 * (a layer's queries and keys: 40 and 5 heads of 16, or MLA's 1 of n_rot beside them). */
static void test_rope(void)
{
    const uint32_t n_tok = 3, heads = 40, hd = 16, pos0 = 7, heads2 = 5;
    const uint64_t stride = heads * hd + 4;
    for (int yarn = 0; yarn < 2; yarn++)
        for (uint32_t neox = 0; neox < 2; neox++)
            for (uint32_t n_rot : {12u, 16u}) /* 40 heads x 6 pairs: more than 128 threads */
                for (uint32_t hd2 : {0u, 16u, n_rot}) { /* 0: no second tensor */
                    mvm_rope r = {n_rot, neox, 10000.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f};
                    if (yarn)
                        mvm_k_rope_yarn(&r, 4.0f, 4096, 32.0f, 1.0f, 1.0f, 1.0f);
                    const uint32_t h2 = hd2 ? heads2 : 0;
                    const uint64_t stride2 = h2 * hd2 + 3;
                    std::vector<float> x = randoms(n_tok * stride), want = x;
                    std::vector<float> x2 = randoms(n_tok * stride2 + 1), want2 = x2;
                    for (uint32_t i = 0; i < n_tok; i++) {
                        mvm_k_rope(&want[i * stride], heads, hd, pos0 + i, &r);
                        if (h2)
                            mvm_k_rope(&want2[i * stride2], h2, hd2, pos0 + i, &r);
                    }
                    std::vector<float> xd = x, x2d = x2; /* for the position on the device */
                    mvm_g_rope_args a = {dp(x.data()), h2 ? dp(x2.data()) : 0, stride, stride2,
                                         n_tok, heads, hd, h2, hd2, pos0, r, 0};
                    launch(mvm_g_rope, a, mvm_g_rope_shape(&a));
                    CHECK(rel_err(x.data(), want.data(), x.size()) < 1e-6);
                    CHECK(rel_err(x2.data(), want2.data(), x2.size()) < 1e-6);
                    /* the position read from the device (a decode graph's), pos0 ignored */
                    const uint32_t on_device = pos0;
                    a.x = dp(xd.data()), a.x2 = h2 ? dp(x2d.data()) : 0;
                    a.pos0 = 12345, a.pos = dp(&on_device);
                    launch(mvm_g_rope, a, mvm_g_rope_shape(&a));
                    CHECK(xd == x && x2d == x2);
                }
}

/* mvm_g_qk_rope against the kernels it stands for, one after the other (the QK norm by
 * mvm_g_rmsnorm as the engine launches it, mvm_g_rope, mvm_g_store_rows): the same query
 * floats and cache bytes to the bit; and its queries against the CPU's norm and rotation
 * (kernels/cpu). Each norm, both pair layouts, a partial rotation, grouped heads (rows of
 * more than a block's threads too), both cache types, the position given and on the
 * device; the cache's other rows untouched. */
static void qk_rope_case(uint32_t norm, uint32_t nh, uint32_t nkv, uint32_t neox, uint32_t n_rot,
                         enum mvm_wtype t, int on_dev, uint32_t hd = 16)
{
    const uint32_t n_tok = 3, pos0 = 5, n_ctx = 12, q_dim = nh * hd, kv_dim = nkv * hd;
    const size_t row_bytes = mvm_k_row_bytes(t, kv_dim);
    const float eps = 1e-5f;
    const mvm_rope r = {n_rot, neox, 10000.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f};
    const int rows = norm == MVM_G_QK_NORM_ROWS;
    const std::vector<float> q = randoms(n_tok * q_dim, 3.0f), k = randoms(n_tok * kv_dim, 3.0f),
                             v = randoms(n_tok * kv_dim, 3.0f);
    const std::vector<float> qn = randoms(rows ? q_dim : hd), kn = randoms(rows ? kv_dim : hd);
    const uint32_t on_device = pos0;
    const mvm_dptr pos = on_dev ? dp(&on_device) : 0;
    const size_t first = on_dev ? 0 : (size_t)pos0 * row_bytes; /* where the rows go */
    /* one after the other */
    std::vector<float> q1 = q, k1 = k;
    if (norm == MVM_G_QK_NORM_HEAD) {
        mvm_g_rmsnorm_args a = {.x = dp(q1.data()), .out = dp(q1.data()), .w = dp(qn.data()),
                                .q = 0, .out2 = 0, .x2 = dp(k1.data()), .w2 = dp(kn.data()),
                                .sum_out = 0, .sum_rows = 0,
                                .x_stride = hd, .out_stride = hd, .q_stride = 0, .n = hd,
                                .n_rows = n_tok * nh, .q_type = 0, .n_rows2 = n_tok * nkv,
                                .eps = eps, .sum_k = 0};
        launch(mvm_g_rmsnorm, a, mvm_g_rmsnorm_shape(&a));
    }
    for (int key = 0; rows && key < 2; key++) { /* q and k as wide or not: two launches */
        std::vector<float> &x = key ? k1 : q1;
        const uint32_t n = key ? kv_dim : q_dim;
        mvm_g_rmsnorm_args a = {.x = dp(x.data()), .out = dp(x.data()),
                                .w = dp((key ? kn : qn).data()), .q = 0, .out2 = 0, .x2 = 0,
                                .w2 = 0, .sum_out = 0, .sum_rows = 0, .x_stride = n,
                                .out_stride = n, .q_stride = 0, .n = n, .n_rows = n_tok,
                                .q_type = 0, .n_rows2 = 0, .eps = eps, .sum_k = 0};
        launch(mvm_g_rmsnorm, a, mvm_g_rmsnorm_shape(&a));
    }
    mvm_g_rope_args ra = {dp(q1.data()), dp(k1.data()), q_dim, kv_dim, n_tok, nh, hd, nkv, hd,
                          on_dev ? 0 : pos0, r, pos};
    launch(mvm_g_rope, ra, mvm_g_rope_shape(&ra));
    std::vector<uint8_t> kc1(n_ctx * row_bytes, 0xA5), vc1 = kc1, kc2 = kc1, vc2 = kc1;
    mvm_g_store_rows_args sa = {dp(kc1.data() + first), dp(k1.data()), dp(vc1.data() + first),
                                dp(v.data()), kv_dim, kv_dim, kv_dim, n_tok, t, 0, pos};
    launch(mvm_g_store_rows, sa, mvm_g_store_rows_shape(&sa));
    /* in one launch, the queries from a copy of their own (q_in), into a poisoned q */
    std::vector<float> qin = q, k2 = k, q2(q.size(), NAN);
    mvm_g_qk_rope_args a = {.q_in = dp(qin.data()), .q = dp(q2.data()), .k = dp(k2.data()),
                            .v = dp(v.data()),
                            .q_norm = norm ? dp(qn.data()) : 0,
                            .k_norm = norm ? dp(kn.data()) : 0, .kc = dp(kc2.data() + first),
                            .vc = dp(vc2.data() + first), .pos = pos, .q_stride = q_dim,
                            .kv_stride = kv_dim, .cache_stride = kv_dim, .n_tok = n_tok,
                            .n_head = nh, .n_head_kv = nkv, .head_dim = hd, .norm = norm,
                            .kv_type = t, .pos0 = on_dev ? 12345 : pos0,
                            .eps = eps, .rope = r};
    launch(mvm_g_qk_rope, a, mvm_g_qk_rope_shape(&a));
    CHECK(q2 == q1 && kc2 == kc1 && vc2 == vc1 && qin == q && k2 == k);
    /* the rows as the CPU's cache stores those floats, the rows around them untouched */
    std::vector<uint8_t> kw(n_ctx * row_bytes, 0xA5), vw = kw;
    mvm_k_quantize(t, k1.data(), &kw[pos0 * row_bytes], (size_t)n_tok * kv_dim);
    mvm_k_quantize(t, v.data(), &vw[pos0 * row_bytes], (size_t)n_tok * kv_dim);
    CHECK(kc1 == kw && vc1 == vw);
    /* the CPU's */
    std::vector<float> want = q;
    for (uint32_t i = 0; i < n_tok; i++) {
        float *x = &want[i * q_dim];
        for (uint32_t h = 0; norm && h < (rows ? 1 : nh); h++)
            mvm_k_rmsnorm(x + h * hd, x + h * hd, qn.data(), rows ? q_dim : hd, eps);
        mvm_k_rope(x, nh, hd, pos0 + i, &r);
    }
    CHECK(rel_err(q2.data(), want.data(), want.size()) < 1e-6);
}

static void test_qk_rope(void)
{
    for (uint32_t norm : {MVM_G_QK_NORM_NONE, MVM_G_QK_NORM_HEAD, MVM_G_QK_NORM_ROWS})
        for (uint32_t heads : {4u, 40u}) /* 40 x 16: a row of more floats than threads */
            for (uint32_t neox = 0; neox < 2; neox++)
                for (uint32_t n_rot : {12u, 16u})
                    for (enum mvm_wtype t : {MVM_W_F16, MVM_W_F32, MVM_W_Q8_0})
                        for (int on_dev = 0; on_dev < 2; on_dev++) /* Q8_0: whole blocks */
                            qk_rope_case(norm, heads, heads / 2, neox, n_rot, t, on_dev,
                                         t == MVM_W_Q8_0 ? 32 : 16);
}

/* The cache's n floats as elements of type kv (F16: rounded as the engine stores them; Q8_0:
 * quantized so). */
static std::vector<uint8_t> cache_of(const std::vector<float> &x, enum mvm_wtype kv)
{
    std::vector<uint8_t> c(mvm_k_row_bytes(kv, x.size()));
    mvm_k_quantize(kv, x.data(), c.data(), x.size());
    return c;
}

/* The heads of an attention case: query heads, kv heads, head dimension. */
struct attn_heads {
    uint32_t nh, nkv, hd;
};

/* Against mvm_k_attn_heads per (query, head), over the window's positions of a full cache;
 * with sinks (gpt-oss), head h's logit sinks[h], large enough to take a good part of the
 * mass. With a ring (engine/forward/kv_cache.h: window + n_tok rows, each position written to two,
 * in order, so that later positions overwrite earlier ones) the kernel reads that instead.
 * The cache's elements are F32, F16 or Q8_0 (then the same output, bit for bit, as over an
 * F32 cache of the blocks' values: the block reader's words and shifts). The split parts are poisoned and sized by
 * mvm_g_attention_part_bytes for this batch; the combine runs where there are several
 * splits, as mvm_gpu_attention does. With latent, the key rows are the values too; with
 * latent or mma, mvm_g_attention_mma computes the splits. Returns the launch's split count. */
static uint32_t attention_case(uint32_t n_tok, uint32_t pos0, uint32_t n_ctx, uint32_t window = 0,
                               bool with_sinks = false, bool ring = false,
                               enum mvm_wtype kv = MVM_W_F32, attn_heads H = {4, 2, 16},
                               bool latent = false, bool mma = false)
{
    mma |= latent;
    const uint32_t nh = H.nh, nkv = H.nkv, hd = H.hd, q_dim = nh * hd, kv_dim = nkv * hd;
    const uint32_t R = ring ? window + n_tok : 0;
    const float scale = 1.0f / sqrtf((float)hd);
    std::vector<float> q = randoms(n_tok * q_dim, 2.0f), sinks = randoms(nh, 3.0f);
    std::vector<uint8_t> kc = cache_of(randoms(n_ctx * kv_dim, 2.0f), kv),
                         vc = latent ? kc : cache_of(randoms(n_ctx * kv_dim), kv);
    std::vector<float> out(n_tok * q_dim, POISON), want(n_tok * q_dim), scratch(n_ctx);
    std::vector<uint8_t> part(mvm_g_attention_part_bytes(n_tok, nh, nkv, hd), 0xFF);
    for (uint32_t i = 0; i < n_tok; i++)
        for (uint32_t h = 0; h < nh; h++) {
            const uint32_t n_pos = pos0 + i + 1;
            const uint32_t first = window && n_pos > window ? n_pos - window : 0;
            const size_t kvo = mvm_k_row_bytes(kv, first * kv_dim + (h / (nh / nkv)) * hd);
            mvm_k_attn_heads(&q[i * q_dim + h * hd], 1, kv, &kc[kvo], &vc[kvo], kv_dim,
                             n_pos - first, hd, scale, with_sinks ? &sinks[h] : NULL,
                             scratch.data(), &want[i * q_dim + h * hd]);
        }
    const size_t row = mvm_k_row_bytes(kv, kv_dim);
    std::vector<uint8_t> rk(2 * R * row, 0xFF), rv(2 * R * row, 0xFF); /* NaN: poisoned */
    for (uint32_t p = 0; p < pos0 + n_tok; p++)
        for (uint32_t copy = 0; ring && copy < 2; copy++) {
            const uint32_t r = p % R + copy * R;
            std::copy_n(&kc[p * row], row, &rk[r * row]);
            std::copy_n(&vc[p * row], row, &rv[r * row]);
        }
    mvm_g_attention_args a = {dp(q.data()), dp(ring ? rk.data() : kc.data()),
                              dp(ring ? rv.data() : latent ? kc.data() : vc.data()),
                              dp(out.data()),
                              dp(part.data()), with_sinks ? dp(sinks.data()) : 0, n_tok,
                              pos0, nh, nkv, hd, n_ctx, window, R, kv, scale, 0, 0, 0, 0, 0};
    a.mma = mma; /* its own splits */
    const uint32_t splits = mvm_g_attention_splits(&a);
    CHECK(!mma || mvm_g_attention_mma_takes(&a));
    auto run = [&](const mvm_g_attention_args &x) {
        if (mma)
            launch(mvm_g_attention_mma, x, mvm_g_attention_mma_shape(&a));
        else
            launch(mvm_g_attention, x, mvm_g_attention_shape(&a));
    };
    run(a);
    if (splits > 1)
        launch(mvm_g_attention_combine, a, mvm_g_attention_combine_shape(&a));
    /* the position read from the device, as mvm_gpu_attention launches it: pos0 0 in the
     * arguments, the shape of the real one; the same floats */
    std::vector<float> out_d(out.size(), POISON);
    std::fill(part.begin(), part.end(), 0xFF);
    mvm_g_attention_args d = a;
    d.out = dp(out_d.data()), d.pos0 = 0, d.pos = dp(&pos0);
    run(d);
    if (splits > 1)
        launch(mvm_g_attention_combine, d, mvm_g_attention_combine_shape(&a));
    CHECK(memcmp(out_d.data(), out.data(), out.size() * sizeof(float)) == 0);
    if (kv == MVM_W_Q8_0 && !ring) {
        std::vector<float> kf(n_ctx * kv_dim), vf(kf.size()), out_f(out.size(), POISON);
        mvm_k_dequantize(kv, kc.data(), kf.data(), kf.size());
        mvm_k_dequantize(kv, latent ? kc.data() : vc.data(), vf.data(), vf.size());
        std::fill(part.begin(), part.end(), 0xFF);
        mvm_g_attention_args f = a;
        f.kc = dp(kf.data()), f.vc = dp(latent ? kf.data() : vf.data());
        f.out = dp(out_f.data()), f.kv_type = MVM_W_F32;
        run(f);
        if (splits > 1)
            launch(mvm_g_attention_combine, f, mvm_g_attention_combine_shape(&a));
        CHECK(memcmp(out_f.data(), out.data(), out.size() * sizeof(float)) == 0);
    }
    if (hd % MVM_QBLOCK == 0) { /* the output also quantized for a Q type's product: the
                                   CPU's bytes of the same floats, rows act_stride apart */
        const size_t qb = mvm_k_act_bytes(MVM_W_Q4_0, q_dim), as = qb + 6;
        std::vector<uint8_t> act(n_tok * as, 0xEE), want_act(n_tok * as, 0xEE);
        for (uint32_t i = 0; i < n_tok; i++)
            mvm_k_prepare_act(MVM_W_Q4_0, &out[i * q_dim], &want_act[i * as], q_dim);
        std::fill(part.begin(), part.end(), 0xFF);
        d.act = dp(act.data()), d.act_stride = as, d.act_type = MVM_W_Q4_0;
        run(d);
        if (splits > 1)
            launch(mvm_g_attention_combine, d, mvm_g_attention_combine_shape(&a));
        CHECK(act == want_act);
    }
    double e = rel_err(out.data(), want.data(), out.size());
    if (e >= 1e-5)
        fprintf(stderr, "attention%s n_tok %u pos0 %u window %u sinks %d ring %u %s heads %u/%u "
                "x %u, %u splits: relative error %g\n", mma ? " (mma)" : "", n_tok, pos0,
                window, with_sinks, R, mvm_k_wtype_name(kv), nh, nkv, hd, splits, e);
    CHECK(e < 1e-5);
    return splits;
}

static void test_attention(void)
{
    attention_case(3, 5, 12);   /* causal within the batch: later positions are in the cache */
    attention_case(2, 200, 300); /* more positions than threads */
    attention_case(1, 0, 4);    /* the first token sees only itself */
    /* gpt-oss: windows that cut some of the batch's queries and not others, wider than the
     * block's threads, and sinks with and without a window */
    attention_case(6, 2, 12, 5);
    attention_case(3, 250, 300, 200);
    attention_case(4, 7, 16, 0, true);
    attention_case(4, 7, 16, 3, true);
    /* windows in a ring: the batch wrapping it (positions 7..10 of a ring of 9: 7, 8, then
     * 0, 1), within it, a single token, and wider than the block's threads */
    attention_case(4, 7, 64, 5, true, true);
    attention_case(4, 20, 64, 5, false, true);
    attention_case(1, 33, 64, 5, true, true);
    attention_case(3, 461, 600, 150, false, true);
    /* an F16 cache: full, windowed with sinks, a ring */
    attention_case(3, 5, 12, 0, false, false, MVM_W_F16);
    attention_case(2, 200, 300, 0, false, false, MVM_W_F16);
    /* a head of 12 halves: the second kv head's rows are not 16-byte aligned, and the first
     * one's end in 4 halves after its 16-byte load */
    attention_case(2, 20, 30, 0, false, false, MVM_W_F16, {4, 2, 12});
    attention_case(4, 7, 16, 3, true, false, MVM_W_F16);
    attention_case(4, 7, 64, 5, true, true, MVM_W_F16);
    /* The splits: decode over a long context (many splits of several tiles, the last one
     * short), with sinks and a window; a batch whose early queries leave the last splits
     * empty; one split of several tiles (a batch that fills the device alone). */
    CHECK(attention_case(1, 1499, 1500) > 8);
    CHECK(attention_case(1, 1499, 1500, 0, false, false, MVM_W_F32, {64, 32, 16}) > 4);
    CHECK(attention_case(1, 1499, 1500, 700, true, true, MVM_W_F16) > 4);
    CHECK(attention_case(40, 100, 300) > 1);
    CHECK(attention_case(40, 260, 300, 0, false, false, MVM_W_F32, {64, 2, 16}) == 1);
    /* Units: a group wider than a block's heads (10 = 8 + 2), deepseek2's latent rows (16
     * heads over one 576-wide kv head: 8 a block), and a head too wide for 8 in its queries'
     * shared memory (3 heads of 1600 floats: 2 a block) */
    attention_case(2, 300, 302, 0, true, false, MVM_W_F32, {20, 2, 16});
    attention_case(1, 200, 201, 0, false, false, MVM_W_F16, {16, 1, 576});
    attention_case(2, 90, 92, 0, false, false, MVM_W_F32, {3, 1, 1600});
    /* A Q8_0 cache (heads of whole blocks): causal, a window with sinks, a ring; heads of 32
     * (blocks at 4k and 4k + 2 bytes), OLMoE's 128 over splits; groups of 8 */
    attention_case(3, 5, 12, 0, false, false, MVM_W_Q8_0, {4, 2, 32});
    attention_case(4, 7, 16, 3, true, false, MVM_W_Q8_0, {4, 2, 32});
    attention_case(4, 7, 64, 5, true, true, MVM_W_Q8_0, {4, 2, 32});
    attention_case(2, 200, 300, 0, false, false, MVM_W_Q8_0, {16, 2, 64});
    CHECK(attention_case(1, 1499, 1500, 0, false, false, MVM_W_Q8_0, {16, 16, 128}) > 1);
    /* OLMoE's heads, decode in one split and over splits: the output quantized too */
    attention_case(1, 100, 128, 0, false, false, MVM_W_F16, {16, 16, 128});
    CHECK(attention_case(1, 1499, 1500, 0, false, false, MVM_W_F16, {16, 16, 128}) > 1);
}

/* Attention on the tensor cores (mvm_g_attention_mma, the F16 products emulated as the PTX
 * ISA lays out their fragments) against the CPU at the CUDA cores' bound. Latent rows (keys
 * that are the values): one split and a partial tile, many splits, two kv heads of 16-head
 * groups with rows narrower than the widest, deepseek2's 128 heads. Grouped queries (their
 * own value rows): groups of 8, 4, 2 and 1 heads, so 2 to 16 queries of a batch a block,
 * the last block part empty, causal within the batch (an early query masks the positions
 * of the later ones and leaves the last splits empty), in one split and in several, with
 * the output quantized; gpt-oss's sinks; and the cases it must leave to ops.cu's kernel. */
static void test_attention_mma(void)
{
    const enum mvm_wtype f16 = MVM_W_F16;
    CHECK(attention_case(1, 20, 21, 0, false, false, f16, {16, 1, 576}, true) == 1);
    CHECK(attention_case(1, 100, 101, 0, false, false, f16, {16, 1, 576}, true) == 4);
    CHECK(attention_case(1, 599, 600, 0, false, false, f16, {16, 1, 576}, true) > 4);
    CHECK(attention_case(3, 300, 303, 0, false, false, f16, {32, 2, 64}, true) > 1);
    attention_case(2, 45, 47, 0, false, false, f16, {32, 2, 64}, true);
    attention_case(1, 70, 71, 0, false, false, f16, {128, 1, 576}, true);
    CHECK(attention_case(1, 25, 26, 0, false, false, f16, {32, 4, 128}, false, true) == 1);
    CHECK(attention_case(1, 40, 41, 0, false, false, f16, {32, 4, 128}, false, true) == 2);
    CHECK(attention_case(3, 5, 12, 0, false, false, f16, {8, 2, 32}, false, true) == 1);
    CHECK(attention_case(5, 150, 160, 0, false, false, f16, {16, 8, 64}, false, true) > 1);
    CHECK(attention_case(40, 100, 300, 0, false, false, f16, {4, 4, 16}, false, true) > 1);
    attention_case(7, 20, 32, 0, false, false, f16, {32, 4, 256}, false, true);
    /* gpt-oss's blocks without a window: sinks, in one split and in several */
    attention_case(4, 7, 16, 0, true, false, f16, {16, 2, 64}, false, true);
    CHECK(attention_case(1, 1499, 1500, 0, true, false, f16, {64, 8, 64}, false, true) > 1);
    mvm_g_attention_args a = {};
    a.kc = a.vc = 256, a.n_tok = 1, a.pos0 = 9, a.n_head = 32, a.n_head_kv = 2;
    a.head_dim = 64, a.n_ctx = 16, a.kv_type = MVM_W_F16;
    CHECK(mvm_g_attention_mma_takes(&a));
    mvm_g_attention_args b = a;
    b.vc = 512, b.head_dim = 272; /* values of their own, of the widest that both stage */
    CHECK(mvm_g_attention_mma_takes(&b));
    b.head_dim = 288;
    CHECK(!mvm_g_attention_mma_takes(&b));
    b = a, b.kv_type = MVM_W_F32;
    CHECK(!mvm_g_attention_mma_takes(&b));
    b = a, b.kv_type = MVM_W_Q8_0;
    CHECK(!mvm_g_attention_mma_takes(&b));
    b = a, b.n_head_kv = 32 / 3 + 1, b.n_head = 3 * b.n_head_kv; /* groups of 3 heads */
    CHECK(!mvm_g_attention_mma_takes(&b));
    b = a, b.n_head = 48, b.n_head_kv = 2; /* groups of 24 */
    CHECK(!mvm_g_attention_mma_takes(&b));
    b = a, b.head_dim = 600;
    CHECK(!mvm_g_attention_mma_takes(&b));
    b = a, b.head_dim = 72;
    CHECK(!mvm_g_attention_mma_takes(&b));
    b = a, b.kc = b.vc = 264; /* rows not 16-byte aligned */
    CHECK(!mvm_g_attention_mma_takes(&b));
    b = a, b.window = 4;
    CHECK(!mvm_g_attention_mma_takes(&b));
    b = a, b.ring = 20;
    CHECK(!mvm_g_attention_mma_takes(&b));
}

/* The bound of the parts' bytes holds for every batch up to n_batch, whatever the context,
 * in either kernel's splits (the tensor cores' where they take the heads), and the splits
 * fit the combine's shared weights. */
static void test_attention_part_bytes(void)
{
    static const attn_heads shapes[] = {{32, 4, 128}, {128, 1, 576}, {64, 8, 64}, {3, 1, 1600},
                                        {16, 1, 576}, {16, 16, 128}};
    int bad = 0;
    for (const attn_heads &H : shapes)
        for (uint32_t mma = 0; mma < 2; mma++) {
            if (mma && !mvm_g_attention_mma_group_heads(H.nh, H.nkv))
                continue; /* not the tensor cores' */
            for (uint32_t n_batch : {1u, 32u, 512u})
                for (uint32_t n_tok = 1; n_tok <= n_batch; n_tok++)
                    for (uint32_t pos0 : {0u, 100u, 5000u, 131000u}) {
                        mvm_g_attention_args a = {};
                        a.n_tok = n_tok, a.pos0 = pos0, a.n_head = H.nh, a.n_head_kv = H.nkv;
                        a.head_dim = H.hd, a.mma = mma;
                        const uint32_t splits = mvm_g_attention_splits(&a);
                        const uint64_t rows = (uint64_t)n_tok * splits;
                        bad += rows * H.nh * (8 + 4 * (1 + (uint64_t)H.hd)) >
                               mvm_g_attention_part_bytes(n_batch, H.nh, H.nkv, H.hd);
                        bad += splits > MVM_G_ATTN_BLOCKS; /* the combine's weights */
                    }
        }
    CHECK(bad == 0);
    /* deepseek2 at 32 tokens a batch: MBs, not the n_ctx-wide scores' GBs */
    CHECK(mvm_g_attention_part_bytes(32, 128, 1, 576) < (20u << 20));
    CHECK(mvm_g_attention_unit_heads(1, 1, MVM_G_ATTN_QFLOATS + 1) == 0);
    /* the tensor cores' own splits fill the device where ops.cu's leave it idle:
     * DeepSeek-V2-Lite's one latent unit of 16 heads at 4,096 positions */
    mvm_g_attention_args a = {};
    a.n_tok = 1, a.pos0 = 4095, a.n_head = 16, a.n_head_kv = 1, a.head_dim = 576;
    const uint32_t cores = mvm_g_attention_shape(&a).gx;
    a.mma = 1;
    CHECK(cores == 64 && mvm_g_attention_mma_shape(&a).gx == 128);
}

/* Rows of floats into the cache's rows, strided both sides: F16 rounded as the CPU rounds
 * (mvm_fp32_to_fp16, nearest even), F32 as they are; the elements between rows untouched. */
static void test_store_rows(void)
{
    for (enum mvm_wtype t : {MVM_W_F16, MVM_W_F32, MVM_W_Q8_0}) {
        /* Q8_0: whole blocks, 10 a row (the last warp's lanes past them), 11 from row to row */
        const bool q8 = t == MVM_W_Q8_0;
        const uint32_t n = q8 ? 320 : 300, rows = 3, src_stride = n + 5;
        const uint32_t dst_stride = q8 ? n + 32 : n + 9;
        std::vector<float> src = randoms(rows * src_stride, 4.0f);
        src[1] = 65520.0f, src[2] = 1e-6f, src[3] = -0.0f; /* overflow, a subnormal, a sign */
        std::vector<float> src2 = randoms(rows * src_stride, 4.0f); /* the values, with both */
        src2[q8 ? 40 : 0] = NAN; /* a NaN in a block (its CPU's running max) */
        const size_t row = mvm_k_row_bytes(t, dst_stride);
        for (int both = 0; both < 2; both++) {
            std::vector<uint8_t> dst(rows * row, 0xA5), want = dst;
            std::vector<uint8_t> dst2 = dst, want2 = dst;
            for (uint32_t i = 0; i < rows; i++) {
                mvm_k_quantize(t, &src[i * src_stride], &want[i * row], n);
                if (both)
                    mvm_k_quantize(t, &src2[i * src_stride], &want2[i * row], n);
            }
            mvm_g_store_rows_args a = {dp(dst.data()), dp(src.data()),
                                       both ? dp(dst2.data()) : 0, both ? dp(src2.data()) : 0,
                                       dst_stride, src_stride, n, rows, t, 0, 0};
            launch(mvm_g_store_rows, a, mvm_g_store_rows_shape(&a));
            CHECK(dst == want && dst2 == want2);
            /* the rows from the position on the device (a decode graph's): 2 rows on */
            const uint32_t on_device = 2;
            std::vector<uint8_t> shifted((rows + 2) * row, 0xA5), want_s = shifted;
            std::copy(want.begin(), want.end(), want_s.begin() + 2 * row);
            a.dst = dp(shifted.data()), a.dst2 = 0, a.src2 = 0, a.pos = dp(&on_device);
            launch(mvm_g_store_rows, a, mvm_g_store_rows_shape(&a));
            CHECK(shifted == want_s);
        }
    }
}

/* One token's routing as the host's (engine/forward/moe_step.c) computes it, written
 * independently: groups and top-k by sorting, NaN lowest, ties to the lower index. */
struct route_case {
    uint32_t E, K, n_group, n_group_used, sigmoid, norm, bias;
    float scale;
};

static float nan_low(float v) { return std::isnan(v) ? -INFINITY : v; }

static void route_ref(const route_case &c, const std::vector<float> &logits,
                      const std::vector<float> &bias, std::vector<int> &sel, std::vector<float> &w)
{
    std::vector<float> p = logits, key(c.E);
    if (c.sigmoid)
        for (float &v : p)
            v = 1.0f / (1.0f + expf(-v));
    else
        mvm_k_softmax(p.data(), c.E);
    for (uint32_t e = 0; e < c.E; e++)
        key[e] = p[e] + (c.bias ? bias[e] : 0.0f);
    if (c.n_group > 1) {
        const uint32_t G = c.E / c.n_group;
        std::vector<float> gk(c.n_group);
        for (uint32_t g = 0; g < c.n_group; g++) {
            std::vector<float> v(key.begin() + g * G, key.begin() + (g + 1) * G);
            for (float &x : v)
                x = nan_low(x);
            std::sort(v.begin(), v.end(), std::greater<float>());
            float k = c.sigmoid ? v[0] + v[1] : v[0];
            gk[g] = std::isnan(k) ? -INFINITY : k;
        }
        std::vector<uint32_t> order(c.n_group);
        for (uint32_t g = 0; g < c.n_group; g++)
            order[g] = g;
        std::stable_sort(order.begin(), order.end(),
                         [&](uint32_t a, uint32_t b) { return gk[a] > gk[b]; });
        for (uint32_t i = c.n_group_used; i < c.n_group; i++)
            for (uint32_t e = order[i] * G; e < (order[i] + 1) * G; e++)
                key[e] = -INFINITY;
    }
    std::vector<int> idx(c.E);
    for (uint32_t e = 0; e < c.E; e++)
        idx[e] = (int)e;
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int a, int b) { return nan_low(key[a]) > nan_low(key[b]); });
    sel.assign(idx.begin(), idx.begin() + c.K);
    w.resize(c.K);
    float sum = 0;
    for (uint32_t k = 0; k < c.K; k++)
        sum += w[k] = p[sel[k]];
    for (uint32_t k = 0; k < c.K; k++) {
        w[k] = c.norm ? w[k] / sum : w[k];
        w[k] = c.scale != 1.0f ? w[k] * c.scale : w[k];
    }
}

static bool same_float(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

/* mvm_g_route against route_ref on logits with ties, repeats across groups, -inf, and (in
 * some) a NaN, or with a given choice (a replayed trace's: its experts and weights as they
 * are); the rows it lays out are one token's step: experts ascending, each its one row;
 * what it must not write (other experts' off and cnt) keeps its poison. */
static void test_route(void)
{
    static const route_case cases[] = {
        {8, 2, 1, 0, 0, 0, 0, 1.0f},    {64, 8, 1, 0, 0, 1, 0, 1.0f},
        {128, 8, 1, 0, 0, 1, 0, 1.0f},  {100, 6, 1, 0, 0, 0, 0, 2.5f},
        {64, 6, 8, 3, 0, 0, 0, 1.0f},   {256, 8, 8, 4, 1, 1, 1, 2.5f},
        {32, 4, 1, 0, 1, 1, 1, 1.0f},   {160, 32, 1, 0, 0, 1, 0, 1.0f},
        {1024, 8, 32, 4, 1, 1, 1, 1.0f}, {4, 4, 1, 0, 0, 1, 0, 1.0f},
    };
    const uint32_t POISON_U = 0xDEADBEEF;
    for (const route_case &c : cases)
        for (int variant = 0; variant < 6; variant++) {
            std::vector<float> logits = randoms(c.E, 4.0f), bias = randoms(c.E, 0.5f);
            if (variant >= 1) /* ties: every value repeated elsewhere, -inf among them */
                for (uint32_t e = c.E / 2; e < c.E; e++)
                    logits[e] = logits[e - c.E / 2];
            if (variant >= 2)
                logits[c.E / 3] = -INFINITY;
            if (variant == 3)
                logits[c.E - 1] = NAN;
            std::vector<int> want_sel;
            std::vector<float> want_w;
            std::vector<int32_t> given; /* variant 4 replays a given choice */
            if (variant == 4) {
                std::vector<int32_t> all(c.E);
                for (uint32_t e = 0; e < c.E; e++)
                    all[e] = (int32_t)e;
                std::shuffle(all.begin(), all.end(), rng);
                std::vector<float> gw = randoms(c.K);
                given.assign(all.begin(), all.begin() + c.K);
                for (float v : gw) {
                    int32_t bits;
                    memcpy(&bits, &v, sizeof bits);
                    given.push_back(bits); /* the weights after the experts, as floats */
                }
                want_sel.assign(given.begin(), given.begin() + c.K);
                want_w = gw;
            } else {
                route_ref(c, logits, bias, want_sel, want_w);
            }
            std::vector<uint32_t> active(c.K + 1, POISON_U), off(c.E, POISON_U),
                cnt(c.E, POISON_U), row_tok(c.K + 1, POISON_U), tok_rows(c.K + 1, POISON_U);
            std::vector<float> row_w(c.K + 1, POISON), w(c.K + 1, POISON);
            std::vector<int32_t> sel(c.K + 1, -7);
            /* odd variants and 5: each chosen expert's address out of a table (a step at a
             * budget), 0 for some (their own); 5 is read-through: a third of them homes
             * that may be kept (MVM_G_ADDR_FILL), which take the pool's slabs left after
             * the layers before (claims[0] = 1 already) in choice order while any is left */
            const uint64_t POISON_A = 0xBADC0FFEE0DDF00Dull;
            const bool table = variant % 2 == 1 || variant == 5, through = variant == 5;
            std::vector<uint64_t> addr(c.E), wptr(c.K + 1, POISON_A), wstore(c.K + 1, POISON_A);
            for (uint32_t e = 0; e < c.E; e++) {
                const uint32_t kind = (uint32_t)(rng() % 3); /* own, elsewhere, a home */
                addr[e] = kind ? (rng() & ~0xFull) | 0x10 : 0;
                addr[e] |= through && kind == 2 ? MVM_G_ADDR_FILL : 0;
            }
            uint32_t fills = 0;
            for (uint32_t k = 0; k < c.K; k++)
                fills += (addr[want_sel[k]] & MVM_G_ADDR_FILL) != 0;
            const uint32_t layer = 3, taken = 1, n_pool = taken + (fills ? fills - 1 : 1);
            std::vector<uint64_t> pool(n_pool);
            for (uint64_t &p : pool)
                p = (rng() & ~0xFull) | 0x20;
            std::vector<uint32_t> claims(1 + n_pool + 1, POISON_U);
            claims[0] = taken;
            mvm_g_route_args a = {dp(logits.data()), c.bias ? dp(bias.data()) : 0,
                                  dp(active.data()), dp(off.data()), dp(cnt.data()),
                                  dp(row_tok.data()), dp(tok_rows.data()), dp(row_w.data()),
                                  dp(sel.data()), dp(w.data()),
                                  given.empty() ? 0 : dp(given.data()),
                                  table ? dp(addr.data()) : 0, dp(wptr.data()),
                                  through ? dp(pool.data()) : 0,
                                  through ? dp(claims.data()) : 0,
                                  through ? dp(wstore.data()) : 0, 0, 0, 0, 0, c.scale,
                                  c.E, c.K, c.n_group, c.n_group_used, c.sigmoid, c.norm,
                                  n_pool, layer, 0, 0, 0, 0, 0};
            launch(mvm_g_route, a, mvm_g_route_shape(&a));
            bool ok = sel[c.K] == -7 && same_float(w[c.K], POISON) && active[c.K] == POISON_U;
            ok = ok && wptr[c.K] == POISON_A && wstore[c.K] == POISON_A;
            for (uint32_t r = 0; r < c.K; r++)
                ok = ok && wptr[r] == (table ? addr[active[r] % c.E] & ~MVM_G_ADDR_FILL
                                             : POISON_A);
            for (uint32_t k = 0, i = taken; k < c.K && through; k++) {
                const uint32_t e = (uint32_t)want_sel[k], r = tok_rows[k] % c.K;
                const bool kept = (addr[e] & MVM_G_ADDR_FILL) && i < n_pool;
                ok = ok && wstore[r] == (kept ? pool[i] : 0);
                ok = ok && (!kept || claims[1 + i] == layer * c.E + e);
                i += (addr[e] & MVM_G_ADDR_FILL) != 0;
            }
            ok = ok && (!through || (claims[0] == taken + fills &&
                                     claims[1] == POISON_U && claims[1 + n_pool] == POISON_U));
            ok = ok && (through || wstore[0] == POISON_A);
            for (uint32_t k = 0; k < c.K; k++) {
                ok = ok && sel[k] == want_sel[k] && same_float(w[k], want_w[k]);
                const uint32_t r = tok_rows[k], e = (uint32_t)want_sel[k];
                ok = ok && r < c.K && active[r] == e && off[e] == r && cnt[e] == 1 &&
                     row_tok[r] == 0 && same_float(row_w[r], want_w[k]);
                ok = ok && (k == 0 || active[k - 1] < active[k]);
            }
            for (uint32_t e = 0; e < c.E; e++)
                if (std::find(want_sel.begin(), want_sel.end(), (int)e) == want_sel.end())
                    ok = ok && off[e] == POISON_U && cnt[e] == POISON_U;
            if (!ok)
                fprintf(stderr, "route E %u K %u groups %u/%u sigmoid %u variant %d: differs\n",
                        c.E, c.K, c.n_group, c.n_group_used, c.sigmoid, variant);
            CHECK(ok);
        }
}

/* A prompt batch's routing (kernels.h): mvm_g_route_rows against route_ref token by token,
 * ties, -inf and NaN among the logits, and a given choice laid out as given; then mvm_g_route_group against the host's grouping
 * written here (engine/forward/moe_step.c's group: counts, offsets, each expert's rows in
 * choice order), with some experts chosen by no token, fewer rows than the kernel's warps
 * and many rounds of each; a choice out of range takes no row, its tok_rows entry the zero
 * row, and nothing is written past the batch's rows. */
static void test_route_rows(void)
{
    static const route_case cases[] = {
        {8, 2, 1, 0, 0, 0, 0, 1.0f},    {64, 8, 1, 0, 0, 1, 0, 1.0f},
        {256, 8, 8, 4, 1, 1, 1, 2.5f},  {160, 32, 1, 0, 0, 1, 0, 1.0f},
        {1024, 8, 32, 4, 1, 1, 1, 1.0f}, {128, 8, 1, 0, 0, 1, 0, 1.0f},
    };
    const uint32_t POISON_U = 0xDEADBEEF, ZERO = 999999;
    for (const route_case &c : cases)
        for (uint32_t n : {1u, 5u, 37u, 300u}) {
            std::vector<float> logits = randoms((size_t)n * c.E, 4.0f), bias = randoms(c.E, 0.5f);
            for (uint32_t t = 1; t < n; t += 2) /* ties, -inf and NaN in some tokens */
                for (uint32_t e = c.E / 2; e < c.E; e++)
                    logits[(size_t)t * c.E + e] = logits[(size_t)t * c.E + e - c.E / 2];
            if (n > 2)
                logits[(size_t)2 * c.E + c.E / 3] = -INFINITY, logits[2 * c.E + 1] = NAN;
            const size_t nk = (size_t)n * c.K;
            std::vector<int> want_sel;
            std::vector<float> want_w;
            for (uint32_t t = 0; t < n; t++) {
                std::vector<float> one(logits.begin() + (size_t)t * c.E,
                                       logits.begin() + (size_t)(t + 1) * c.E);
                std::vector<int> s1;
                std::vector<float> w1;
                route_ref(c, one, bias, s1, w1);
                want_sel.insert(want_sel.end(), s1.begin(), s1.end());
                want_w.insert(want_w.end(), w1.begin(), w1.end());
            }
            std::vector<int32_t> sel(nk + 1, -7);
            std::vector<float> w(nk + 1, POISON);
            mvm_g_route_args a = {};
            a.logits = dp(logits.data()), a.choose_bias = c.bias ? dp(bias.data()) : 0;
            a.sel = dp(sel.data()), a.w = dp(w.data()), a.scale = c.scale, a.n_expert = c.E;
            a.top_k = c.K, a.n_group = c.n_group, a.n_group_used = c.n_group_used;
            a.sigmoid = c.sigmoid, a.norm_topk = c.norm, a.n_tok = n;
            launch(mvm_g_route_rows, a, mvm_g_route_rows_shape(&a));
            bool ok = sel[nk] == -7 && same_float(w[nk], POISON);
            for (size_t r = 0; r < nk; r++)
                ok = ok && sel[r] == want_sel[r] && same_float(w[r], want_w[r]);
            /* a given choice ([n][2K]: experts, then weights) instead of the router's */
            std::vector<int32_t> given(2 * nk), gsel(nk + 1, -7);
            std::vector<float> gw(nk + 1, POISON);
            for (uint32_t t = 0; t < n; t++)
                for (uint32_t k = 0; k < c.K; k++) {
                    const float v = (float)(rng() % 1000) / 999.0f;
                    given[(size_t)t * 2 * c.K + k] = (int32_t)(rng() % c.E);
                    memcpy(&given[(size_t)t * 2 * c.K + c.K + k], &v, sizeof v);
                }
            mvm_g_route_args ga = a;
            ga.given = dp(given.data()), ga.sel = dp(gsel.data()), ga.w = dp(gw.data());
            launch(mvm_g_route_rows, ga, mvm_g_route_rows_shape(&ga));
            for (size_t r = 0; r < nk; r++) {
                const size_t t = r / c.K, k = r % c.K;
                float v;
                memcpy(&v, &given[t * 2 * c.K + c.K + k], sizeof v);
                ok = ok && gsel[r] == given[t * 2 * c.K + k] && same_float(gw[r], v);
            }
            ok = ok && gsel[nk] == -7 && same_float(gw[nk], POISON);
            if (n > 2) /* a device that answers wrongly: no row for this choice */
                sel[c.K + 1] = (int32_t)c.E;
            /* the host's grouping */
            std::vector<uint32_t> cnt(c.E, 0), off(c.E), at(c.E), want_tok(nk), want_rows(nk);
            std::vector<float> want_rw(nk);
            for (size_t r = 0; r < nk; r++)
                if ((uint32_t)sel[r] < c.E)
                    cnt[(uint32_t)sel[r]]++;
            for (uint32_t e = 0, o = 0; e < c.E; e++)
                off[e] = at[e] = o, o += cnt[e];
            for (size_t r = 0; r < nk; r++) {
                const uint32_t e = (uint32_t)sel[r];
                if (e >= c.E) {
                    want_rows[r] = ZERO;
                    continue;
                }
                want_tok[at[e]] = (uint32_t)(r / c.K), want_rw[at[e]] = w[r];
                want_rows[r] = at[e]++;
            }
            std::vector<uint32_t> active(c.E + 1, POISON_U), goff(c.E + 1, POISON_U),
                gcnt(c.E + 1, POISON_U), row_tok(nk + 1, POISON_U), tok_rows(nk + 1, POISON_U);
            std::vector<float> row_w(nk + 1, POISON);
            mvm_g_route_group_args g = {dp(sel.data()), dp(w.data()), dp(active.data()),
                                        dp(goff.data()), dp(gcnt.data()), dp(row_tok.data()),
                                        dp(tok_rows.data()), dp(row_w.data()), c.E, c.K, n,
                                        ZERO};
            launch(mvm_g_route_group, g, mvm_g_route_group_shape(&g));
            const size_t placed = nk - (n > 2);
            for (uint32_t e = 0; e < c.E; e++)
                ok = ok && active[e] == e && goff[e] == off[e] && gcnt[e] == cnt[e];
            ok = ok && active[c.E] == POISON_U && goff[c.E] == POISON_U;
            for (size_t r = 0; r < nk; r++)
                ok = ok && tok_rows[r] == want_rows[r];
            for (size_t r = 0; r < placed; r++)
                ok = ok && row_tok[r] == want_tok[r] && same_float(row_w[r], want_rw[r]);
            ok = ok && row_tok[placed] == POISON_U && tok_rows[nk] == POISON_U;
            if (!ok)
                fprintf(stderr, "route rows E %u K %u groups %u/%u, %u tokens: differs\n", c.E,
                        c.K, c.n_group, c.n_group_used, n);
            CHECK(ok);
        }
}

/* The CPU's share of a routed step (kernels.h): which misses mvm_g_route gives the CPU,
 * against the rule written here (in choice order, each miss to the CPU while the CPU's
 * running time with it ends before the link's), on random miss patterns and times, with
 * and without read-through's slabs; the rows, addresses and the share as the kernel leaves
 * them. */
static void test_route_cpu(void)
{
    const uint32_t E = 40, K = 8, D = 72, BK = 16, POISON_U = 0xDEADBEEF;
    const uint64_t POISON_A = 0xBADC0FFEE0DDF00Dull;
    for (int trial = 0; trial < 60; trial++) {
        const bool through = trial % 3 == 2;
        std::vector<int32_t> given(2 * K);
        std::vector<int> pick(E);
        for (uint32_t e = 0; e < E; e++)
            pick[e] = (int)e;
        std::shuffle(pick.begin(), pick.end(), rng);
        std::vector<float> gw = randoms(K, 1.0f);
        for (uint32_t k = 0; k < K; k++) {
            given[k] = pick[k];
            memcpy(&given[K + k], &gw[k], sizeof(float));
        }
        std::vector<uint64_t> addr(E);
        for (uint32_t e = 0; e < E; e++) /* own (0), or a home (through: marked FILL) */
            addr[e] = rng() % 2 ? ((rng() & ~0xFull) | 0x40) | (through ? MVM_G_ADDR_FILL : 0)
                                : 0;
        mvm_g_cpu_token tok = {77u + (uint32_t)trial, 0.0f, 0.0f, 0};
        tok.cpu_us = trial % 10 == 0 ? 0.0f : 0.1f + (float)(rng() % 100) * 0.05f;
        tok.link_us = 0.1f + (float)(rng() % 100) * 0.05f;
        /* the rule, written here */
        std::vector<int> want_cpu(K, 0);
        float tc = 0, tl = 0;
        for (uint32_t k = 0; k < K; k++) {
            const uint64_t at = addr[(uint32_t)given[k]];
            const bool miss = through ? (at & MVM_G_ADDR_FILL) != 0 : at != 0;
            if (!miss)
                continue;
            if (tok.cpu_us > 0 && tc + tok.cpu_us < tl + tok.link_us)
                want_cpu[k] = 1, tc += tok.cpu_us;
            else
                tl += tok.link_us;
        }
        std::vector<uint32_t> active(E, POISON_U), off(E, POISON_U), cnt(E, POISON_U),
            row_tok(K, POISON_U), tok_rows(K, POISON_U), claims(1 + K + 1, POISON_U);
        std::vector<float> row_w(K, POISON), w(K, POISON), hidden = randoms(D),
                           logits = randoms(E);
        std::vector<int32_t> sel(K, -7), on_cpu(K + 1, -7);
        std::vector<uint64_t> wptr(K, POISON_A), wstore(K, POISON_A), pool(K);
        for (uint64_t &p : pool)
            p = (rng() & ~0xFull) | 0x20;
        claims[0] = 0;
        std::vector<uint64_t> share_mem(mvm_g_cpu_share_bytes(D) / 8, 0x5A5A5A5A5A5A5A5Aull);
        mvm_g_cpu_share *share = (mvm_g_cpu_share *)share_mem.data();
        float *share_hidden = (float *)((uint8_t *)share + MVM_G_CPU_SHARE_HEAD);
        const float hidden_poison = share_hidden[0];
        mvm_g_route_args a = {};
        a.logits = dp(logits.data()), a.active = dp(active.data()), a.off = dp(off.data());
        a.cnt = dp(cnt.data()), a.row_tok = dp(row_tok.data()), a.tok_rows = dp(tok_rows.data());
        a.row_w = dp(row_w.data()), a.sel = dp(sel.data()), a.w = dp(w.data());
        a.given = dp(given.data()), a.addr = dp(addr.data()), a.wptr = dp(wptr.data());
        a.pool = through ? dp(pool.data()) : 0, a.claims = through ? dp(claims.data()) : 0;
        a.wstore = through ? dp(wstore.data()) : 0;
        a.share = dp(share), a.token = dp(&tok), a.hidden = dp(hidden.data());
        a.on_cpu = dp(on_cpu.data());
        a.scale = 1.0f, a.n_expert = E, a.top_k = K, a.n_pool = K, a.layer = 2;
        a.n_embd = D, a.cpu_row = BK + 1, a.zero_row = BK;
        launch(mvm_g_route, a, mvm_g_route_shape(&a));
        bool ok = share->token == tok.tok && on_cpu[K] == -7;
        uint32_t n = 0, fills = 0;
        for (uint32_t k = 0; k < K; k++) {
            const uint32_t e = (uint32_t)given[k], r = off[e];
            ok = ok && on_cpu[k] == want_cpu[k] && r < K && active[r] == e;
            if (want_cpu[k]) {
                ok = ok && tok_rows[k] == (n ? BK : BK + 1) && wptr[r] == MVM_G_ADDR_CPU;
                ok = ok && share->expert[n] == (int32_t)e && same_float(share->w[n], gw[k]);
                ok = ok && (!through || wstore[r] == 0);
                n++;
            } else {
                ok = ok && tok_rows[k] == r && wptr[r] == (addr[e] & ~MVM_G_ADDR_FILL);
                if (through && (addr[e] & MVM_G_ADDR_FILL)) /* a slab, in choice order */
                    ok = ok && wstore[r] == pool[fills] && claims[1 + fills] == 2 * E + e,
                    fills++;
            }
        }
        ok = ok && share->n == n && (!through || claims[0] == fills);
        for (uint32_t i = 0; i < D; i++) /* the router input, where the CPU has work */
            ok = ok && same_float(share_hidden[i], n ? hidden[i] : hidden_poison);
        if (!ok)
            fprintf(stderr, "route_cpu trial %d (through %d, cpu %.2f link %.2f): differs\n",
                    trial, through, tok.cpu_us, tok.link_us);
        CHECK(ok);
    }
}

/* mvm_g_cpu_wait: nothing on the CPU waits for nothing and copies nothing; a share the
 * host completes later is waited for and copied; one never completed gives up after the
 * limit, marks the share and the token, and the token's next layer then waits no more. */
static void cpu_wait_case(uint32_t D)
{
    const uint32_t K = 4;
    std::vector<uint64_t> mem(2 * mvm_g_cpu_share_bytes(D) / 8, 0);
    mvm_g_cpu_share *s0 = (mvm_g_cpu_share *)mem.data();
    mvm_g_cpu_share *s1 = (mvm_g_cpu_share *)((uint8_t *)mem.data() + mvm_g_cpu_share_bytes(D));
    float *out0 = (float *)((uint8_t *)s0 + mvm_g_cpu_share_out(D));
    const std::vector<float> sum = randoms(D);
    std::vector<float> row(D, POISON);
    std::vector<int32_t> on_cpu(K, 0);
    mvm_g_cpu_token tok = {9, 1.0f, 2.0f, 0};
    mvm_g_cpu_wait_args a = {dp(s0), dp(&tok), dp(on_cpu.data()), dp(row.data()),
                             60000000000ull, D, K};
    launch(mvm_g_cpu_wait, a, mvm_g_cpu_wait_shape(&a));
    bool ok = true;
    for (uint32_t i = 0; i < D; i++)
        ok = ok && std::isnan(row[i]);
    CHECK(ok && s0->late == 0);
    /* the host's thread writes the sum and stores done a little later */
    on_cpu[2] = 1;
    std::thread host([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        memcpy(out0, sum.data(), D * sizeof(float));
        __atomic_store_n(&s0->done, tok.tok, __ATOMIC_RELEASE);
    });
    launch(mvm_g_cpu_wait, a, mvm_g_cpu_wait_shape(&a));
    host.join();
    CHECK(row == sum && s0->late == 0 && tok.gave_up == 0);
    /* the next token: nobody answers; a limit of 20 ms */
    tok.tok = 10;
    a.timeout_ns = 20000000;
    launch(mvm_g_cpu_wait, a, mvm_g_cpu_wait_shape(&a));
    CHECK(s0->late == 10 && tok.gave_up == 10);
    a.share = dp(s1), a.timeout_ns = 60000000000ull; /* its next layer: no wait at all */
    launch(mvm_g_cpu_wait, a, mvm_g_cpu_wait_shape(&a));
    CHECK(s1->late == 0);
}

static void test_cpu_wait(void)
{
    for (uint32_t D : {128u, 101u}) /* (an odd row: the copy by words) */
        cpu_wait_case(D);
}

static void test_add_swiglu(void)
{
    const uint32_t n = 200, n_tok = 3;
    std::vector<float> x0 = randoms(n_tok * n), y = randoms(n_tok * (n + 7)),
                       gate = randoms(n_tok, 3.0f);
    /* residual: x += y (strided) */
    std::vector<float> x = x0, want = x0;
    for (uint32_t i = 0; i < n_tok; i++)
        for (uint32_t j = 0; j < n; j++)
            want[i * n + j] += y[i * (n + 7) + j];
    mvm_g_add_args a = {dp(x.data()), dp(y.data()), 0, n + 7, n, n_tok, 0};
    launch(mvm_g_add, a, mvm_g_add_shape(&a));
    CHECK(x == want);
    /* bias: one row for every token */
    x = x0, want = x0;
    for (uint32_t i = 0; i < n_tok; i++)
        for (uint32_t j = 0; j < n; j++)
            want[i * n + j] += y[j];
    a.x = dp(x.data()), a.y_stride = 0;
    launch(mvm_g_add, a, mvm_g_add_shape(&a));
    CHECK(x == want);
    /* the shared expert: x += sigmoid(gate[i]) * y */
    x = x0, want = x0;
    for (uint32_t i = 0; i < n_tok; i++)
        for (uint32_t j = 0; j < n; j++)
            want[i * n + j] += 1.0f / (1.0f + expf(-gate[i])) * y[i * n + j];
    a = {dp(x.data()), dp(y.data()), dp(gate.data()), n, n, n_tok, 0};
    launch(mvm_g_add, a, mvm_g_add_shape(&a));
    CHECK(x == want);
    /* routing weights: x += scale[i] * y (gpt-oss's down bias on the tensor-core path) */
    x = x0, want = x0;
    for (uint32_t i = 0; i < n_tok; i++)
        for (uint32_t j = 0; j < n; j++)
            want[i * n + j] += gate[i] * y[j];
    a = {dp(x.data()), dp(y.data()), 0, 0, n, n_tok, dp(gate.data())};
    launch(mvm_g_add, a, mvm_g_add_shape(&a));
    CHECK(x == want);
    /* swiglu */
    x = x0, want = x0;
    for (uint32_t i = 0; i < n_tok; i++)
        mvm_k_swiglu(&want[i * n], &y[i * (n + 7)], n);
    a = {dp(x.data()), dp(y.data()), 0, n + 7, n, n_tok, 0};
    launch(mvm_g_swiglu, a, mvm_g_add_shape(&a));
    CHECK(rel_err(x.data(), want.data(), x.size()) < 1e-6);
}

/* ---- the tensor-core path's kernels (kernels/cuda/gemm.cu) ------------------------------- */

#define KERNEL_FN(name, T) mvm_g_dequant_##name,
static void (*const dequant_fn[MVM_W_COUNT])(mvm_g_dequant_args) = {MVM_G_FOR_TYPES(KERNEL_FN)};
#undef KERNEL_FN

static const uint16_t POISON_H = 0x7E00; /* an F16 NaN */

/* rows x n F16 values of the CPU's dequantization (kernels/cpu: mvm_k_dequantize, itself
 * checked against ggml's formulas) of type t's rows, row_bytes apart, rounded to F16 */
static std::vector<uint16_t> dequantized(enum mvm_wtype t, const uint8_t *w, size_t rows,
                                         size_t n, size_t row_bytes)
{
    std::vector<float> f(n);
    std::vector<uint16_t> h(rows * n);
    for (size_t r = 0; r < rows; r++) {
        mvm_k_dequantize(t, w + r * row_bytes, f.data(), n);
        for (size_t i = 0; i < n; i++)
            h[r * n + i] = mvm_k_f2h(f[i]);
    }
    return h;
}

/* got's rows (stride halves apart) hold want's (rows x n) bit for bit, and the gaps after
 * them their poison */
static bool same_rows(const std::vector<uint16_t> &got, size_t stride,
                      const std::vector<uint16_t> &want, size_t rows, size_t n)
{
    bool ok = true;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < stride; i++)
            ok = ok && got[r * stride + i] == (i < n ? want[r * n + i] : POISON_H);
    return ok;
}

/* A matrix of every type to F16, rows strided with gaps: the CPU's values bit for bit. */
static void test_dequant_rows(void)
{
    for (int i = 0; i < MVM_W_COUNT; i++) {
        const enum mvm_wtype t = (enum mvm_wtype)i;
        const uint32_t n = mvm_k_block_elems(t) == MVM_QK_K ? 512 : 160, rows = 5;
        const uint64_t row_bytes = mvm_k_row_bytes(t, n) + 8, stride = n + 16;
        std::vector<uint8_t> w = weights(t, rows, n, row_bytes);
        std::vector<uint16_t> dst(rows * stride, POISON_H);
        mvm_g_dequant_args a = {dp(w.data()), dp(dst.data()), row_bytes, 0, stride, n, rows,
                                rows, 0, 0, 0, 0, {}};
        launch(dequant_fn[t], a, mvm_g_dequant_shape(&a));
        const bool ok = same_rows(dst, stride, dequantized(t, w.data(), rows, n, row_bytes),
                                  rows, n);
        if (!ok)
            fprintf(stderr, "dequant %s: differs from the CPU's\n", mvm_k_wtype_name(t));
        CHECK(ok);
    }
}

/* A channel-major expert's gate, up and down parts as the row-major matrices it was packed
 * from (kernels/cpu: mvm_k_expert_pack), as forward_cuda_gemm.c reads them: the gate and
 * up rows of every group in one launch, group by group; the down slots, each group's the
 * next G columns. */
static void dequant_expert_case(mvm_k_expert_fmt f, uint32_t n_embd, uint32_t n_ff)
{
    const uint32_t G = (uint32_t)mvm_k_expert_group_channels(f);
    const uint64_t row = mvm_k_row_bytes(f.gate_up, n_embd), down_row = mvm_k_row_bytes(f.down,
                                                                                       n_ff);
    const uint64_t gb = mvm_k_expert_group_bytes(f, n_embd);
    std::vector<uint8_t> gate = weights(f.gate_up, n_ff, n_embd, row);
    std::vector<uint8_t> up = weights(f.gate_up, n_ff, n_embd, row);
    std::vector<uint8_t> down = weights(f.down, n_embd, n_ff, down_row);
    std::vector<uint8_t> expert(gb * (n_ff / G));
    mvm_k_expert_pack(f, gate.data(), up.data(), down.data(), n_embd, n_ff, expert.data());
    std::vector<float> gate_b = randoms(n_ff), up_b = randoms(n_ff);
    if (f.glu == MVM_GLU_OAI)
        mvm_k_expert_pack_bias(f, gate_b.data(), up_b.data(), n_embd, n_ff, expert.data());
    {
        /* gate and up in one launch: each group's G gate rows, then its G up rows */
        std::vector<uint16_t> dst(2 * n_ff * (n_embd + 8), POISON_H), want;
        const std::vector<uint16_t> g = dequantized(f.gate_up, gate.data(), n_ff, n_embd, row),
                                    u = dequantized(f.gate_up, up.data(), n_ff, n_embd, row);
        for (uint32_t c0 = 0; c0 < n_ff; c0 += G)
            for (const std::vector<uint16_t> *part : {&g, &u})
                want.insert(want.end(), part->begin() + (size_t)c0 * n_embd,
                            part->begin() + (size_t)(c0 + G) * n_embd);
        mvm_g_dequant_args a = {dp(expert.data()), dp(dst.data()), row, gb, n_embd + 8,
                                n_embd, 2 * n_ff, 2 * G, 2 * G, 0, 0, 0, {}};
        launch(dequant_fn[f.gate_up], a, mvm_g_dequant_shape(&a));
        CHECK(same_rows(dst, n_embd + 8, want, 2 * n_ff, n_embd));
    }
    std::vector<uint16_t> dst(n_embd * (n_ff + 8), POISON_H);
    mvm_g_dequant_args a = {dp(expert.data() + 2 * G * row), dp(dst.data()),
                            mvm_k_row_bytes(f.down, G), gb, n_ff + 8, G, n_embd * (n_ff / G),
                            n_embd, 0, G, 0, 0, {}};
    launch(dequant_fn[f.down], a, mvm_g_dequant_shape(&a));
    CHECK(same_rows(dst, n_ff + 8, dequantized(f.down, down.data(), n_embd, n_ff, down_row),
                    n_embd, n_ff));
}

static void test_dequant_expert(void)
{
    dequant_expert_case(mvm_k_expert_uniform(MVM_W_Q8_0), 96, 128);
    dequant_expert_case(mvm_k_expert_uniform(MVM_W_Q4_K), 256, 512);
    dequant_expert_case({MVM_W_Q4_K, MVM_W_Q6_K, MVM_GLU_SILU, 0}, 256, 512);
    dequant_expert_case({MVM_W_Q3_K, MVM_W_IQ4_NL, MVM_GLU_SILU, 0}, 256, 96);
    dequant_expert_case({MVM_W_MXFP4, MVM_W_MXFP4, MVM_GLU_OAI, 0}, 64, 96);
    /* OLMoE's expert: its down's 2048 x 32 one-chunk slots, more than a grid has rows */
    dequant_expert_case(mvm_k_expert_uniform(MVM_W_Q8_0), 2048, 1024);
}

/* Rows of floats to F16, gathered through an index (an expert's tokens) and not. */
static void test_to_half(void)
{
    const uint32_t n = 200, rows = 7, x_stride = n + 3, stride = n + 8;
    std::vector<float> x = randoms(12 * x_stride, 40.0f);
    const std::vector<uint32_t> idx = {11, 0, 5, 5, 9, 2, 7};
    for (int gather = 0; gather < 2; gather++) {
        std::vector<uint16_t> dst(rows * stride, POISON_H), want(rows * n);
        for (uint32_t i = 0; i < rows; i++)
            for (uint32_t j = 0; j < n; j++)
                want[i * n + j] = mvm_k_f2h(x[(gather ? idx[i] : i) * x_stride + j]);
        mvm_g_to_half_args a = {dp(x.data()), gather ? dp(idx.data()) : 0, dp(dst.data()),
                                x_stride, stride, n, rows};
        launch(mvm_g_to_half, a, mvm_g_to_half_shape(&a));
        CHECK(same_rows(dst, stride, want, rows, n));
    }
}

/* An expert's unit between its products: SwiGLU, and gpt-oss's with the biases of the
 * chunk's channels (from the second group on) read from the packed expert. */
static void test_glu_half(void)
{
    const uint32_t n_embd = 64, n_ff = 160, G = 32, c0 = 64, nc = 96, rows = 9;
    const mvm_k_expert_fmt f = {MVM_W_F32, MVM_W_F32, MVM_GLU_OAI, 0};
    const uint64_t gb = mvm_k_expert_group_bytes(f, n_embd);
    std::vector<uint8_t> expert(gb * (n_ff / G), 0);
    std::vector<float> gate_b = randoms(n_ff, 3.0f), up_b = randoms(n_ff, 3.0f);
    mvm_k_expert_pack_bias(f, gate_b.data(), up_b.data(), n_embd, n_ff, expert.data());
    const uint64_t gu_stride = 2 * nc + 5, stride = nc + 8;
    std::vector<float> gu = randoms(rows * gu_stride, 9.0f), w = randoms(rows);
    for (int oai = 0; oai < 2; oai++) {
        std::vector<uint16_t> h(rows * stride, POISON_H), want(rows * nc);
        for (uint32_t r = 0; r < rows; r++)
            for (uint32_t c = 0; c < nc; c++) {
                /* group by group: its G gate floats, then its G up floats */
                const uint64_t at = r * gu_stride + c / G * 2 * G + c % G;
                const float g = gu[at], u = gu[at + G];
                const float v = oai ? mvm_k_glu_oai(g + gate_b[c0 + c], u + up_b[c0 + c])
                                    : g / (1.0f + expf(-g)) * u;
                want[r * nc + c] = mvm_k_f2h(v * w[r]);
            }
        mvm_g_glu_half_args a = {dp(gu.data()), dp(h.data()), dp(w.data()), dp(expert.data()),
                                 gu_stride, stride, gb, nc, rows, c0, G,
                                 oai ? (uint32_t)MVM_GLU_OAI : (uint32_t)MVM_GLU_SILU, 0, {}};
        launch(mvm_g_glu_half, a, mvm_g_glu_half_shape(&a));
        CHECK(same_rows(h, stride, want, rows, nc));
    }
}

/* Several experts at once (mvm_g_experts_list), as forward_cuda_gemm.c batches them: each
 * slot's gate/up and down parts are what one expert's launch writes (test_dequant_expert
 * holds those to the CPU's), each at its slot's place, the experts read through the list. */
static void test_dequant_experts_list(void)
{
    const mvm_k_expert_fmt f = {MVM_W_Q4_K, MVM_W_Q6_K, MVM_GLU_SILU, 0};
    const uint32_t D = 256, F = 512, G = (uint32_t)mvm_k_expert_group_channels(f);
    const uint64_t row = mvm_k_row_bytes(f.gate_up, D), gb = mvm_k_expert_group_bytes(f, D);
    const uint64_t stride = gb * (F / G) + 64; /* bytes between experts, with a gap */
    std::vector<uint8_t> experts(3 * stride, 0xA5);
    for (int e = 0; e < 3; e++) {
        const uint64_t down_row = mvm_k_row_bytes(f.down, F);
        std::vector<uint8_t> gate = weights(f.gate_up, F, D, row);
        std::vector<uint8_t> up = weights(f.gate_up, F, D, row);
        std::vector<uint8_t> down = weights(f.down, D, F, down_row);
        mvm_k_expert_pack(f, gate.data(), up.data(), down.data(), D, F,
                          experts.data() + e * stride);
    }
    const std::vector<uint32_t> ids = {2, 0}, off(3, 0), cnt(3, 1);
    const mvm_g_experts_list list = {dp(ids.data()), dp(off.data()), dp(cnt.data()), stride, 2,
                                     0, 0};
    for (int down = 0; down < 2; down++) {
        const uint32_t n_in = down ? G : D, rows = down ? D * (F / G) : 2 * F;
        const uint64_t dst_stride = down ? F + 8 : D + 8, per_slot = (down ? D : 2 * F) *
                                                                      dst_stride;
        mvm_g_dequant_args a = {0, 0, down ? mvm_k_row_bytes(f.down, G) : row, gb, dst_stride,
                                n_in, rows, down ? D : 2 * G, down ? 0 : 2 * G, down ? G : 0,
                                0, 0, {}};
        const enum mvm_wtype t = down ? f.down : f.gate_up;
        const uint64_t first = down ? 2 * G * row : 0;
        std::vector<uint16_t> got(2 * per_slot, POISON_H), want(2 * per_slot, POISON_H);
        for (size_t s = 0; s < ids.size(); s++) {
            a.w = dp(experts.data() + ids[s] * stride + first);
            a.dst = dp(want.data() + s * per_slot);
            launch(dequant_fn[t], a, mvm_g_dequant_shape(&a));
        }
        a.w = dp(experts.data() + first), a.dst = dp(got.data());
        a.dst_expert = per_slot, a.list = list;
        launch(dequant_fn[t], a, mvm_g_dequant_shape(&a));
        CHECK(mvm_g_dequant_shape(&a).gy == 2);
        CHECK(got == want);
        /* each slot's expert where `at` says (a slot space's slots, elsewhere, in another
         * order), whatever the ids and the stride say (expert 1, which neither is) */
        std::vector<uint8_t> slots(3 * stride + 256, 0x5A);
        const uint64_t pos[2] = {2 * stride + 256, 0};
        for (size_t s = 0; s < ids.size(); s++)
            memcpy(slots.data() + pos[s], experts.data() + ids[s] * stride, stride);
        const std::vector<uint32_t> wrong = {1, 1};
        std::vector<uint64_t> at(2);
        for (size_t s = 0; s < 2; s++)
            at[s] = (uint64_t)(uintptr_t)(slots.data() + pos[s]) -
                    (uint64_t)(uintptr_t)experts.data();
        std::fill(got.begin(), got.end(), POISON_H);
        a.list.experts = dp(wrong.data()), a.list.at = dp(at.data());
        launch(dequant_fn[t], a, mvm_g_dequant_shape(&a));
        CHECK(got == want);
    }
}

/* The unit and the rows put back for a batch of experts: slot s's first cnt[e] of its
 * n_rows rows, with the routing weights (and gpt-oss's biases) of the step's rows off[e]
 * on; the padding rows untouched. */
static void test_experts_list_unit_rows(void)
{
    const uint32_t D = 64, F = 96, G = 32, n_rows = 4, step_rows = 9;
    const mvm_k_expert_fmt f = {MVM_W_F32, MVM_W_F32, MVM_GLU_OAI, 0};
    const uint64_t gb = mvm_k_expert_group_bytes(f, D), stride = gb * (F / G);
    std::vector<uint8_t> experts(4 * stride, 0);
    std::vector<std::vector<float>> gate_b, up_b;
    for (int e = 0; e < 4; e++) {
        gate_b.push_back(randoms(F, 3.0f)), up_b.push_back(randoms(F, 3.0f));
        mvm_k_expert_pack_bias(f, gate_b[e].data(), up_b[e].data(), D, F,
                               experts.data() + e * stride);
    }
    const std::vector<uint32_t> ids = {3, 1}, off = {0, 5, 0, 1}, cnt = {0, 4, 0, 3};
    const mvm_g_experts_list list = {dp(ids.data()), dp(off.data()), dp(cnt.data()), stride, 2,
                                     0, 0};
    std::vector<float> gu = randoms(2 * n_rows * 2 * F, 9.0f), w = randoms(step_rows);
    std::vector<uint16_t> h(2 * n_rows * F, POISON_H), want(2 * n_rows * F, POISON_H);
    for (uint32_t s = 0; s < 2; s++)
        for (uint32_t r = 0; r < cnt[ids[s]]; r++)
            for (uint32_t c = 0; c < F; c++) {
                const uint32_t e = ids[s];
                const uint64_t at = (s * n_rows + r) * 2 * F + c / G * 2 * G + c % G;
                const float v = mvm_k_glu_oai(gu[at] + gate_b[e][c], gu[at + G] + up_b[e][c]);
                want[(s * n_rows + r) * F + c] = mvm_k_f2h(v * w[off[e] + r]);
            }
    mvm_g_glu_half_args u = {dp(gu.data()), dp(h.data()), dp(w.data()), dp(experts.data()),
                             2 * F, F, gb, F, n_rows, 0, G, MVM_GLU_OAI, 0, list};
    launch(mvm_g_glu_half, u, mvm_g_glu_half_shape(&u));
    CHECK(h == want);
    /* the biases of each slot's expert where `at` says: a copy elsewhere, the others
     * zeroed where the stride would find them */
    std::vector<uint8_t> moved(experts);
    std::vector<uint64_t> at(2);
    for (uint32_t s = 0; s < 2; s++)
        at[s] = (uint64_t)(uintptr_t)(moved.data() + ids[s] * stride) -
                (uint64_t)(uintptr_t)experts.data();
    std::fill(experts.begin(), experts.end(), 0);
    std::fill(h.begin(), h.end(), POISON_H);
    u.list.at = dp(at.data());
    launch(mvm_g_glu_half, u, mvm_g_glu_half_shape(&u));
    CHECK(h == want);
    /* the rows back, biased, into the step's rows; the others keep their poison */
    std::vector<float> src = randoms(2 * n_rows * D), bias = randoms(4 * D);
    std::vector<float> out(step_rows * D, NAN), expect(step_rows * D, NAN);
    for (uint32_t s = 0; s < 2; s++)
        for (uint32_t r = 0; r < cnt[ids[s]]; r++)
            for (uint32_t j = 0; j < D; j++) {
                const uint32_t e = ids[s], dst = off[e] + r;
                expect[dst * D + j] = src[(s * n_rows + r) * D + j] + w[dst] * bias[e * D + j];
            }
    mvm_g_rows_out_args o = {dp(src.data()), dp(out.data()), dp(w.data()), dp(bias.data()), D,
                             n_rows, list};
    launch(mvm_g_rows_out, o, mvm_g_rows_out_shape(&o));
    CHECK(memcmp(out.data(), expect.data(), out.size() * sizeof(float)) == 0);
}

/* The softmax between a prompt's attention products: each (head, query) row's visible keys
 * (causal, with and without a window, from a first position lo) against kernels/cpu's
 * mvm_k_softmax_sink on the same scaled scores, with and without sinks; the keys a query
 * does not see get 0, and the row's padding is left alone. */
static void test_attn_softmax(void)
{
    const uint32_t H = 3, nq = 5, n_k = 37, ld = 40, lo = 7, q0 = 38;
    std::vector<float> s = randoms(H * nq * ld, 6.0f), sinks = randoms(H, 2.0f);
    for (uint32_t window : {0u, 9u})
        for (int sink = 0; sink < 2; sink++) {
            std::vector<uint16_t> p(H * nq * ld, POISON_H);
            mvm_g_attn_softmax_args a = {dp(s.data()), dp(p.data()),
                                         sink ? dp(sinks.data()) : 0, ld, H, nq, n_k, lo, q0,
                                         window, 0.3f, 0};
            launch(mvm_g_attn_softmax, a, mvm_g_attn_softmax_shape(&a));
            bool ok = true;
            for (uint32_t h = 0; h < H; h++)
                for (uint32_t t = 0; t < nq; t++) {
                    const uint32_t q = q0 + t, row = h * nq + t;
                    const uint32_t first = window && q + 1 > window ? q + 1 - window : 0;
                    const uint32_t j0 = first > lo ? first - lo : 0, j1 = q - lo + 1;
                    std::vector<float> x(j1 - j0);
                    for (uint32_t j = j0; j < j1; j++)
                        x[j - j0] = s[row * ld + j] * 0.3f;
                    mvm_k_softmax_sink(x.data(), x.size(), sink ? sinks[h] : -INFINITY);
                    for (uint32_t j = 0; j < ld; j++) {
                        const uint16_t got = p[row * ld + j];
                        if (j >= n_k)
                            ok = ok && got == POISON_H;
                        else if (j < j0 || j >= j1)
                            ok = ok && got == 0;
                        else
                            ok = ok && fabsf(mvm_k_h2f(got) - x[j - j0]) <=
                                           1e-3f * x[j - j0] + 1e-7f;
                    }
                }
            if (!ok)
                fprintf(stderr, "attn_softmax: window %u, sinks %d differ\n", window, sink);
            CHECK(ok);
        }
}

int main(void)
{
    RUN(test_xor_sums);
    RUN(test_emu_h2f);
    RUN(test_quantize);
    RUN(test_matvec);
    RUN(test_mmq_matmul);
    RUN(test_experts);
    RUN(test_route);
    RUN(test_route_rows);
    RUN(test_route_cpu);
    RUN(test_cpu_wait);
    RUN(test_rmsnorm);
    RUN(test_rmsnorm_quantize);
    RUN(test_rmsnorm_sum);
    RUN(test_rope);
    RUN(test_qk_rope);
    RUN(test_attention);
    RUN(test_attention_mma);
    RUN(test_attention_part_bytes);
    RUN(test_store_rows);
    RUN(test_add_swiglu);
    RUN(test_dequant_rows);
    RUN(test_dequant_expert);
    RUN(test_to_half);
    RUN(test_glu_half);
    RUN(test_dequant_experts_list);
    RUN(test_experts_list_unit_rows);
    RUN(test_attn_softmax);
    TEST_END();
}
