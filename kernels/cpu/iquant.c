/*
 * The lattice-grid types' conversions (kernels/iqgrid.h): dequantization that gives ggml's
 * dequantize_row_iq2_xxs .. _iq1_m bit for bit (x = (f·d)·sc·q rounds once where ggml's
 * d·(ls + 0.5)·0.25·g does, the factors differing by powers of two), and a quantizer for
 * mkmodel.
 *
 * The quantizer is much simpler than llama.cpp's, which needs an importance matrix for these
 * types and searches scales and each group's grid neighbours against it. Here, per
 * super-block: every half (16 elements) or chunk (32), as the type scales them, gets the step
 * that maps its value of largest magnitude onto the grid's largest; d maps the largest step
 * onto the top scale code and each step is rounded to an odd multiple of d (the codes are
 * 2ls + 1). Each group of 8 (4 for IQ3) then rounds its magnitudes to the grid's levels, and
 * takes the grid entry nearest that lattice point (a table made once per grid: `struct
 * lattice`). The sign bits are x's; where a type stores 7 of 8 and the count of minus signs
 * is odd, the element of least magnitude takes the other sign, as in ggml. IQ1's delta (±1/8
 * of a step) is chosen per chunk (IQ1_S) or group (IQ1_M) by trying both. The files hold
 * valid data that llama.cpp decodes identically; only the quantization error is larger than
 * llama-quantize's, which does not matter for mkmodel's random weights.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/cpu/dispatch.h"

/* ---- dequantization --------------------------------------------------------------------- */

void mvm_k_dequantize_iq(enum mvm_wtype t, const void *src, float *dst, size_t n)
{
    const size_t bytes = mvm_k_block_bytes(t);
    for (size_t b = 0; b < n / MVM_QK_K; b++) {
        const uint8_t *blk = (const uint8_t *)src + b * bytes;
        const float d = mvm_k_h2f(mvm_k_iq_d(t, blk)) * mvm_k_iq_factor(t);
        for (int c = 0; c < 8; c++) {
            int8_t q[32];
            int sc[2];
            mvm_k_iq_chunk(t, blk, c, q, sc);
            for (int e = 0; e < 32; e++)
                dst[b * MVM_QK_K + 32 * c + e] = d * (float)sc[e / 16] * (float)q[e];
        }
    }
}

/* ---- the grids as lattices ------------------------------------------------------------ */

#define GRIDS 6          /* IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S's (IQ1_M shares it) */
#define LATTICE_MAX 6561 /* 3^8 points (IQ2, IQ1), more than IQ3's 8^4 */

struct lattice {
    int built;
    int n;         /* values per entry: 8, or 4 for IQ3 */
    int n_levels;  /* the grid's distinct values: 3 (IQ2, IQ1) or 8 (IQ3) */
    int levels[8]; /* ascending */
    uint16_t nearest[LATTICE_MAX]; /* the entry nearest lattice point Σ i_k·n_levels^k */
};

static struct lattice lattices[GRIDS];
static pthread_mutex_t lattice_lock = PTHREAD_MUTEX_INITIALIZER;

static int grid_slot(enum mvm_wtype t)
{
    return t == MVM_W_IQ1_M ? GRIDS - 1 : (int)(t - MVM_W_IQ2_XXS);
}

static int grid_entries(enum mvm_wtype t)
{
    static const int entries[GRIDS] = {256, 512, 1024, 256, 512, 2048};
    return entries[grid_slot(t)];
}

/* Value k of grid entry e. */
static int grid_value(enum mvm_wtype t, unsigned e, int k)
{
    return (int8_t)(mvm_k_grid(t, e) >> 8 * k);
}

static void build_lattice(enum mvm_wtype t, struct lattice *L)
{
    L->n = t == MVM_W_IQ3_XXS || t == MVM_W_IQ3_S ? 4 : 8;
    const int entries = grid_entries(t);
    int seen[256] = {0};
    for (int e = 0; e < entries; e++)
        for (int k = 0; k < L->n; k++)
            seen[grid_value(t, (unsigned)e, k) + 128] = 1;
    L->n_levels = 0;
    for (int v = 0; v < 256; v++)
        if (seen[v] && L->n_levels < 8)
            L->levels[L->n_levels++] = v - 128;
    size_t points = 1;
    for (int k = 0; k < L->n; k++)
        points *= (size_t)L->n_levels;
    for (size_t p = 0; p < points && p < LATTICE_MAX; p++) {
        int value[8];
        size_t rest = p;
        for (int k = 0; k < L->n; k++, rest /= (size_t)L->n_levels)
            value[k] = L->levels[rest % (size_t)L->n_levels];
        int best = 0, best_err = -1;
        for (int e = 0; e < entries; e++) {
            int err = 0;
            for (int k = 0; k < L->n; k++) {
                const int diff = grid_value(t, (unsigned)e, k) - value[k];
                err += diff * diff;
            }
            if (best_err < 0 || err < best_err)
                best = e, best_err = err;
        }
        L->nearest[p] = (uint16_t)best;
    }
    L->built = 1;
}

/* The lattice of t's grid, made on first use (mkmodel quantizes from several threads). */
static const struct lattice *lattice_of(enum mvm_wtype t)
{
    struct lattice *L = &lattices[grid_slot(t)];
    pthread_mutex_lock(&lattice_lock);
    if (!L->built)
        build_lattice(t, L);
    pthread_mutex_unlock(&lattice_lock);
    return L;
}

/* The grid entry for the n values v[k] (in units of the step, signed for IQ1, magnitudes
 * otherwise): each rounded to its nearest level, then the entry nearest that point. */
static unsigned grid_pick(const struct lattice *L, const float *v)
{
    size_t key = 0;
    for (int k = L->n - 1; k >= 0; k--) {
        int best = 0;
        for (int i = 1; i < L->n_levels; i++)
            if (fabsf(v[k] - (float)L->levels[i]) < fabsf(v[k] - (float)L->levels[best]))
                best = i;
        key = key * (size_t)L->n_levels + (size_t)best;
    }
    return L->nearest[key];
}

/* ---- quantization ----------------------------------------------------------------------- */

/* What the quantizer chose for one chunk (kernels/iqgrid.h's mvm_k_iq_raw, before the grid
 * lookups): the grid index of each entry (4, or 8 for IQ3), the elements negated, IQ1's
 * negative deltas (bit l: group l), and the scale codes ls of the halves (sc = 2ls + 1). */
struct iq_choice {
    unsigned idx[8];
    uint32_t neg;
    unsigned dneg;
    int ls[2];
};

/* The types that store 7 sign bits of 8 (the eighth even parity). */
static int parity_signs(enum mvm_wtype t)
{
    return t == MVM_W_IQ2_XXS || t == MVM_W_IQ2_XS || t == MVM_W_IQ3_XXS;
}

/* The types with a scale per 16 elements; the others have one per chunk of 32. */
static int per_half(enum mvm_wtype t)
{
    return t == MVM_W_IQ2_XS || t == MVM_W_IQ2_S || t == MVM_W_IQ1_M;
}

/* Signs and grid entries of the IQ2/IQ3 chunk x[32] at steps step[2] (one per half). */
static void choose_signed(enum mvm_wtype t, const struct lattice *L, const float *x,
                          const float step[2], struct iq_choice *ch)
{
    ch->neg = 0;
    for (int e = 0; e < 32; e++)
        ch->neg |= (uint32_t)(x[e] < 0) << e;
    for (int g = 0; g < 32 / L->n; g++) {
        float v[8];
        const float s = step[g * L->n / 16];
        for (int k = 0; k < L->n; k++)
            v[k] = s > 0 ? fabsf(x[g * L->n + k]) / s : 0;
        ch->idx[g] = grid_pick(L, v);
    }
    if (!parity_signs(t))
        return;
    for (int l = 0; l < 4; l++) { /* 8 signs a group: an odd count flips the least |x| */
        if (!(__builtin_popcount(ch->neg >> 8 * l & 255) & 1))
            continue;
        int least = 8 * l;
        for (int e = 8 * l + 1; e < 8 * l + 8; e++)
            if (fabsf(x[e]) < fabsf(x[least]))
                least = e;
        ch->neg ^= 1u << least;
    }
}

/* Squared error of IQ1 group x[8] at step s given delta (±1) and its entry. */
static float iq1_group(enum mvm_wtype t, const struct lattice *L, const float *x, float s,
                       int delta, unsigned *idx)
{
    float v[8];
    for (int k = 0; k < 8; k++)
        v[k] = s > 0 ? (x[k] / s - (float)delta) / 8 : 0;
    *idx = grid_pick(L, v);
    float err = 0;
    for (int k = 0; k < 8; k++) {
        const float diff = x[k] - s * (float)(8 * grid_value(t, *idx, k) + delta);
        err += diff * diff;
    }
    return err;
}

/* Grid entries and deltas of the IQ1 chunk x[32]: IQ1_S one delta for the chunk, IQ1_M one
 * per group, each the sign with the smaller error. */
static void choose_iq1(enum mvm_wtype t, const struct lattice *L, const float *x,
                       const float step[2], struct iq_choice *ch)
{
    unsigned idx[2][4];
    float err[2][4], total[2] = {0, 0};
    for (int neg = 0; neg < 2; neg++) {
        for (int l = 0; l < 4; l++) {
            err[neg][l] = iq1_group(t, L, x + 8 * l, step[l / 2], neg ? -1 : 1, &idx[neg][l]);
            total[neg] += err[neg][l];
        }
    }
    ch->neg = 0;
    ch->dneg = 0;
    for (int l = 0; l < 4; l++) {
        const int neg = t == MVM_W_IQ1_S ? total[1] < total[0] : err[1][l] < err[0][l];
        ch->idx[l] = idx[neg][l];
        ch->dneg |= (unsigned)neg << l;
    }
}

/* Stores chunk c's choice into the super-block (zeroed first by the caller). */
static void pack_chunk(enum mvm_wtype t, uint8_t *blk, int c, const struct iq_choice *ch)
{
    uint32_t s7 = 0; /* the 7-bit sign fields and the scale of IQ2_XXS and IQ3_XXS */
    for (int l = 0; l < 4; l++)
        s7 |= (ch->neg >> 8 * l & 127) << 7 * l;
    s7 |= (uint32_t)ch->ls[0] << 28;
    switch (t) {
    case MVM_W_IQ2_XXS: {
        uint8_t *g = (uint8_t *)((mvm_block_iq2_xxs *)blk)->qs + 8 * c;
        for (int l = 0; l < 4; l++)
            g[l] = (uint8_t)ch->idx[l];
        memcpy(g + 4, &s7, sizeof s7);
        break;
    }
    case MVM_W_IQ3_XXS: {
        mvm_block_iq3_xxs *x = (mvm_block_iq3_xxs *)blk;
        for (int k = 0; k < 8; k++)
            x->qs[8 * c + k] = (uint8_t)ch->idx[k];
        memcpy(x->qs + 64 + 4 * c, &s7, sizeof s7);
        break;
    }
    case MVM_W_IQ2_XS: {
        mvm_block_iq2_xs *x = (mvm_block_iq2_xs *)blk;
        for (int l = 0; l < 4; l++)
            x->qs[4 * c + l] = (uint16_t)(ch->idx[l] | (ch->neg >> 8 * l & 127) << 9);
        x->scales[c] = (uint8_t)(ch->ls[0] | ch->ls[1] << 4);
        break;
    }
    case MVM_W_IQ2_S: {
        mvm_block_iq2_s *x = (mvm_block_iq2_s *)blk;
        for (int l = 0; l < 4; l++) {
            x->qs[4 * c + l] = (uint8_t)ch->idx[l];
            x->qh[c] |= (uint8_t)((ch->idx[l] >> 8) << 2 * l);
            x->qs[32 + 4 * c + l] = (uint8_t)(ch->neg >> 8 * l);
        }
        x->scales[c] = (uint8_t)(ch->ls[0] | ch->ls[1] << 4);
        break;
    }
    case MVM_W_IQ3_S: {
        mvm_block_iq3_s *x = (mvm_block_iq3_s *)blk;
        for (int k = 0; k < 8; k++) {
            x->qs[8 * c + k] = (uint8_t)ch->idx[k];
            x->qh[c] |= (uint8_t)((ch->idx[k] >> 8) << k);
        }
        memcpy(x->signs + 4 * c, &ch->neg, sizeof ch->neg);
        x->scales[c / 2] |= (uint8_t)(ch->ls[0] << 4 * (c % 2));
        break;
    }
    case MVM_W_IQ1_S: {
        mvm_block_iq1_s *x = (mvm_block_iq1_s *)blk;
        unsigned h = (unsigned)ch->ls[0] << 12 | (ch->dneg ? 0x8000u : 0);
        for (int l = 0; l < 4; l++) {
            x->qs[4 * c + l] = (uint8_t)ch->idx[l];
            h |= (ch->idx[l] >> 8) << 3 * l;
        }
        x->qh[c] = (uint16_t)h;
        break;
    }
    default: { /* IQ1_M */
        mvm_block_iq1_m *x = (mvm_block_iq1_m *)blk;
        for (int l = 0; l < 4; l++) {
            x->qs[4 * c + l] = (uint8_t)ch->idx[l];
            x->qh[2 * c + l / 2] |=
                (uint8_t)(((ch->idx[l] >> 8) | (ch->dneg >> l & 1) << 3) << 4 * (l % 2));
        }
        x->scales[c / 2] |= (uint16_t)((ch->ls[0] | ch->ls[1] << 3) << 6 * (c % 2));
        break;
    }
    }
}

/* Stores d: IQ1_M's in the top nibbles of its scale words, the others' first. */
static void pack_d(enum mvm_wtype t, uint8_t *blk, uint16_t d)
{
    if (t != MVM_W_IQ1_M) {
        memcpy(blk, &d, sizeof d);
        return;
    }
    uint16_t *s = ((mvm_block_iq1_m *)blk)->scales;
    for (int w = 0; w < 4; w++)
        s[w] = (uint16_t)((s[w] & 0x0FFF) | (d >> 4 * w & 15) << 12);
}

static void quantize_block(enum mvm_wtype t, const struct lattice *L, const float *x,
                           uint8_t *blk)
{
    /* the largest |q|: the grid's largest magnitude, IQ1's 8·1 + 1 */
    const float top = mvm_k_is_iq1(t) ? 9.0f : (float)L->levels[L->n_levels - 1];
    const int ls_max = mvm_k_is_iq1(t) ? 7 : 15, span = per_half(t) ? 16 : 32;
    float step[16], max_step = 0;
    for (int h = 0; h < 16; h++) {
        const int h0 = h / (span / 16) * (span / 16); /* the first half its scale covers */
        step[h] = fabsf(mvm_k_signed_max(x + 16 * h0, span)) / top;
        max_step = fmaxf(max_step, step[h]);
    }
    const uint16_t dh = mvm_fp32_to_fp16(max_step / (float)(2 * ls_max + 1) /
                                         mvm_k_iq_factor(t));
    const float unit = mvm_k_h2f(dh) * mvm_k_iq_factor(t);
    memset(blk, 0, mvm_k_block_bytes(t));
    for (int c = 0; c < 8; c++) {
        struct iq_choice ch = {{0}, 0, 0, {0, 0}};
        float s[2];
        for (int half = 0; half < 2; half++) {
            const float ratio = unit > 0 ? step[2 * c + half] / unit : 0;
            ch.ls[half] = mvm_k_clampi(mvm_k_nearest((ratio - 1) / 2), 0, ls_max);
            s[half] = unit * (float)(2 * ch.ls[half] + 1);
        }
        if (mvm_k_is_iq1(t))
            choose_iq1(t, L, x + 32 * c, s, &ch);
        else
            choose_signed(t, L, x + 32 * c, s, &ch);
        pack_chunk(t, blk, c, &ch);
    }
    pack_d(t, blk, dh);
}

void mvm_k_quantize_iq(enum mvm_wtype t, const float *src, void *dst, size_t n)
{
    const struct lattice *L = lattice_of(t);
    for (size_t b = 0; b < n / MVM_QK_K; b++)
        quantize_block(t, L, src + b * MVM_QK_K, (uint8_t *)dst + b * mvm_k_block_bytes(t));
}
