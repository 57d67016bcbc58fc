/*
 * The CPU kernels against references written here independently: fp16/bf16 decoded from
 * their fields and rounded by searching for the nearest value, blocks parsed from their
 * bytes, every product summed in double. Each kernel runs at every SIMD level the CPU has, on
 * random non-zero data of sizes that hit the vector tails, over row ranges whose outside must
 * stay untouched (NaN sentinels).
 *
 * Q and K types: the reference dequantizes the weights and the Q8_0- or Q8_K-quantized
 * activations and sums exactly, so the only differences are float rounding of the scales and
 * the sums; in the expert it also quantizes the intermediate activations to down's format
 * as the contract says. The K-quants' super-blocks are decoded here element by element
 * from their byte offsets (ggml-common.h's layouts), independently of kquant.c's loops.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/cpu/dispatch.h" /* white box: which table each level selects */
#include "kernels/cpu/kernels.h"

#define tname(t) mvm_k_wtype_name((enum mvm_wtype)(t))

static int is_q(enum mvm_wtype t)
{
    return t == MVM_W_Q8_0 || t == MVM_W_Q4_0 || t == MVM_W_Q4_1 || t == MVM_W_Q5_0 ||
           t == MVM_W_Q5_1 || t == MVM_W_IQ4_NL || t == MVM_W_MXFP4;
}

/* Bytes of a 32-element Q block of type t. */
static size_t qbytes(enum mvm_wtype t)
{
    static const size_t bytes[] = {[MVM_W_Q8_0] = 34, [MVM_W_Q4_0] = 18, [MVM_W_Q4_1] = 20,
                                   [MVM_W_Q5_0] = 22, [MVM_W_Q5_1] = 24, [MVM_W_IQ4_NL] = 18,
                                   [MVM_W_MXFP4] = 17};
    return bytes[t];
}

/* The lattice-grid types, IQ2_XXS .. IQ1_M. */
static int is_iqgrid(enum mvm_wtype t)
{
    return t == MVM_W_IQ2_XXS || t == MVM_W_IQ2_XS || t == MVM_W_IQ2_S || t == MVM_W_IQ3_XXS ||
           t == MVM_W_IQ3_S || t == MVM_W_IQ1_S || t == MVM_W_IQ1_M;
}

static int is_k(enum mvm_wtype t)
{
    return t == MVM_W_Q2_K || t == MVM_W_Q3_K || t == MVM_W_Q4_K || t == MVM_W_Q5_K ||
           t == MVM_W_Q6_K || t == MVM_W_IQ4_XS || is_iqgrid(t);
}

/* Elements per block of t (what a row length must be a multiple of). */
static size_t blk_of(enum mvm_wtype t)
{
    return is_k(t) ? 256 : is_q(t) ? 32 : 1;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rand32(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* Uniform in [-1, 1), never 0. */
static float frand(void)
{
    float f = (float)(rand32() >> 8) / (float)(1 << 23) - 1.0f;
    return f != 0 ? f : 0.5f;
}

static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = frand() * scale;
}

/* ---- references ------------------------------------------------------------------------- */

static double ref_h2f(uint16_t h)
{
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double v = e == 0    ? ldexp(m, -24)
                     : e == 31 ? (m ? NAN : INFINITY)
                               : ldexp(1024 + m, e - 25);
    return h >> 15 ? -v : v;
}

static double ref_bf2f(uint16_t h)
{
    const int e = (h >> 7) & 0xff, m = h & 0x7f;
    const double v = e == 0     ? ldexp(m, -133)
                     : e == 255 ? (m ? NAN : INFINITY)
                                : ldexp(128 + m, e - 134);
    return h >> 15 ? -v : v;
}

/* Round to nearest, ties to the even pattern, between two neighbours lo < hi. */
static unsigned nearest(double a, unsigned lo, double vlo, double vhi)
{
    if (a - vlo != vhi - a)
        return a - vlo < vhi - a ? lo : lo + 1;
    return lo % 2 ? lo + 1 : lo;
}

/* The fp16 pattern nearest f, by binary search over the positive finite patterns (their
 * order is their values' order); inf counts as 65536 for the rounding. */
static uint16_t ref_f2h(float f)
{
    const uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isnan(f))
        return sign | 0x7e00;
    const double a = fabs((double)f);
    unsigned lo = 0, hi = 0x7bff;
    while (lo < hi) {
        const unsigned mid = (lo + hi + 1) / 2;
        if (ref_h2f((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    const double vhi = lo == 0x7bff ? 65536.0 : ref_h2f((uint16_t)(lo + 1));
    return (uint16_t)(sign | nearest(a, lo, ref_h2f((uint16_t)lo), vhi));
}

static uint16_t ref_f2bf(float f)
{
    const uint16_t trunc = (uint16_t)(mvm_k_f2u(f) >> 16), sign = trunc & 0x8000;
    const unsigned lo = trunc & 0x7fff;
    if (isinf(f))
        return trunc;
    const double vhi = lo == 0x7f7f ? ldexp(1, 128) : ref_bf2f((uint16_t)(lo + 1));
    return (uint16_t)(sign | nearest(fabs((double)f), lo, ref_bf2f((uint16_t)lo), vhi));
}

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* IQ4_NL's values (ggml-common.h, kvalues_iq4nl), IQ4_XS's too */
static const int iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                              1,    13,   25,  38,  53,  69,  89,  113};

/* Q3_K's 16 scales (minus 32) as ggml unpacks them: the 12 bytes as three little-endian
 * u32 words, the low nibbles and high nibbles of words 0 and 1 with two bits each from
 * word 2 (kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f). */
static void ref_q3_scales(const uint8_t *b, int out[16])
{
    uint32_t aux[4], w[3];
    for (int k = 0; k < 3; k++)
        w[k] = (uint32_t)b[4 * k] | (uint32_t)b[4 * k + 1] << 8 | (uint32_t)b[4 * k + 2] << 16 |
               (uint32_t)b[4 * k + 3] << 24;
    aux[0] = (w[0] & 0x0f0f0f0fu) | ((w[2] >> 0 & 0x03030303u) << 4);
    aux[1] = (w[1] & 0x0f0f0f0fu) | ((w[2] >> 2 & 0x03030303u) << 4);
    aux[2] = (w[0] >> 4 & 0x0f0f0f0fu) | ((w[2] >> 4 & 0x03030303u) << 4);
    aux[3] = (w[1] >> 4 & 0x0f0f0f0fu) | ((w[2] >> 6 & 0x03030303u) << 4);
    for (int i = 0; i < 16; i++)
        out[i] = (int)(aux[i / 4] >> (8 * (i % 4)) & 0xFF) - 32;
}

/* Element e (< 256) of a K-quant super-block b of type t, decoded from its bytes:
 *   Q2_K  scales[16]@0 qs[64]@16 d@80 dmin@82        x = d·(sc&15)·q - dmin·(sc>>4)
 *   Q3_K  hmask[32]@0 qs[64]@32 scales[12]@96 d@108   x = d·s·(q - 4·!hbit)
 *         (e = 128h + 32j + l: q = bits 2j of qs[32h + l], hbit = bit 4h + j of hmask[l],
 *         sub-block e / 16)
 *   Q4_K  d@0 dmin@2 scales[12]@4 qs[128]@16        x = d·sc·q - dmin·m
 *   Q5_K  d@0 dmin@2 scales[12]@4 qh[32]@16 qs[128]@48
 *   Q6_K  ql[128]@0 qh[64]@128 scales[16]@192 d@208  x = d·sc·(q - 32)
 *   IQ4_XS d@0 scales_h@2 scales_l[4]@4 qs[128]@8     x = d·(s - 32)·table[q]
 *         (sub-block i = e / 32: s = nibble i % 2 of scales_l[i / 2] | bits 2i, 2i+1 of the
 *         little-endian u16 scales_h << 4; q = the low (e % 32 < 16) or high nibble of
 *         qs[16i + e % 16]) */
static double ref_k_elem(enum mvm_wtype t, const uint8_t *b, unsigned e)
{
    if (t == MVM_W_IQ4_XS) {
        const unsigned i = e / 32, l = e % 32;
        const unsigned s = (b[4 + i / 2] >> (4 * (i % 2)) & 15) | (le16(b + 2) >> (2 * i) & 3) << 4;
        const uint8_t qb = b[8 + 16 * i + l % 16];
        return ref_h2f(le16(b)) * ((int)s - 32) * iq4nl[l < 16 ? qb & 15 : qb >> 4];
    }
    if (t == MVM_W_Q2_K || t == MVM_W_Q3_K) {
        const unsigned h = e / 128, j = e % 128 / 32, l = e % 32;
        const uint8_t *qs = b + (t == MVM_W_Q2_K ? 16 : 32);
        const int q = qs[32 * h + l] >> (2 * j) & 3;
        if (t == MVM_W_Q2_K) {
            const uint8_t sc = b[e / 16];
            return ref_h2f(le16(b + 80)) * (sc & 15) * q - ref_h2f(le16(b + 82)) * (sc >> 4);
        }
        int s[16];
        ref_q3_scales(b + 96, s);
        const int hbit = b[l] >> (4 * h + j) & 1;
        return ref_h2f(le16(b + 108)) * s[e / 16] * (q - (hbit ? 0 : 4));
    }
    if (t == MVM_W_Q6_K) {
        const unsigned h = e / 128, k = e % 128 / 32, l = e % 32;
        const unsigned lo = b[64 * h + 32 * (k % 2) + l] >> (k / 2 * 4) & 15;
        const unsigned hi = b[128 + 32 * h + l] >> (2 * k) & 3;
        return ref_h2f(le16(b + 208)) * (int8_t)b[192 + e / 16] * ((int)(lo | hi << 4) - 32);
    }
    const unsigned sub = e / 32, pair = e / 64, l = e % 32;
    const uint8_t *sc = b + 4, *qs = b + (t == MVM_W_Q5_K ? 48 : 16);
    unsigned scale, min;
    if (sub < 4) {
        scale = sc[sub] & 63, min = sc[sub + 4] & 63;
    } else {
        scale = (sc[sub + 4] & 15) | (sc[sub - 4] >> 6) << 4;
        min = (sc[sub + 4] >> 4) | (sc[sub] >> 6) << 4;
    }
    unsigned q = qs[32 * pair + l] >> (sub % 2 * 4) & 15;
    if (t == MVM_W_Q5_K)
        q |= (b[16 + l] >> sub & 1) << 4;
    return ref_h2f(le16(b)) * scale * q - ref_h2f(le16(b + 2)) * min;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)le16(p) | (uint32_t)le16(p + 2) << 16;
}

/* Value k of entry i of t's grid (the grids are data, kernels/iq_grids.inc; their layout in
 * the blocks is what this reference decodes on its own). */
static int grid_at(enum mvm_wtype t, unsigned i, unsigned k)
{
    return (int8_t)(mvm_k_grid(t, i) >> 8 * k);
}

/* Bit k of the 8 signs that 7 stored bits s7 stand for: the eighth makes them even. */
static int ksign_bit(unsigned s7, unsigned k)
{
    return k < 7 ? s7 >> k & 1 : __builtin_popcount(s7) & 1;
}

/* Element e (< 256) of a super-block b of a lattice-grid type, as ggml's dequantize_row_iq*
 * decode them (chunk c = e / 32, group l = e % 32 / 8 of 8, j = e % 8; IQ3's entries are 4
 * wide, entry k = e % 32 / 4):
 *   IQ2_XXS d@0 qs@2: the 8 bytes at 2 + 8c are 4 entry indices and a u32 a, whose bits 7l
 *           are group l's 7 sign bits and top 4 the scale ls: d·(ls + 0.5)/4 · ±grid
 *   IQ2_XS  d@0 u16 qs[32]@2 scales[8]@66: qs[4c + l] = index (9 bits) | signs << 9; ls the
 *           low (l < 2) or high nibble of scales[c]
 *   IQ2_S   d@0 qs[32]@2 signs[32]@34 qh[8]@66 scales[8]@74: index qs[4c + l] | bits 2l of
 *           qh[c] << 8, the 8 signs signs[4c + l]; ls as IQ2_XS
 *   IQ3_XXS d@0 qs[64]@2 u32[8]@66: entry index qs[8c + k], the u32 as IQ2_XXS's a:
 *           d·(ls + 0.5)/2 · ±grid
 *   IQ3_S   d@0 qs[64]@2 qh[8]@66 signs[32]@74 scales[4]@106: index qs[8c + k] | bit k of
 *           qh[c] << 8, signs[4c + l]; ls nibble c % 2 of scales[c / 2]: d·(2ls + 1) · ±grid
 *   IQ1_S   d@0 qs[32]@2 u16 qh[8]@34: index qs[4c + l] | bits 3l of qh[c] << 8, ls bits 12
 *           of qh[c], bit 15 the delta's sign: d·(2ls + 1) · (grid ± 1/8)
 *   IQ1_M   qs[32]@0 qh[16]@32 u16 sc[4]@48: nibble l % 2 of qh[2c + l / 2] is the index's
 *           bits 8..10 and (bit 3) the delta's sign; ls = bits 3(s % 4) of sc[s / 4] for the
 *           16-element s = e / 16; d the f16 of the four top nibbles of sc, sc[0]'s lowest */
static double ref_iq_elem(enum mvm_wtype t, const uint8_t *b, unsigned e)
{
    const unsigned c = e / 32, l = e % 32 / 8, j = e % 8, k = e % 32 / 4;
    const double d = t == MVM_W_IQ1_M ? 0 : ref_h2f(le16(b));
    int neg = 0, g;
    switch (t) {
    case MVM_W_IQ2_XXS: {
        const uint32_t a = le32(b + 2 + 8 * c + 4);
        neg = ksign_bit(a >> 7 * l & 127, j);
        g = grid_at(t, b[2 + 8 * c + l], j);
        return d * ((a >> 28) + 0.5) / 4 * (neg ? -g : g);
    }
    case MVM_W_IQ2_XS: {
        const unsigned v = le16(b + 2 + 2 * (4 * c + l));
        neg = ksign_bit(v >> 9, j);
        g = grid_at(t, v & 511, j);
        return d * ((b[66 + c] >> 4 * (l / 2) & 15) + 0.5) / 4 * (neg ? -g : g);
    }
    case MVM_W_IQ2_S: {
        g = grid_at(t, b[2 + 4 * c + l] | (b[66 + c] >> 2 * l & 3) << 8, j);
        neg = b[34 + 4 * c + l] >> j & 1;
        return d * ((b[74 + c] >> 4 * (l / 2) & 15) + 0.5) / 4 * (neg ? -g : g);
    }
    case MVM_W_IQ3_XXS: {
        const uint32_t a = le32(b + 66 + 4 * c);
        neg = ksign_bit(a >> 7 * l & 127, e % 8);
        g = grid_at(t, b[2 + 8 * c + k], e % 4);
        return d * ((a >> 28) + 0.5) / 2 * (neg ? -g : g);
    }
    case MVM_W_IQ3_S: {
        g = grid_at(t, b[2 + 8 * c + k] | (b[66 + c] >> k & 1) << 8, e % 4);
        neg = b[74 + 4 * c + l] >> (e % 8) & 1;
        return d * (2 * (b[106 + c / 2] >> 4 * (c % 2) & 15) + 1) * (neg ? -g : g);
    }
    case MVM_W_IQ1_S: {
        const unsigned h = le16(b + 34 + 2 * c);
        g = grid_at(t, b[2 + 4 * c + l] | (h >> 3 * l & 7) << 8, j);
        return d * (2 * (h >> 12 & 7) + 1) * (g + (h & 0x8000 ? -0.125 : 0.125));
    }
    default: { /* IQ1_M */
        const unsigned h = b[32 + 2 * c + l / 2] >> 4 * (l % 2), s = e / 16;
        const unsigned dh = (le16(b + 48) >> 12) | (le16(b + 50) >> 12) << 4 |
                            (le16(b + 52) >> 12) << 8 | (le16(b + 54) >> 12) << 12;
        const unsigned ls = le16(b + 48 + 2 * (s / 4)) >> 3 * (s % 4) & 7;
        g = grid_at(t, b[4 * c + l] | (h & 7) << 8, j);
        return ref_h2f((uint16_t)dh) * (2 * ls + 1) * (g + (h & 8 ? -0.125 : 0.125));
    }
    }
}

/* Element j (< 32) of a Q block b of type t, decoded from its bytes:
 *   Q8_0  d@0 qs[32]@2                 x = d·q (int8)
 *   Q4_0  d@0 qs[16]@2                 x = d·(q - 8)
 *   Q4_1  d@0 m@2 qs[16]@4             x = d·q + m
 *   Q5_0  d@0 qh[4]@2 qs[16]@6         x = d·(q - 16)
 *   Q5_1  d@0 m@2 qh[4]@4 qs[16]@8     x = d·q + m
 *   IQ4_NL d@0 qs[16]@2                x = d·table[q]
 *   MXFP4 e@0 qs[16]@1                 x = 2^(e - 127) · E2M1(q): a sign bit (8) and three
 *                                      bits of 0, 0.5, 1, 1.5, 2, 3, 4, 6 (OCP MX spec)
 * where q is the low nibble of qs[j] (j < 16) or the high one of qs[j - 16], plus for the
 * Q5 types bit j of qh read as a little-endian u32 times 16. */
static double ref_q_elem(enum mvm_wtype t, const uint8_t *b, unsigned j)
{
    if (t == MVM_W_MXFP4) {
        static const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
        const unsigned q = j < 16 ? b[1 + j] & 15 : b[1 + j - 16] >> 4;
        return ldexp(q & 8 ? -e2m1[q & 7] : e2m1[q & 7], (int)b[0] - 127);
    }
    const double d = ref_h2f(le16(b));
    if (t == MVM_W_Q8_0)
        return d * (int8_t)b[2 + j];
    if (t == MVM_W_IQ4_NL)
        return d * iq4nl[j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4];
    const unsigned qs = t == MVM_W_Q4_0 ? 2 : t == MVM_W_Q4_1 ? 4 : t == MVM_W_Q5_0 ? 6 : 8;
    unsigned q = j < 16 ? b[qs + j] & 15 : b[qs + j - 16] >> 4;
    if (t == MVM_W_Q5_0 || t == MVM_W_Q5_1) {
        const uint8_t *qh = b + (t == MVM_W_Q5_0 ? 2 : 4);
        q += 16 * (qh[j / 8] >> (j % 8) & 1);
    }
    if (t == MVM_W_Q4_1 || t == MVM_W_Q5_1)
        return d * q + ref_h2f(le16(b + 2));
    return d * ((int)q - (t == MVM_W_Q4_0 ? 8 : 16));
}

/* n elements of type t from their bytes (blocks little-endian as ggml writes them). */
static void ref_dequant(enum mvm_wtype t, const void *src, double *dst, size_t n)
{
    const uint8_t *s = src;
    static const size_t kbytes[] = {
        [MVM_W_Q2_K] = 84,     [MVM_W_Q3_K] = 110,   [MVM_W_Q4_K] = 144,   [MVM_W_Q5_K] = 176,
        [MVM_W_Q6_K] = 210,    [MVM_W_IQ4_XS] = 136, [MVM_W_IQ2_XXS] = 66, [MVM_W_IQ2_XS] = 74,
        [MVM_W_IQ2_S] = 82,    [MVM_W_IQ3_XXS] = 98, [MVM_W_IQ3_S] = 110,  [MVM_W_IQ1_S] = 50,
        [MVM_W_IQ1_M] = 56};
    for (size_t i = 0; i < n; i++) {
        if (is_k(t)) {
            const uint8_t *b = s + i / 256 * kbytes[t];
            dst[i] = is_iqgrid(t) ? ref_iq_elem(t, b, (unsigned)(i % 256))
                                  : ref_k_elem(t, b, (unsigned)(i % 256));
            continue;
        }
        switch (t) {
        case MVM_W_F32: dst[i] = ((const float *)src)[i]; break;
        case MVM_W_F16: dst[i] = ref_h2f(le16(s + 2 * i)); break;
        case MVM_W_BF16: dst[i] = ref_bf2f(le16(s + 2 * i)); break;
        default: dst[i] = ref_q_elem(t, s + i / 32 * qbytes(t), (unsigned)(i % 32)); break;
        }
    }
}

/* quantize_row_q{8_0,4_0,4_1,5_0,5_1}_ref on one block, into its bytes: Q8_0 scales by the
 * largest magnitude; Q4_0/Q5_0 map the value of largest magnitude (the first on ties) to
 * quant 0; Q4_1/Q5_1 map the minimum to 0 and the maximum to the top quant. */
static void ref_quant_block(enum mvm_wtype t, const float *x, uint8_t *b)
{
    float amax = 0, max = 0, lo = x[0], hi = x[0];
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
        lo = fminf(lo, x[j]), hi = fmaxf(hi, x[j]);
    }
    const int five = t == MVM_W_Q5_0 || t == MVM_W_Q5_1, top = five ? 31 : 15;
    const int with_min = t == MVM_W_Q4_1 || t == MVM_W_Q5_1;
    const float bias = t == MVM_W_Q4_0 ? 8 : t == MVM_W_Q5_0 ? 16 : 0;
    const float d = t == MVM_W_Q8_0 ? amax / 127 : with_min ? (hi - lo) / top : max / -bias;
    const float id = d != 0 ? 1.0f / d : 0;
    const uint16_t dh = ref_f2h(d), mh = ref_f2h(lo);
    memset(b, 0, qbytes(t));
    b[0] = (uint8_t)dh, b[1] = (uint8_t)(dh >> 8);
    if (with_min)
        b[2] = (uint8_t)mh, b[3] = (uint8_t)(mh >> 8);
    const size_t qs = t == MVM_W_Q4_0 ? 2 : t == MVM_W_Q4_1 ? 4 : t == MVM_W_Q5_0 ? 6 : 8;
    uint8_t *qh = b + (t == MVM_W_Q5_0 ? 2 : 4);
    for (int j = 0; j < 32; j++) {
        if (t == MVM_W_Q8_0) {
            b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
            continue;
        }
        const float v = (with_min ? x[j] - lo : x[j]) * id;
        const float shifted = v + (bias + 0.5f);
        const int q = (int)shifted > top ? top : (int)shifted;
        b[qs + j % 16] |= (uint8_t)((q & 15) << (j < 16 ? 0 : 4));
        if (five)
            qh[j / 8] |= (uint8_t)((q >> 4) << (j % 8));
    }
}

/* quantize_row_q8_K_ref on 256 floats, into the block's bytes: the value of largest
 * magnitude (the first on ties) maps to -127, q = min(127, round-half-even(x · -127/max)),
 * d = 1 / (-127/max) as a float, then the sums of each 16 quants. */
static void ref_q8_K(const float *x, uint8_t *b)
{
    float amax = 0, max = 0;
    for (int j = 0; j < 256; j++)
        if (fabsf(x[j]) > amax)
            amax = fabsf(x[j]), max = x[j];
    memset(b, 0, 292);
    if (amax == 0)
        return;
    const float iscale = -127.f / max, d = 1 / iscale;
    memcpy(b, &d, 4);
    for (int j = 0; j < 256; j++) {
        const float v = iscale * x[j];
        double r = floor((double)v + 0.5);
        if (r - (double)v == 0.5 && fmod(r, 2) != 0)
            r -= 1; /* a tie: to even */
        b[4 + j] = (uint8_t)(int8_t)(r > 127 ? 127 : r);
    }
    for (int g = 0; g < 16; g++) {
        int sum = 0;
        for (int j = 0; j < 16; j++)
            sum += (int8_t)b[4 + 16 * g + j];
        b[260 + 2 * g] = (uint8_t)sum, b[261 + 2 * g] = (uint8_t)((unsigned)sum >> 8);
    }
}

/* A Q8_K activation block as doubles. */
static void ref_q8_K_dequant(const uint8_t *b, double *x)
{
    float d;
    memcpy(&d, b, 4);
    for (int j = 0; j < 256; j++)
        x[j] = (double)d * (int8_t)b[4 + j];
}

/* x quantized to type t as the test sees it (floats converted by the reference rounding);
 * not for the K-quants, whose quantizer has no independent definition (test_quantize_k). */
static void ref_quant(enum mvm_wtype t, const float *x, void *dst, size_t n)
{
    uint8_t *d = dst;
    for (size_t i = 0; i < (is_q(t) ? n / 32 : n); i++) {
        switch (t) {
        case MVM_W_F32: memcpy(d + 4 * i, &x[i], 4); break;
        case MVM_W_F16:
        case MVM_W_BF16: {
            const uint16_t h = t == MVM_W_F16 ? ref_f2h(x[i]) : ref_f2bf(x[i]);
            d[2 * i] = (uint8_t)h, d[2 * i + 1] = (uint8_t)(h >> 8);
            break;
        }
        default: ref_quant_block(t, x + 32 * i, d + i * qbytes(t)); break;
        }
    }
}

/* The activation vector the kernels see, as doubles: x itself, or x through Q8_0 or Q8_K. */
static void ref_act(enum mvm_wtype t, const float *x, double *xd, size_t n)
{
    if (is_k(t)) {
        uint8_t q[292];
        for (size_t b = 0; b < n / 256; b++) {
            ref_q8_K(x + 256 * b, q);
            ref_q8_K_dequant(q, xd + 256 * b);
        }
        return;
    }
    if (!is_q(t)) {
        for (size_t i = 0; i < n; i++)
            xd[i] = x[i];
        return;
    }
    uint8_t *q = malloc(n / 32 * 34);
    ref_quant(MVM_W_Q8_0, x, q, n);
    ref_dequant(MVM_W_Q8_0, q, xd, n);
    free(q);
}

/* |got - want| within tol of the scale of the terms that made want. */
static int close_to(double got, double want, double terms, double tol)
{
    return fabs(got - want) <= tol * terms + 1e-30;
}

/* ---- conversions and quantization ------------------------------------------------------- */

static void test_fp16(void)
{
    int bad_decode = 0, bad_round_trip = 0, bad_random = 0;
    for (unsigned h = 0; h < 0x10000; h++) {
        const float f = mvm_fp16_to_fp32((uint16_t)h);
        const double want = ref_h2f((uint16_t)h);
        if (isnan(want)) {
            const uint16_t back = mvm_fp32_to_fp16(f);
            bad_decode += !isnan(f);
            bad_round_trip +=
                (back & 0x7c00) != 0x7c00 || !(back & 0x3ff) || (back & 0x8000) != (h & 0x8000);
        } else {
            bad_decode += (double)f != want || !signbit(f) != !(h >> 15);
            bad_round_trip += mvm_fp32_to_fp16(f) != h;
        }
    }
    CHECK(bad_decode == 0);
    CHECK(bad_round_trip == 0);
    /* Random floats around the fp16 range, including subnormals, ties and overflow. */
    for (int i = 0; i < 200000; i++) {
        const float f = mvm_k_u2f((rand32() & 0x80000000u) | ((100u + rand32() % 46) << 23) |
                             (i % 4 ? rand32() & 0x7fffff : (rand32() & 0x7fe000) | 0x1000));
        bad_random += mvm_fp32_to_fp16(f) != ref_f2h(f);
    }
    CHECK(bad_random == 0);
    CHECK(mvm_fp32_to_fp16(1.0f) == 0x3c00);
    CHECK(mvm_fp32_to_fp16(-2.0f) == 0xc000);
    CHECK(mvm_fp32_to_fp16(65504.0f) == 0x7bff);
    CHECK(mvm_fp32_to_fp16(65519.0f) == 0x7bff);
    CHECK(mvm_fp32_to_fp16(65520.0f) == 0x7c00); /* the tie goes to even: inf */
    CHECK(mvm_fp32_to_fp16(INFINITY) == 0x7c00);
    CHECK(mvm_fp32_to_fp16(-INFINITY) == 0xfc00);
    CHECK(mvm_fp32_to_fp16(0x1p-24f) == 0x0001);        /* smallest subnormal */
    CHECK(mvm_fp32_to_fp16(0x1p-25f) == 0x0000);        /* tie between 0 and it: even */
    CHECK(mvm_fp32_to_fp16(0x3p-25f) == 0x0002);        /* tie between 1 and 2: even */
    CHECK(mvm_fp32_to_fp16(0x1.ff8p-15f) == 0x03ff);    /* the largest subnormal */
    CHECK(mvm_fp32_to_fp16(0x1.ffcp-15f) == 0x0400);    /* tie: up into the normals */
    CHECK(mvm_fp32_to_fp16(1.0f + 0x1p-11f) == 0x3c00); /* tie: even */
    CHECK(mvm_fp32_to_fp16(1.0f + 0x3p-11f) == 0x3c02);
    CHECK(mvm_fp32_to_fp16(-0.0f) == 0x8000);
    const uint16_t qnan = mvm_fp32_to_fp16(NAN);
    CHECK((qnan & 0x7c00) == 0x7c00 && (qnan & 0x200));
    CHECK(mvm_fp16_to_fp32(0x3c00) == 1.0f);
    CHECK(mvm_fp16_to_fp32(0x7bff) == 65504.0f);
    CHECK(mvm_fp16_to_fp32(0x0001) == 0x1p-24f);
    CHECK(mvm_fp16_to_fp32(0x03ff) == 0x3ffp-24f);
    CHECK(isinf(mvm_fp16_to_fp32(0xfc00)) && mvm_fp16_to_fp32(0xfc00) < 0);
    CHECK(isnan(mvm_fp16_to_fp32(0x7e00)));
}

static void test_bf16(void)
{
    int bad_decode = 0, bad_round_trip = 0, bad_random = 0;
    for (unsigned h = 0; h < 0x10000; h++) {
        const float f = mvm_bf16_to_fp32((uint16_t)h);
        const double want = ref_bf2f((uint16_t)h);
        bad_decode += isnan(want) ? !isnan(f) : (double)f != want;
        bad_round_trip += !isnan(want) && mvm_fp32_to_bf16(f) != h;
    }
    CHECK(bad_decode == 0);
    CHECK(bad_round_trip == 0);
    for (int i = 0; i < 200000; i++) {
        uint32_t u = rand32();
        if (i % 4 == 0)
            u = (u & 0xffff0000u) | 0x8000; /* a tie */
        const float f = mvm_k_u2f(u);
        if (isnan(f))
            continue;
        bad_random += mvm_fp32_to_bf16(f) != ref_f2bf(f);
    }
    CHECK(bad_random == 0);
    CHECK(mvm_fp32_to_bf16(1.0f) == 0x3f80);
    CHECK(mvm_fp32_to_bf16(mvm_k_u2f(0x3f808000)) == 0x3f80); /* tie, even below */
    CHECK(mvm_fp32_to_bf16(mvm_k_u2f(0x3f818000)) == 0x3f82); /* tie, even above */
    CHECK(mvm_fp32_to_bf16(mvm_k_u2f(0x3f808001)) == 0x3f81);
    CHECK(mvm_fp32_to_bf16(mvm_k_u2f(0x7f7fffff)) == 0x7f80); /* rounds to inf */
    CHECK(mvm_fp32_to_bf16(-INFINITY) == 0xff80);
    CHECK(mvm_fp32_to_bf16(mvm_k_u2f(0x00000001)) == 0x0000);
    CHECK(mvm_fp32_to_bf16(mvm_k_u2f(0x00018000)) == 0x0002); /* subnormal tie */
    /* nan stays nan, quiet, with its sign, even when the rounding would carry into inf */
    const uint32_t nans[] = {0x7f800001, 0x7fc00000, 0xff800001, 0x7fffffff};
    for (size_t i = 0; i < sizeof nans / sizeof *nans; i++) {
        const uint16_t b = mvm_fp32_to_bf16(mvm_k_u2f(nans[i]));
        CHECK((b & 0x7f80) == 0x7f80 && (b & 0x40) && (b >> 15) == nans[i] >> 31);
    }
}

static void test_sizes(void)
{
    CHECK(mvm_k_row_bytes(MVM_W_F32, 7) == 28);
    CHECK(mvm_k_row_bytes(MVM_W_F16, 7) == 14);
    CHECK(mvm_k_row_bytes(MVM_W_BF16, 7) == 14);
    CHECK(mvm_k_row_bytes(MVM_W_Q8_0, 64) == 68);
    CHECK(mvm_k_row_bytes(MVM_W_Q4_0, 64) == 36);
    CHECK(mvm_k_row_bytes(MVM_W_Q4_1, 64) == 40);
    CHECK(mvm_k_row_bytes(MVM_W_Q5_0, 64) == 44);
    CHECK(mvm_k_row_bytes(MVM_W_Q5_1, 64) == 48);
    CHECK(mvm_k_act_bytes(MVM_W_Q5_1, 64) == 68);
    CHECK(mvm_k_row_bytes(MVM_W_IQ4_NL, 64) == 36 && mvm_k_act_bytes(MVM_W_IQ4_NL, 64) == 68);
    CHECK(mvm_k_row_bytes(MVM_W_MXFP4, 64) == 34 && mvm_k_act_bytes(MVM_W_MXFP4, 64) == 68);
    CHECK(strcmp(mvm_k_wtype_name(MVM_W_MXFP4), "mxfp4") == 0);
    CHECK(mvm_k_row_bytes(MVM_W_Q2_K, 512) == 168 && mvm_k_row_bytes(MVM_W_Q3_K, 512) == 220);
    CHECK(mvm_k_act_bytes(MVM_W_Q3_K, 256) == 292 && mvm_k_block_elems(MVM_W_Q2_K) == 256);
    CHECK(mvm_k_act_bytes(MVM_W_F16, 10) == 40);
    CHECK(mvm_k_act_bytes(MVM_W_Q4_0, 64) == 68);
    CHECK(mvm_k_act_bytes(MVM_W_Q8_0, 64) == 68);
    CHECK(mvm_k_row_bytes(MVM_W_Q4_K, 512) == 288);
    CHECK(mvm_k_row_bytes(MVM_W_Q5_K, 512) == 352);
    CHECK(mvm_k_row_bytes(MVM_W_Q6_K, 512) == 420);
    CHECK(mvm_k_act_bytes(MVM_W_Q5_K, 512) == 584);
    CHECK(mvm_k_row_bytes(MVM_W_IQ4_XS, 512) == 272 && mvm_k_act_bytes(MVM_W_IQ4_XS, 512) == 584);
    CHECK(mvm_k_block_elems(MVM_W_IQ4_XS) == 256);
    CHECK(strcmp(mvm_k_wtype_name(MVM_W_IQ4_XS), "iq4_xs") == 0);
    CHECK(mvm_k_block_elems(MVM_W_Q6_K) == 256 && mvm_k_block_elems(MVM_W_Q4_0) == 32);
    CHECK(mvm_k_block_elems(MVM_W_BF16) == 1);
    CHECK(strcmp(mvm_k_wtype_name(MVM_W_Q4_K), "q4_K") == 0);
    CHECK(strcmp(mvm_k_wtype_name(MVM_W_Q5_1), "q5_1") == 0);
    CHECK(mvm_k_block_elems(MVM_W_Q5_0) == 32);
    CHECK(strcmp(mvm_k_wtype_name(MVM_W_COUNT), "unknown") == 0);
    const mvm_k_expert_fmt q8 = mvm_k_expert_uniform(MVM_W_Q8_0);
    CHECK(mvm_k_expert_group_bytes(q8, 2048) == 64 * 2176 + 2048 * 34);
    CHECK(mvm_k_expert_group_bytes(mvm_k_expert_uniform(MVM_W_F32), 100) == 64 * 400 + 100 * 128);
    CHECK(mvm_k_expert_group_bytes(mvm_k_expert_uniform(MVM_W_Q4_0), 64) == 64 * 36 + 64 * 18);
    CHECK(mvm_k_expert_group_bytes(mvm_k_expert_uniform(MVM_W_MXFP4), 64) == 64 * 34 + 64 * 17);
    /* a K-quant down takes 256 channels a group; gate/up rows keep their own type */
    const mvm_k_expert_fmt q4k_q6k = {MVM_W_Q4_K, MVM_W_Q6_K}, q8_q4k = {MVM_W_Q8_0, MVM_W_Q4_K};
    CHECK(mvm_k_expert_group_channels(q8) == 32 && mvm_k_expert_group_channels(q4k_q6k) == 256);
    CHECK(mvm_k_expert_group_bytes(q4k_q6k, 2048) == 512 * 1152 + 2048 * 210);
    CHECK(mvm_k_expert_group_bytes(q8_q4k, 512) == 512 * 544 + 512 * 144);
    CHECK(mvm_k_expert_group_channels((mvm_k_expert_fmt){MVM_W_Q4_K, MVM_W_Q8_0}) == 32);
}

static void test_quantize_known(void)
{
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16);
    /* Q8_0: amax 16, d = 16/127, q = round-half-away((j - 16) * 127/16) */
    uint8_t b[34];
    mvm_k_quantize(MVM_W_Q8_0, x, b, 32);
    CHECK(le16(b) == ref_f2h(16.0f / 127));
    CHECK((int8_t)b[2 + 0] == -127);
    CHECK((int8_t)b[2 + 8] == -64); /* -63.5 rounds away from zero */
    CHECK((int8_t)b[2 + 16] == 0);
    CHECK((int8_t)b[2 + 24] == 64);
    CHECK((int8_t)b[2 + 31] == 119);
    /* ties round away from zero: with amax 127, d = 1 and q = roundf(x) */
    float ties[32] = {127, 2.5f, -2.5f, 0.5f, -0.5f, 0.49f, 126.5f};
    mvm_k_quantize(MVM_W_Q8_0, ties, b, 32);
    CHECK(le16(b) == 0x3c00);
    CHECK((int8_t)b[3] == 3 && (int8_t)b[4] == -3 && (int8_t)b[5] == 1 && (int8_t)b[6] == -1);
    CHECK((int8_t)b[7] == 0 && (int8_t)b[8] == 127 && (int8_t)b[9] == 0);
    /* Q4_0: the largest magnitude is -16 (j = 0), d = -16 / -8 = 2, q = min(15, (x/2 + 8.5)) */
    mvm_k_quantize(MVM_W_Q4_0, x, b, 32);
    CHECK(le16(b) == 0x4000);
    CHECK(b[2 + 0] == 0x80);  /* j = 0 -> 0, j = 16 -> 8 */
    CHECK(b[2 + 1] == 0x91);  /* j = 1 -> 1 (-7.5 + 8.5), j = 17 -> 9 (0.5 + 8.5) */
    CHECK(b[2 + 15] == 0xF8); /* j = 15 -> 8, j = 31 -> 16 clamped to 15 */
    /* Q5_0: the largest magnitude is -16 (j = 0), d = -16 / -16 = 1, q = trunc(x + 16.5) = j:
     * low nibbles j, high ones j + 16 (mod 16), and bits 16..31 of qh set */
    uint8_t b5[24];
    float back[32];
    mvm_k_quantize(MVM_W_Q5_0, x, b5, 32);
    CHECK(le16(b5) == 0x3c00 && b5[2] == 0 && b5[3] == 0 && b5[4] == 0xFF && b5[5] == 0xFF);
    CHECK(b5[6 + 0] == 0x00 && b5[6 + 1] == 0x11 && b5[6 + 15] == 0xFF);
    mvm_k_dequantize(MVM_W_Q5_0, b5, back, 32);
    CHECK(memcmp(back, x, sizeof x) == 0);
    /* Q5_1: m = -16, d = (15 - -16) / 31 = 1, q = trunc(x + 16 + 0.5) = j again */
    mvm_k_quantize(MVM_W_Q5_1, x, b5, 32);
    CHECK(le16(b5) == 0x3c00 && le16(b5 + 2) == 0xcc00 && b5[6] == 0xFF && b5[7] == 0xFF);
    CHECK(b5[4] == 0 && b5[8 + 1] == 0x11 && b5[8 + 15] == 0xFF);
    mvm_k_dequantize(MVM_W_Q5_1, b5, back, 32);
    CHECK(memcmp(back, x, sizeof x) == 0);
    /* Q4_1: m = -16, d = 31 / 15, q = min(15, trunc(j * 15/31 + 0.5)): j = 0 -> 0, 16 -> 8,
     * 15 -> 7, 31 -> 15; 1 -> 0, 17 -> 8 */
    mvm_k_quantize(MVM_W_Q4_1, x, b5, 32);
    CHECK(le16(b5) == ref_f2h(31.0f / 15) && le16(b5 + 2) == 0xcc00);
    CHECK(b5[4 + 0] == 0x80 && b5[4 + 15] == 0xF7 && b5[4 + 1] == 0x80);
    /* the first of equal magnitudes sets the sign of d */
    x[0] = 16, x[5] = -16;
    mvm_k_quantize(MVM_W_Q4_0, x, b, 32);
    CHECK(le16(b) == 0xc000); /* d = 16 / -8 = -2 */
    /* an all-zero block: d = 0 (-0 for Q4_0: 0 / -8, as ggml writes it), quants at zero */
    memset(x, 0, sizeof x);
    mvm_k_quantize(MVM_W_Q8_0, x, b, 32);
    CHECK(le16(b) == 0 && b[2] == 0 && b[33] == 0);
    mvm_k_quantize(MVM_W_Q4_0, x, b, 32);
    CHECK(le16(b) == 0x8000 && b[2] == 0x88 && b[17] == 0x88);
}

static void test_quantize_random(void)
{
    const size_t n = 32 * 64;
    float *x = malloc(n * sizeof *x), *back = malloc(n * sizeof *back);
    double *want = malloc(n * sizeof *want);
    uint8_t *got = malloc(n * 4), *ref = malloc(n * 4);
    for (int t = 0; t < MVM_W_COUNT; t++) {
        if (is_k((enum mvm_wtype)t) || t == MVM_W_IQ4_NL || t == MVM_W_MXFP4) /* see below */
            continue;
        fill(x, n, 3.0f);
        x[5] = 0x1p-20f, x[77] = -70000.0f * (t != MVM_W_F16); /* a subnormal half, an inf */
        memset(got, 0, n * 4), memset(ref, 0, n * 4);
        mvm_k_quantize((enum mvm_wtype)t, x, got, n);
        ref_quant((enum mvm_wtype)t, x, ref, n);
        CHECK(memcmp(got, ref, mvm_k_row_bytes((enum mvm_wtype)t, n)) == 0);
        mvm_k_dequantize((enum mvm_wtype)t, got, back, n);
        ref_dequant((enum mvm_wtype)t, got, want, n);
        int bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += (double)back[i] != want[i];
        CHECK(bad == 0);
        /* prepare_act: F32 copy, or Q8_0 for every Q type */
        const enum mvm_wtype at = is_q((enum mvm_wtype)t) ? MVM_W_Q8_0 : MVM_W_F32;
        mvm_k_prepare_act((enum mvm_wtype)t, x, got, n);
        ref_quant(at, x, ref, n);
        CHECK(memcmp(got, ref, mvm_k_act_bytes((enum mvm_wtype)t, n)) == 0);
    }
    free(x), free(back), free(want), free(got), free(ref);
}

/* The K-quants: mkmodel's quantizer has no outside definition, so its output is checked
 * for what a quantizer owes: dequantize (the kernel's and the reference's, which must agree
 * exactly) within half a quantization step of the input, a step being the sub-block's
 * scale (as stored), plus the error of storing that scale and min as 6-bit codes of the
 * super-block's f16 d and dmin. The Q8_K activations are compared byte for byte. */
static void test_quantize_k(void)
{
    const size_t n = 256 * 12;
    float *x = malloc(n * sizeof *x), *back = malloc(n * sizeof *back);
    double *want = malloc(n * sizeof *want);
    uint8_t *q = malloc(n * 2), *ref = malloc(n / 256 * 292);
    for (int t = MVM_W_Q2_K; t <= MVM_W_Q6_K; t++) {
        for (size_t i = 0; i < n; i++) /* sub-blocks of very different ranges and offsets */
            x[i] = frand() * ldexpf(1.0f, (int)(i / 32 % 7) - 3) + (i / 64 % 3 == 1 ? 0.5f : 0);
        for (size_t i = 512; i < 768; i++)
            x[i] = 0; /* an all-zero super-block */
        mvm_k_quantize((enum mvm_wtype)t, x, q, n);
        mvm_k_dequantize((enum mvm_wtype)t, q, back, n);
        ref_dequant((enum mvm_wtype)t, q, want, n);
        int bad_exact = 0, bad_close = 0;
        const int sym = t == MVM_W_Q3_K || t == MVM_W_Q6_K; /* no min: a scale per 16 */
        const size_t sub = sym || t == MVM_W_Q2_K ? 16 : 32;
        const double levels = t == MVM_W_Q2_K ? 3 : t == MVM_W_Q4_K ? 15 : 31;
        for (size_t s0 = 0; s0 < n; s0 += sub) {
            double lo = 0, hi = 0, amax = 0, sb_max = 0;
            for (size_t i = s0; i < s0 + sub; i++) {
                lo = fmin(lo, x[i]), hi = fmax(hi, x[i]), amax = fmax(amax, fabs(x[i]));
            }
            for (size_t i = s0 / 256 * 256; i < s0 / 256 * 256 + 256; i++)
                sb_max = fmax(sb_max, fabs(x[i]));
            /* half a step (Q3_K: a whole one, its values of largest magnitude at -4 leave
             * only +3 for the other sign), plus the error of the scale's and min's codes:
             * 4-bit (Q2_K), 6-bit (Q3_K, Q4_K, Q5_K), 8-bit (Q6_K) */
            const double range = t == MVM_W_Q6_K ? amax / 31
                                 : t == MVM_W_Q3_K ? amax / 4 : (hi - lo) / levels;
            const double code = t == MVM_W_Q2_K ? 0.12 : t == MVM_W_Q6_K ? 0.01
                                : t == MVM_W_Q3_K ? 0.03 : 0.04;
            const double tol = range * (t == MVM_W_Q3_K ? 1.01 : 0.51) + sb_max * code + 1e-6;
            for (size_t i = s0; i < s0 + sub; i++) {
                bad_exact += (double)back[i] != want[i];
                bad_close += fabs(back[i] - x[i]) > tol;
            }
        }
        CHECK(bad_exact == 0);
        CHECK(bad_close == 0);
        if (bad_close)
            fprintf(stderr, "  %s: %d of %zu off\n", tname(t), bad_close, n);
        for (size_t i = 512; i < 768; i++)
            CHECK(back[i] == 0);
        /* the activations: quantize_row_q8_K_ref's bytes */
        x[1000] = 0x1p-130f, x[1001] = -x[1002]; /* a subnormal; ties of magnitude */
        mvm_k_prepare_act((enum mvm_wtype)t, x, q, n);
        for (size_t b = 0; b < n / 256; b++)
            ref_q8_K(x + 256 * b, ref + 292 * b);
        CHECK(mvm_k_act_bytes((enum mvm_wtype)t, n) == n / 256 * 292);
        CHECK(memcmp(q, ref, n / 256 * 292) == 0);
    }
    free(x), free(back), free(want), free(q), free(ref);
}

/* What a table type's quantizer owes besides its error bound: the kernel's dequantization
 * equal to the reference's from the bytes, the all-zero block x[64..96) back as zeros, and
 * Q8_0 activations (ggml's vec_dot_type for both). n floats of x -> blocks q and values back. */
static void check_table_type(enum mvm_wtype t, const float *x, size_t n, uint8_t *q,
                             float *back)
{
    double *want = malloc(n * sizeof *want);
    uint8_t *act = malloc(n / 32 * 34), *ref = malloc(n / 32 * 34);
    mvm_k_quantize(t, x, q, n);
    mvm_k_dequantize(t, q, back, n);
    ref_dequant(t, q, want, n);
    int bad_exact = 0;
    for (size_t i = 0; i < n; i++)
        bad_exact += (double)back[i] != want[i];
    CHECK(bad_exact == 0);
    for (size_t i = 64; i < 96; i++)
        CHECK(back[i] == 0);
    mvm_k_prepare_act(t, x, act, n);
    ref_quant(MVM_W_Q8_0, x, ref, n);
    CHECK(memcmp(act, ref, n / 32 * 34) == 0);
    free(want), free(act), free(ref);
}

/* IQ4_NL: mkmodel's quantizer maps each block's value of largest magnitude to the table's
 * -127 and every value to its nearest entry, so a value is off by at most half the widest
 * gap of the table or, at the top of the other side, 127 - 113: 14 steps of d. */
static void test_quantize_iq4_nl(void)
{
    const size_t n = 32 * 40;
    float *x = malloc(n * sizeof *x), *back = malloc(n * sizeof *back);
    uint8_t *q = malloc(n);
    for (size_t i = 0; i < n; i++)
        x[i] = frand() * ldexpf(1.0f, (int)(i / 32 % 5) - 2);
    memset(x + 64, 0, 32 * sizeof *x); /* an all-zero block */
    check_table_type(MVM_W_IQ4_NL, x, n, q, back);
    int bad_close = 0;
    for (size_t i = 0; i < n; i++)
        bad_close += fabs(back[i] - x[i]) > 14.01 * fabs(ref_h2f(le16(q + i / 32 * 18))) + 1e-9;
    CHECK(bad_close == 0);
    free(x), free(back), free(q);
}

/* mvm_k_iq4_nearest against the rule over all 16 entries it stands for, written out here
 * (the first at the least F32 distance): the midpoints and the entries and four F32 steps
 * either side of each, a sweep of [-1100, 1100] by 1/64, 100,000 random values of every
 * scale, zeros, subnormals, infinities and NaN. Its window of three entries absorbs one
 * wrong midpoint; midpoints all 0 fail it. */
static int iq4_nearest_differs(float v)
{
    int best = 0;
    for (int k = 1; k < 16; k++)
        if (fabsf(v - (float)mvm_k_table(MVM_W_IQ4_NL, k)) <
            fabsf(v - (float)mvm_k_table(MVM_W_IQ4_NL, best)))
            best = k;
    return mvm_k_iq4_nearest(v) != best;
}

static void test_iq4_nearest(void)
{
    int differs = 0;
    for (int k = 0; k < 16; k++) {
        const float e = (float)mvm_k_table(MVM_W_IQ4_NL, k);
        const float m = k < 15 ? (e + (float)mvm_k_table(MVM_W_IQ4_NL, k + 1)) / 2 : e;
        for (int s = 0; s < 2; s++) {
            float a = s ? m : e, b = a;
            differs += iq4_nearest_differs(a);
            for (int i = 0; i < 4; i++) {
                a = nextafterf(a, -INFINITY), b = nextafterf(b, INFINITY);
                differs += iq4_nearest_differs(a) + iq4_nearest_differs(b);
            }
        }
    }
    for (float x = -1100.0f; x <= 1100.0f; x += 1.0f / 64)
        differs += iq4_nearest_differs(x);
    const float special[] = {0.0f, -0.0f, 1e-40f, -1e-40f, 1023.99f, 1024.0f, -1024.0f, 3e38f,
                             -3e38f, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        differs += iq4_nearest_differs(special[i]);
    for (int i = 0; i < 100000; i++)
        differs += iq4_nearest_differs(frand() * ldexpf(1.0f, i % 24 - 6));
    CHECK(differs == 0);
}

/* IQ4_XS: mkmodel's quantizer gives each sub-block IQ4_NL's ideal scale (its value of largest
 * magnitude onto the table's -127) rounded to a 6-bit code of the super-block's d, which maps
 * the largest ideal scale onto the code -32. With dl = d·(code) the sub-block's step, a value
 * within the table's range (|x / dl| <= 113) is off by at most half its widest gap, 12 dl;
 * beyond it, by |x| - 113 dl at most. The codes: -32 for the sub-block whose ideal scale is
 * the super-block's largest, and every code within half a step of d of the ideal scale
 * (unless clamped at 31). Also the dequantization against the reference and the Q8_K
 * activations, bytes for bytes. */
static void test_quantize_iq4_xs(void)
{
    const size_t n = 256 * 10;
    float *x = malloc(n * sizeof *x), *back = malloc(n * sizeof *back);
    double *want = malloc(n * sizeof *want);
    uint8_t *q = malloc(n), *act = malloc(n / 256 * 292), *ref = malloc(n / 256 * 292);
    for (size_t i = 0; i < n; i++) /* sub-blocks of ranges 1/8 .. 8, some of one sign */
        x[i] = frand() * ldexpf(1.0f, (int)(i / 32 % 7) - 3) + (i / 32 % 5 == 2 ? 2.0f : 0);
    memset(x + 512, 0, 256 * sizeof *x); /* an all-zero super-block */
    memset(x + 800, 0, 32 * sizeof *x);  /* and an all-zero sub-block */
    mvm_k_quantize(MVM_W_IQ4_XS, x, q, n);
    mvm_k_dequantize(MVM_W_IQ4_XS, q, back, n);
    ref_dequant(MVM_W_IQ4_XS, q, want, n);
    int bad_exact = 0, bad_close = 0, bad_code = 0;
    for (size_t sb = 0; sb < n / 256; sb++) {
        const uint8_t *b = q + 136 * sb;
        const double d = ref_h2f(le16(b));
        double ideal[8], top = 0;
        for (int i = 0; i < 8; i++) {
            double amax = 0, max = 0;
            for (size_t l = 0; l < 32; l++) {
                const double v = x[256 * sb + 32 * i + l];
                if (fabs(v) > amax)
                    amax = fabs(v), max = v;
            }
            ideal[i] = max / -127;
            top = fabs(ideal[i]) > fabs(top) ? ideal[i] : top;
        }
        for (int i = 0; i < 8; i++) {
            const int code = (int)((b[4 + i / 2] >> (4 * (i % 2)) & 15) |
                                   (le16(b + 2) >> (2 * i) & 3) << 4) - 32;
            const double dl = d * code;
            if (ideal[i] == top && top != 0)
                bad_code += code != -32;
            else if (code < 31)
                bad_code += fabs(dl - ideal[i]) > fabs(d) * 0.5001 + 1e-12;
            for (size_t l = 0; l < 32; l++) {
                const size_t e = 256 * sb + 32 * i + l;
                const double v = fabs(x[e]), tol = fmax(12 * fabs(dl), v - 113 * fabs(dl));
                bad_close += fabs(back[e] - x[e]) > tol * 1.0001 + 1e-12;
                bad_exact += (double)back[e] != want[e];
            }
        }
    }
    CHECK(bad_exact == 0 && bad_close == 0 && bad_code == 0);
    if (bad_exact || bad_close || bad_code)
        fprintf(stderr, "  iq4_xs: %d inexact, %d off, %d codes wrong\n", bad_exact, bad_close,
                bad_code);
    for (size_t i = 512; i < 768; i++)
        CHECK(back[i] == 0);
    for (size_t i = 800; i < 832; i++)
        CHECK(back[i] == 0);
    mvm_k_prepare_act(MVM_W_IQ4_XS, x, act, n);
    for (size_t b = 0; b < n / 256; b++)
        ref_q8_K(x + 256 * b, ref + 292 * b);
    CHECK(memcmp(act, ref, n / 256 * 292) == 0);
    free(x), free(back), free(want), free(q), free(act), free(ref);
}

/* The lattice-grid types: mkmodel's quantizer has no outside definition (llama.cpp's needs
 * an importance matrix), so its output is checked for what any must give: the kernel's
 * dequantization equal to the reference decoder's (ref_iq_elem) exactly, zeros kept zero,
 * every sign x's where the type stores all 8 (and all but at most one of a group of 8 where
 * it stores 7, the eighth being parity), and a relative RMS error within what a grid of so
 * few points allows, as this plain quantizer reaches it: measured on these bell-shaped values
 * 0.16 (IQ3_S), 0.21 (IQ3_XXS), 0.31 - 0.41 (IQ2), 0.51 - 0.61 (IQ1); a wrong sign, scale or
 * index costs far more (a flipped sign alone doubles that element's error). */
static void test_quantize_iq(void)
{
    const size_t n = 256 * 16;
    static const double max_rms[] = {[MVM_W_IQ2_XXS] = 0.5, [MVM_W_IQ2_XS] = 0.5,
                                     [MVM_W_IQ2_S] = 0.5,   [MVM_W_IQ3_XXS] = 0.3,
                                     [MVM_W_IQ3_S] = 0.3,   [MVM_W_IQ1_S] = 0.7,
                                     [MVM_W_IQ1_M] = 0.7};
    float *x = malloc(n * sizeof *x), *back = malloc(n * sizeof *back);
    double *want = malloc(n * sizeof *want);
    uint8_t *q = malloc(n);
    for (int ti = MVM_W_IQ2_XXS; ti <= MVM_W_IQ1_M; ti++) {
        const enum mvm_wtype t = (enum mvm_wtype)ti;
        for (size_t i = 0; i < n; i++) /* sums of uniforms: bell-shaped, ranges 1/8 .. 8 */
            x[i] = (frand() + frand() + frand()) * ldexpf(1.0f, (int)(i / 256 % 7) - 3);
        memset(x + 512, 0, 256 * sizeof *x); /* an all-zero super-block */
        memset(q, 0xA5, n);
        mvm_k_quantize(t, x, q, n);
        mvm_k_dequantize(t, q, back, n);
        ref_dequant(t, q, want, n);
        int inexact = 0, sign_bad = 0;
        double err = 0, norm = 0;
        for (size_t i = 0; i < n; i++) {
            inexact += (double)back[i] != want[i];
            err += (back[i] - x[i]) * (double)(back[i] - x[i]);
            norm += x[i] * (double)x[i];
        }
        for (size_t g = 0; g < n && t != MVM_W_IQ1_S && t != MVM_W_IQ1_M; g += 8) {
            int wrong = 0;
            for (size_t i = g; i < g + 8; i++)
                wrong += x[i] != 0 && (back[i] < 0) != (x[i] < 0);
            sign_bad += wrong > (t == MVM_W_IQ2_S || t == MVM_W_IQ3_S ? 0 : 1);
        }
        const double rms = sqrt(err / norm);
        CHECK(inexact == 0 && sign_bad == 0 && rms < max_rms[t]);
        if (inexact || sign_bad || rms >= max_rms[t])
            fprintf(stderr, "  %s: %d inexact, %d groups with wrong signs, rms error %.3f\n",
                    tname(t), inexact, sign_bad, rms);
        for (size_t i = 512; i < 768; i++)
            CHECK(back[i] == 0);
    }
    free(x), free(back), free(want), free(q);
}

/* MXFP4: ggml's quantize_row_mxfp4_ref (the OCP MX recipe) takes the scale 2^(floor(log2
 * amax) - 2), so the block's largest magnitude is 4..8 scales, and values beyond the
 * table's 6 are clipped to it. In units u of the half scale 2^(e - 128) that the table's
 * doubled values count: a value up to 12 u is off by at most half the widest gap (8 to
 * 12), 2 u, one beyond by its distance to 12 u. */
static void test_quantize_mxfp4(void)
{
    const size_t n = 32 * 40;
    float *x = malloc(n * sizeof *x), *back = malloc(n * sizeof *back);
    uint8_t *q = malloc(n);
    for (size_t i = 0; i < n; i++)
        x[i] = frand() * ldexpf(1.0f, (int)(i / 32 % 9) - 4);
    memset(x + 64, 0, 32 * sizeof *x); /* an all-zero block */
    x[200] = 6.0f, x[201] = -1.5f;     /* a block whose top value the table holds exactly */
    check_table_type(MVM_W_MXFP4, x, n, q, back);
    int bad_close = 0;
    for (size_t b = 0; b < n / 32; b++) {
        double amax = 0;
        for (size_t i = 32 * b; i < 32 * b + 32; i++)
            amax = fmax(amax, fabs(x[i]));
        const double u = amax > 0 ? ldexp(1.0, (int)floor(log2(amax)) - 3) : 0;
        CHECK(q[17 * b] == (amax > 0 ? (int)floor(log2(amax)) - 2 + 127 : 0));
        for (size_t i = 32 * b; i < 32 * b + 32; i++) {
            const double tol = fabs(x[i]) > 12 * u ? fabs(x[i]) - 12 * u : 2 * u;
            bad_close += fabs(back[i] - x[i]) > tol * 1.0001;
        }
    }
    CHECK(bad_close == 0);
    CHECK(back[200] == 6.0f && back[201] == -1.5f);
    free(x), free(back), free(q);
}

/* ---- matrix products -------------------------------------------------------------------- */

/* A random [rows x n] weight of type t, its dequantized doubles, and a prepared activation
 * with its doubles. */
typedef struct {
    enum mvm_wtype t;
    size_t rows, n, row_bytes;
    uint8_t *w, *act;
    double *wd, *xd;
} problem;

static problem make_problem(enum mvm_wtype t, size_t rows, size_t n)
{
    problem p = {t, rows, n, mvm_k_row_bytes(t, n), NULL, NULL, NULL, NULL};
    float *row = malloc(n * sizeof *row);
    p.w = malloc(rows * p.row_bytes);
    p.wd = malloc(rows * n * sizeof *p.wd);
    for (size_t r = 0; r < rows; r++) {
        fill(row, n, 1.0f);
        mvm_k_quantize(t, row, p.w + r * p.row_bytes, n);
        if (t == MVM_W_Q8_0) /* a file may hold -128, which ggml's rounding never writes */
            p.w[r * p.row_bytes + 2 + r % 32] = 0x80;
        ref_dequant(t, p.w + r * p.row_bytes, p.wd + r * n, n);
    }
    fill(row, n, 2.0f);
    p.act = malloc(mvm_k_act_bytes(t, n));
    p.xd = malloc(n * sizeof *p.xd);
    mvm_k_prepare_act(t, row, p.act, n);
    ref_act(t, row, p.xd, n);
    free(row);
    return p;
}

static void free_problem(problem *p)
{
    free(p->w), free(p->act), free(p->wd), free(p->xd);
}

/* y[r] for r in [r0, r1) against the double reference, NaN elsewhere. */
static int check_rows(const problem *p, const float *y, size_t r0, size_t r1, double tol)
{
    int bad = 0;
    for (size_t r = 0; r < p->rows; r++) {
        if (r < r0 || r >= r1) {
            bad += !isnan(y[r]);
            continue;
        }
        double want = 0, terms = 0;
        for (size_t i = 0; i < p->n; i++) {
            want += p->wd[r * p->n + i] * p->xd[i];
            terms += fabs(p->wd[r * p->n + i] * p->xd[i]);
        }
        bad += !close_to(y[r], want, terms, tol);
    }
    return bad;
}

static void test_matvec(void)
{
    static const size_t float_n[] = {1, 7, 8, 15, 17, 31, 33, 63, 65, 100, 1023, 4096, 4103};
    static const size_t q_n[] = {32, 64, 96, 256, 288, 2080, 4096};
    static const size_t k_n[] = {256, 512, 2304, 4096};
    const size_t rows = 13;
    float y[13];
    for (int t = 0; t < MVM_W_COUNT; t++) {
        const enum mvm_wtype wt = (enum mvm_wtype)t;
        const size_t *ns = is_k(wt) ? k_n : is_q(wt) ? q_n : float_n;
        const size_t count = is_k(wt)   ? sizeof k_n / sizeof *k_n
                             : is_q(wt) ? sizeof q_n / sizeof *q_n
                                        : sizeof float_n / sizeof *float_n;
        for (size_t k = 0; k < count; k++) {
            problem p = make_problem((enum mvm_wtype)t, rows, ns[k]);
            const size_t ranges[][2] = {{0, rows}, {2, 11}, {5, 5}, {12, 13}};
            for (size_t r = 0; r < 4; r++) {
                for (size_t i = 0; i < rows; i++)
                    y[i] = NAN;
                mvm_k_matvec(p.t, p.w, p.row_bytes, p.n, p.act, y, ranges[r][0], ranges[r][1]);
                const int bad = check_rows(&p, y, ranges[r][0], ranges[r][1], 1e-5);
                CHECK(bad == 0);
                if (bad)
                    fprintf(stderr, "  %s n %zu rows [%zu, %zu): %d bad\n", tname(t), ns[k],
                            ranges[r][0], ranges[r][1], bad);
            }
            free_problem(&p);
        }
    }
}

/* The scalar level under test on a CPU with a SIMD level: its kernels take the tokens one by
 * one, so its large counts check only the code above the kernels, which the SIMD levels
 * check as well (docs/perf/tests.md: its share of test_kernels under ASan). */
static int scalar_beside_simd(void)
{
    return mvm_k_simd_current() == MVM_SIMD_SCALAR && mvm_k_simd_detect() != MVM_SIMD_SCALAR;
}

/* matmul equals matvec token by token, bitwise, and leaves the stride gaps alone, for every
 * count of tokens the multi-token kernels take (1..MVM_K_NT) and the remainders after them
 * (the multi-row kernels' blocks of 8 rows by 16 tokens, the K-quants' 4 by 32, and
 * gemm_k_wide's rows unpacked once for up to 128 tokens, cut short by 7 rows and 5, 7, 9,
 * 16, 17, 33, 50, 70, 130 tokens); the rows are long enough for the Q
 * kernels' 8-block steps and their tails (9 blocks), and the K types' 17
 * super-blocks for gemm_avx512vnni.c's pieces of 8 and the one after them; 20 tokens of
 * 4096 floats exceed the 256 KiB token tile, so the tiling is crossed too. The K types have
 * 37 rows besides (35 computed): gemm_rows_avx512vnni.c's blocks of 16 rows, two whole and
 * one cut short, and its prefetches across them. */
static void test_matmul(void)
{
    static const size_t counts[] = {1, 2, 3, 4, 5, 7, 9, 16, 17, 33, 50, 70, 130};
    /* the scalar level has no multi-row kernel: past 9 its counts check only matmul.c's
     * tiling of the tokens, which the SIMD levels check too (as test_expert_batch's few) */
    const int few = scalar_beside_simd();
    for (int tl = 0; tl < 3 * MVM_W_COUNT; tl++) {
        /* the Q types twice: 9 blocks (a step and a tail), and 16 (whole steps: the Q8_0
         * kernel's split groups of up to 8 tokens) */
        const int t = tl % MVM_W_COUNT;
        const int whole = tl >= MVM_W_COUNT && tl < 2 * MVM_W_COUNT, tall = tl >= 2 * MVM_W_COUNT;
        if (whole && (t == MVM_W_F32 || t == MVM_W_F16 || is_k((enum mvm_wtype)t)))
            continue;
        if (tall && !is_k((enum mvm_wtype)t))
            continue;
        const size_t rows = tall ? 37 : 9, r0 = 1, r1 = rows - 1;
        const size_t n = t == MVM_W_F32 ? 4096 : is_k((enum mvm_wtype)t) ? 17 * 256
                                               : whole                  ? 512
                                                                        : 288;
        problem p = make_problem((enum mvm_wtype)t, rows, n);
        for (size_t c = 0; c < sizeof counts / sizeof *counts + (t == MVM_W_F32); c++) {
            const size_t n_tok = c < sizeof counts / sizeof *counts ? counts[c] : 20;
            if (few && n_tok > 9)
                continue;
            const size_t ab = mvm_k_act_bytes(p.t, n), act_stride = ab + 8, y_stride = rows + 3;
            uint8_t *acts = malloc(n_tok * act_stride);
            float *x = malloc(n * sizeof *x), *y = malloc(n_tok * y_stride * sizeof *y), yv[37];
            for (size_t i = 0; i < n_tok; i++) {
                fill(x, n, 1.0f);
                mvm_k_prepare_act(p.t, x, acts + i * act_stride, n);
            }
            /* matmul, then (where the level has one) its multi-row kernel on all the tokens
             * at once, past matmul's tiling of them: gemm_k_wide's 128 at a time */
            const mvm_k_gemm_fn gemm = mvm_k_gemm(p.t, n_tok);
            for (int direct = 0; direct < 1 + (gemm != NULL); direct++) {
                for (size_t i = 0; i < n_tok * y_stride; i++)
                    y[i] = NAN;
                if (direct)
                    gemm(p.w + r0 * p.row_bytes, p.row_bytes, r1 - r0, acts, act_stride, n_tok, n,
                         y + r0, y_stride, 0);
                else
                    mvm_k_matmul(p.t, p.w, p.row_bytes, n, acts, act_stride, n_tok, y, y_stride,
                                 r0, r1);
                int bad = 0;
                for (size_t i = 0; i < n_tok; i++) {
                    for (size_t r = 0; r < rows; r++)
                        yv[r] = NAN;
                    mvm_k_matvec(p.t, p.w, p.row_bytes, n, acts + i * act_stride, yv, r0, r1);
                    for (size_t r = 0; r < y_stride; r++) {
                        const float got = y[i * y_stride + r];
                        bad += r >= r0 && r < r1 ? memcmp(&got, &yv[r], sizeof got) != 0
                                                 : !isnan(got);
                    }
                }
                CHECK(bad == 0);
                if (bad)
                    fprintf(stderr, "  %s %s, %zu tokens: %d bad\n",
                            direct ? "level gemm" : "matmul", tname(t), n_tok, bad);
            }
            free(acts), free(x), free(y);
        }
        free_problem(&p);
    }
}

/* ---- the expert ------------------------------------------------------------------------- */

typedef struct {
    mvm_k_expert_fmt f;
    enum mvm_wtype t; /* f.gate_up: the activations' format */
    size_t n_embd, n_ff;
    uint8_t *packed;
    uint8_t *tiled;           /* the same, tiled, where this level has the tile kernels */
    double *gate, *up, *down; /* dequantized, row-major as llama.cpp stores them */
    float *gate_b, *up_b;     /* MVM_GLU_OAI: the biases, wide enough to reach the clamps */
} expert;

/* The formats the expert tests run: every type alone, and the mixes llama.cpp's K recipes
 * write (a K-quant down under K or Q8_0 gate/up, and the reverse; the Q5_0 / Q5_1 down that
 * Q4_K / Q5_K fall back to when the expert's channels are not whole super-blocks, the
 * IQ4_NL of Q2_K, Q3_K and IQ4_XS); and
 * gpt-oss's unit over a float, an MXFP4 (its files') and a 256-channel K group; and two
 * lattice-grid types (the untiled super-block types expert.c takes 64 tokens at a time). */
static const mvm_k_expert_fmt expert_fmts[] = {
    {MVM_W_F32, MVM_W_F32},   {MVM_W_F16, MVM_W_F16},   {MVM_W_BF16, MVM_W_BF16},
    {MVM_W_Q8_0, MVM_W_Q8_0}, {MVM_W_Q4_0, MVM_W_Q4_0}, {MVM_W_Q4_K, MVM_W_Q4_K},
    {MVM_W_Q5_K, MVM_W_Q5_K}, {MVM_W_Q6_K, MVM_W_Q6_K}, {MVM_W_Q4_K, MVM_W_Q6_K},
    {MVM_W_Q8_0, MVM_W_Q5_K}, {MVM_W_Q6_K, MVM_W_Q8_0}, {MVM_W_Q4_1, MVM_W_Q4_1},
    {MVM_W_Q5_0, MVM_W_Q5_0}, {MVM_W_Q5_1, MVM_W_Q5_1}, {MVM_W_Q4_K, MVM_W_Q5_0},
    {MVM_W_Q5_K, MVM_W_Q5_1}, {MVM_W_IQ4_NL, MVM_W_IQ4_NL}, {MVM_W_Q2_K, MVM_W_Q2_K},
    {MVM_W_Q3_K, MVM_W_Q3_K}, {MVM_W_Q3_K, MVM_W_IQ4_NL}, {MVM_W_MXFP4, MVM_W_MXFP4},
    {MVM_W_IQ4_XS, MVM_W_IQ4_XS}, {MVM_W_IQ4_XS, MVM_W_IQ4_NL}, {MVM_W_Q8_0, MVM_W_IQ4_XS},
    {MVM_W_F32, MVM_W_F32, MVM_GLU_OAI}, {MVM_W_MXFP4, MVM_W_MXFP4, MVM_GLU_OAI},
    {MVM_W_Q4_K, MVM_W_Q6_K, MVM_GLU_OAI}, {MVM_W_IQ3_XXS, MVM_W_IQ2_XXS},
};

static expert make_expert(mvm_k_expert_fmt f, size_t n_embd, size_t n_ff)
{
    const enum mvm_wtype t = f.gate_up;
    expert e = {f, t, n_embd, n_ff, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    const size_t rb = mvm_k_row_bytes(t, n_embd), drb = mvm_k_row_bytes(f.down, n_ff);
    uint8_t *g = malloc(n_ff * rb), *u = malloc(n_ff * rb), *d = malloc(n_embd * drb);
    float *row = malloc((n_embd > n_ff ? n_embd : n_ff) * sizeof *row);
    e.gate = malloc(n_ff * n_embd * sizeof(double));
    e.up = malloc(n_ff * n_embd * sizeof(double));
    e.down = malloc(n_embd * n_ff * sizeof(double));
    for (size_t c = 0; c < n_ff; c++) {
        fill(row, n_embd, 0.2f);
        mvm_k_quantize(t, row, g + c * rb, n_embd);
        ref_dequant(t, g + c * rb, e.gate + c * n_embd, n_embd);
        fill(row, n_embd, 0.2f);
        mvm_k_quantize(t, row, u + c * rb, n_embd);
        ref_dequant(t, u + c * rb, e.up + c * n_embd, n_embd);
    }
    for (size_t j = 0; j < n_embd; j++) {
        fill(row, n_ff, 0.2f);
        mvm_k_quantize(f.down, row, d + j * drb, n_ff);
        ref_dequant(f.down, d + j * drb, e.down + j * n_ff, n_ff);
    }
    const size_t bytes =
        n_ff / mvm_k_expert_group_channels(f) * mvm_k_expert_group_bytes(f, n_embd);
    e.packed = malloc(bytes);
    mvm_k_expert_pack(f, g, u, d, n_embd, n_ff, e.packed);
    mvm_k_expert_fmt ft = f;
    ft.tiles = 1;
    if (mvm_k_expert_tiles_ok(ft)) {
        e.tiled = malloc(bytes);
        mvm_k_expert_pack(ft, g, u, d, n_embd, n_ff, e.tiled);
        CHECK(memcmp(e.tiled, e.packed, bytes) != 0); /* the same bytes, in another order */
    }
    if (f.glu == MVM_GLU_OAI) { /* g and u are about ±1: biases of ±9 clamp many */
        e.gate_b = malloc(n_ff * sizeof *e.gate_b), e.up_b = malloc(n_ff * sizeof *e.up_b);
        fill(e.gate_b, n_ff, 9.0f);
        fill(e.up_b, n_ff, 9.0f);
        mvm_k_expert_pack_bias(f, e.gate_b, e.up_b, n_embd, n_ff, e.packed);
        if (e.tiled)
            mvm_k_expert_pack_bias(ft, e.gate_b, e.up_b, n_embd, n_ff, e.tiled);
    }
    free(g), free(u), free(d), free(row);
    return e;
}

static void free_expert(expert *e)
{
    free(e->packed), free(e->tiled), free(e->gate), free(e->up), free(e->down), free(e->gate_b);
    free(e->up_b);
}

/* out0 + weight * FFN(x) over all groups, with the terms' magnitude for the tolerance and,
 * for a Q or K down, the slack for one Q8_0 / Q8_K step of one intermediate activation per
 * block: the kernel's float activations differ from these in the last bits, which can move
 * a value across a rounding boundary (about once in 10^5 values). */
static void ref_ffn(const expert *e, const float *x, float weight, const float *out0, double *want,
                    double *terms, double *slack)
{
    const size_t n_embd = e->n_embd, n_ff = e->n_ff;
    double *xd = malloc(n_embd * sizeof *xd), *h = malloc(n_ff * sizeof *h);
    ref_act(e->t, x, xd, n_embd);
    for (size_t c = 0; c < n_ff; c++) {
        double g = 0, u = 0;
        for (size_t i = 0; i < n_embd; i++) {
            g += e->gate[c * n_embd + i] * xd[i];
            u += e->up[c * n_embd + i] * xd[i];
        }
        if (e->gate_b) { /* gpt-oss: biased, g at most 7, u within ±7, (u + 1) */
            g = fmin(g + e->gate_b[c], 7.0), u = fmax(-7.0, fmin(u + e->up_b[c], 7.0));
            h[c] = g / (1 + exp(-1.702 * g)) * (u + 1) * weight;
        } else {
            h[c] = g / (1 + exp(-g)) * u * weight;
        }
    }
    double *step = calloc(n_ff / 32, sizeof *step); /* each 32 channels' activation step */
    if (is_q(e->f.down) || is_k(e->f.down)) { /* the intermediate activations quantized */
        const size_t nb = is_k(e->f.down) ? 256 : 32;
        float hf[256];
        uint8_t q[292];
        for (size_t c0 = 0; c0 < n_ff; c0 += nb) {
            for (size_t j = 0; j < nb; j++)
                hf[j] = (float)h[c0 + j];
            float d;
            if (nb == 256) {
                ref_q8_K(hf, q);
                ref_q8_K_dequant(q, h + c0);
                memcpy(&d, q, 4);
            } else {
                ref_quant_block(MVM_W_Q8_0, hf, q);
                ref_dequant(MVM_W_Q8_0, q, h + c0, 32);
                d = (float)ref_h2f(le16(q));
            }
            for (size_t j = 0; j < nb; j += 32)
                step[(c0 + j) / 32] = fabs(d);
        }
    }
    for (size_t j = 0; j < n_embd; j++) {
        want[j] = out0[j], terms[j] = fabs(out0[j]), slack[j] = 0;
        for (size_t c = 0; c < n_ff; c++) {
            want[j] += e->down[j * n_ff + c] * h[c];
            terms[j] += fabs(e->down[j * n_ff + c] * h[c]);
            slack[j] = fmax(slack[j], fabs(e->down[j * n_ff + c]) * step[c / 32]);
        }
    }
    free(xd), free(h), free(step);
}

/* Hidden sizes that are whole blocks of every type in f (with vector tails for float
 * types), and channel counts of 1 and 3 groups. */
static size_t expert_embd(mvm_k_expert_fmt f, int s)
{
    static const size_t float_embd[] = {100, 264}, q_embd[] = {64, 288}, k_embd[] = {256, 768};
    const size_t b = blk_of(f.gate_up) > blk_of(f.down) ? blk_of(f.gate_up) : blk_of(f.down);
    return (b == 256 ? k_embd : b == 32 ? q_embd : float_embd)[s % 2];
}

static void test_expert(void)
{
    for (size_t fi = 0; fi < sizeof expert_fmts / sizeof *expert_fmts; fi++) {
        const mvm_k_expert_fmt f = expert_fmts[fi];
        const size_t G = mvm_k_expert_group_channels(f);
        for (int s = 0; s < 4; s++) {
            const size_t n_embd = expert_embd(f, s);
            const size_t groups = s / 2 ? 3 : 1, n_ff = groups * G;
            expert e = make_expert(f, n_embd, n_ff);
            float *x = malloc(n_embd * sizeof *x), *out0 = malloc(n_embd * sizeof *out0);
            float *out = malloc(n_embd * sizeof *out), *split = malloc(n_embd * sizeof *split);
            double *want = malloc(n_embd * sizeof *want), *terms = malloc(n_embd * sizeof *terms);
            double *slack = malloc(n_embd * sizeof *slack);
            uint8_t *act = malloc(mvm_k_act_bytes(e.t, n_embd));
            fill(x, n_embd, 1.0f);
            fill(out0, n_embd, 0.1f);
            mvm_k_prepare_act(e.t, x, act, n_embd);
            ref_ffn(&e, x, 0.75f, out0, want, terms, slack);
            memcpy(out, out0, n_embd * sizeof *out);
            mvm_k_expert_ffn(f, e.packed, n_embd, act, 0.75f, out, 0, groups);
            int bad = 0;
            for (size_t j = 0; j < n_embd; j++)
                bad += fabs(out[j] - want[j]) > 1e-5 * terms[j] + slack[j];
            CHECK(bad == 0);
            if (bad)
                fprintf(stderr, "  %s/%s n_embd %zu n_ff %zu: %d bad\n", tname(f.gate_up),
                        tname(f.down), n_embd, n_ff, bad);
            /* groups [0, g) then [g, G) is the same sequence of additions as [0, G) */
            for (size_t g = 0; g <= groups; g++) {
                memcpy(split, out0, n_embd * sizeof *split);
                mvm_k_expert_ffn(f, e.packed, n_embd, act, 0.75f, split, 0, g);
                mvm_k_expert_ffn(f, e.packed, n_embd, act, 0.75f, split, g, groups);
                CHECK(memcmp(split, out, n_embd * sizeof *out) == 0);
            }
            free(x), free(out0), free(out), free(split), free(want), free(terms), free(slack);
            free(act);
            free_expert(&e);
        }
    }
}

/* The batch of n_tok tokens through e (expert_fmts[fi], groups groups of n_embd) equals one
 * call per token, bitwise. */
static void check_expert_batch(size_t fi, const expert *e, size_t n_embd, size_t groups,
                               size_t n_tok)
{
    const mvm_k_expert_fmt f = expert_fmts[fi];
    const size_t act_stride = mvm_k_act_bytes(e->t, n_embd) + 12, out_stride = n_embd + 5;
    uint8_t *acts = malloc(n_tok * act_stride);
    float *x = malloc(n_embd * sizeof *x), *weights = malloc(n_tok * sizeof *weights);
    float *out = malloc(n_tok * out_stride * sizeof *out);
    float *one = malloc(n_tok * out_stride * sizeof *one);
    for (size_t i = 0; i < n_tok; i++) {
        fill(x, n_embd, 1.0f);
        mvm_k_prepare_act(e->t, x, acts + i * act_stride, n_embd);
        weights[i] = 0.1f * (float)(i + 1);
    }
    fill(out, n_tok * out_stride, 0.1f);
    memcpy(one, out, n_tok * out_stride * sizeof *out);
    mvm_k_expert_ffn_batch(f, e->packed, n_embd, acts, act_stride, weights, n_tok, out,
                           out_stride, 0, groups);
    for (size_t i = 0; i < n_tok; i++)
        mvm_k_expert_ffn(f, e->packed, n_embd, acts + i * act_stride, weights[i],
                         one + i * out_stride, 0, groups);
    const int same = memcmp(out, one, n_tok * out_stride * sizeof *out) == 0;
    CHECK(same);
    if (!same)
        fprintf(stderr, "  expert batch: format %zu, %zu tokens differ\n", fi, n_tok);
    if (e->tiled) { /* tiled: the batch and each group range, bitwise the channel-major's */
        mvm_k_expert_fmt ft = f;
        ft.tiles = 1;
        fill(out, n_tok * out_stride, 0.1f);
        memcpy(one, out, n_tok * out_stride * sizeof *out);
        mvm_k_expert_ffn_batch(f, e->packed, n_embd, acts, act_stride, weights, n_tok, out,
                               out_stride, 0, groups);
        mvm_k_expert_ffn_batch(ft, e->tiled, n_embd, acts, act_stride, weights, n_tok, one,
                               out_stride, 0, 1);
        mvm_k_expert_ffn_batch(ft, e->tiled, n_embd, acts, act_stride, weights, n_tok, one,
                               out_stride, 1, groups);
        const int tiled_same = memcmp(out, one, n_tok * out_stride * sizeof *out) == 0;
        CHECK(tiled_same);
        if (!tiled_same)
            fprintf(stderr, "  expert batch, tiled: format %zu, %zu tokens differ\n", fi, n_tok);
    }
    free(acts), free(x), free(weights), free(out), free(one);
}

/* mvm_k_row_floats: at least n floats, whole cache lines and an odd number of them, so that
 * consecutive tokens' rows fall in different sets of the L1 cache whatever n is; at most a
 * line more than n's whole lines. */
static void test_row_floats(void)
{
    static const size_t ns[] = {1, 15, 16, 17, 1024, 2048, 2880, 4096, 7168};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        const size_t s = mvm_k_row_floats(ns[i]);
        CHECK(s >= ns[i] && s % 16 == 0 && (s / 16) % 2 == 1 && s < ns[i] + 32);
    }
}

/* 1..MVM_K_NT tokens (each count of the multi-token kernels), 11 (two full steps of them
 * and a remainder of 3; with the rows in the lanes, 8 + 2 + 1), 37 (expert.c's 32 tokens
 * at once, then 5: a tile cut short), 70 (the untiled K types' one pass, of up to 128) and
 * 150 (their two passes made even: 80 and 70, mvm_k_even_pass; those types only, at the
 * first size), at both of
 * expert_embd's sizes (the K types' gate and up rows of one super-block and of three, the
 * two kernels for few tokens). Where the level tiles the format, the tiled expert too, group
 * by group (each count of the tile kernel's token steps: 8, 4, 2, 1). The scalar level
 * takes the tokens one by one: past 11 its counts check only expert.c's passes, which the
 * SIMD levels check too, so it runs them only on a CPU without one (they were 31 of the
 * test's 44 s under ASan, docs/perf/tests.md). */
static void test_expert_batch(void)
{
    static const size_t counts[] = {1, 2, 3, 4, 11, 37, 70, 150};
    const size_t groups = 2;
    const int few = scalar_beside_simd();
    for (size_t fi = 0; fi < sizeof expert_fmts / sizeof *expert_fmts; fi++)
        for (int s = 0; s < 2; s++) {
            const mvm_k_expert_fmt f = expert_fmts[fi];
            const size_t n_embd = expert_embd(f, s);
            /* 150 only where it takes two passes: the untiled super-block types, once */
            const int wide = !f.tiles && (mvm_k_is_k(f.gate_up) || mvm_k_is_k(f.down)) && !s;
            expert e = make_expert(f, n_embd, groups * mvm_k_expert_group_channels(f));
            for (size_t c = 0; c < sizeof counts / sizeof *counts - !wide; c++)
                if (!few || counts[c] <= 11)
                    check_expert_batch(fi, &e, n_embd, groups, counts[c]);
            free_expert(&e);
        }
}

/* The tile kernels on an expert's group, bitwise the untiled kernels': its gate rows (y =
 * rows · tokens) against matvec token by token, its down slots (out += ...) against the
 * level's downn, at counts of tokens the tile kernels take in different ways (a pass of
 * tokens, whole and cut short; Q8_0's 9-block rows, a whole step of 8 and a block in lanes
 * of its 4-quant groups). test_expert_batch sees gate and up only through down's quantized
 * input, where an ulp rarely shows. */
static void test_expert_tiles(void)
{
    static const size_t counts[] = {1, 2, 3, 5, 8, 16, 17, 33};
    for (size_t fi = 0; fi < sizeof expert_fmts / sizeof *expert_fmts; fi++)
        for (int s = 0; s < 2; s++) {
            const mvm_k_expert_fmt f = expert_fmts[fi];
            const size_t n_embd = expert_embd(f, s), G = mvm_k_expert_group_channels(f);
            expert e = make_expert(f, n_embd, G);
            if (!e.tiled) {
                free_expert(&e);
                continue;
            }
            const size_t rb = mvm_k_row_bytes(f.gate_up, n_embd), slot = mvm_k_row_bytes(f.down, G);
            const size_t as = mvm_k_act_bytes(e.t, n_embd) + 4, ds = sizeof(mvm_block_q8_K);
            const size_t dn = mvm_k_is_k(f.down) ? MVM_QK_K : MVM_QBLOCK; /* G, quantized */
            for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
                const size_t nt = counts[c];
                uint8_t *acts = malloc(nt * as), *dacts = malloc(nt * ds);
                float *x = malloc(n_embd * sizeof *x), *y = malloc(nt * G * sizeof *y);
                float *yv = malloc(G * sizeof *yv), *out = malloc(2 * nt * n_embd * sizeof *out);
                for (size_t i = 0; i < nt; i++) {
                    fill(x, n_embd, 1.0f);
                    mvm_k_prepare_act(e.t, x, acts + i * as, n_embd);
                    fill(x, dn, 0.5f);
                    mvm_k_prepare_act(f.down, x, dacts + i * ds, dn);
                }
                for (size_t i = 0; i < nt * G; i++)
                    y[i] = NAN;
                mvm_k_kernels->tiles[f.gate_up](e.tiled, rb, G, acts, as, nt, n_embd, y, G, 0);
                int bad = 0;
                for (size_t i = 0; i < nt; i++) {
                    mvm_k_matvec(f.gate_up, e.packed, rb, n_embd, acts + i * as, yv, 0, G);
                    bad += memcmp(y + i * G, yv, G * sizeof *yv) != 0;
                }
                fill(out, nt * n_embd, 1.0f);
                memcpy(out + nt * n_embd, out, nt * n_embd * sizeof *out);
                mvm_k_kernels->tiles[f.down](e.tiled + 2 * G * rb, slot, n_embd, dacts, ds, nt, G,
                                             out, n_embd, 1);
                for (size_t i = 0; i < nt; i += MVM_K_NT)
                    mvm_k_kernels->downn[f.down](e.packed + 2 * G * rb, dacts + i * ds, ds,
                                                 nt - i < MVM_K_NT ? nt - i : MVM_K_NT,
                                                 out + (nt + i) * n_embd, n_embd, n_embd);
                const int down_same = memcmp(out, out + nt * n_embd, nt * n_embd * sizeof *out) == 0;
                CHECK(bad == 0 && down_same);
                if (bad || !down_same)
                    fprintf(stderr, "  expert tiles: %s/%s, n_embd %zu, %zu tokens: %d gate rows"
                            " differ, down %s\n", tname(f.gate_up), tname(f.down), n_embd, nt,
                            bad, down_same ? "same" : "differs");
                free(acts), free(dacts), free(x), free(y), free(yv), free(out);
            }
            free_expert(&e);
        }
}

/* ---- small ops -------------------------------------------------------------------------- */

static void test_rmsnorm(void)
{
    const size_t n = 37;
    float x[37], w[37], out[37], in_place[37];
    fill(x, n, 3.0f);
    fill(w, n, 1.0f);
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    const double scale = 1 / sqrt(ss / n + 1e-5);
    mvm_k_rmsnorm(out, x, w, n, 1e-5f);
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !close_to(out[i], x[i] * scale * w[i], fabs(x[i] * scale * w[i]), 1e-6);
    CHECK(bad == 0);
    memcpy(in_place, x, sizeof x);
    mvm_k_rmsnorm(in_place, in_place, w, n, 1e-5f);
    CHECK(memcmp(in_place, out, sizeof out) == 0);
    mvm_k_rmsnorm(out, x, NULL, n, 1e-5f);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !close_to(out[i], x[i] * scale, fabs(x[i] * scale), 1e-6);
    CHECK(bad == 0);
}

/* Hugging Face's YaRN inverse frequency of pair i (_compute_yarn_parameters), in double:
 * the blend is made on frequencies there, on angles in ggml, which is the same (linear). */
static double hf_yarn_inv_freq(size_t i, size_t n_rot, double base, double factor,
                               double orig_ctx)
{
    const double beta_fast = 32, beta_slow = 1;
#define CORR(b) ((double)n_rot * log(orig_ctx / ((b) * 2 * M_PI)) / (2 * log(base)))
    double low = fmax(0, floor(CORR(beta_fast)));
    double high = fmin((double)n_rot - 1, ceil(CORR(beta_slow)));
#undef CORR
    if (low == high)
        high += 0.001;
    const double ramp = fmin(1, fmax(0, ((double)i - low) / (high - low)));
    const double extrap = pow(base, -2.0 * (double)i / (double)n_rot);
    return extrap / factor * ramp + extrap * (1 - ramp);
}

static void test_rope(void)
{
    const size_t n_heads = 3, head_dim = 16;
    float x[48], orig[48];
    /* plain; linear x2 (freq_scale 1/2); YaRN x4 from a 4096-token context, whose ramp runs
     * from pair 1 to pair 3 of 4 (n_rot 8) or 2 to 6 of 8 (n_rot 16): every kind of pair */
    for (int scaling = 0; scaling < 3; scaling++)
        for (int neox = 0; neox < 2; neox++) {
            for (size_t n_rot = 8; n_rot <= 16; n_rot += 8) {
                mvm_rope r = {(uint32_t)n_rot, (uint32_t)neox, 10000.0f, 1.0f, 0.0f, 1.0f, 0, 0};
                double mscale = 1;
                if (scaling == 1)
                    r.freq_scale = 0.5f;
                if (scaling == 2) {
                    mvm_k_rope_yarn(&r, 4.0f, 4096, 32.0f, 1.0f, 1.0f, 1.0f);
                    mscale = 1 + 0.1 * log(4.0);
                }
                fill(orig, 48, 1.0f);
                memcpy(x, orig, sizeof x);
                mvm_k_rope(x, n_heads, head_dim, 0, &r);
                for (size_t k = 0; k < 48; k++) /* position 0: the identity, times mscale */
                    CHECK(fabs(x[k] - orig[k] * (k % head_dim < n_rot ? mscale : 1)) < 1e-6);
                const size_t pos = 37;
                memcpy(x, orig, sizeof x);
                mvm_k_rope(x, n_heads, head_dim, pos, &r);
                int bad = 0;
                for (size_t h = 0; h < n_heads; h++) {
                    const float *o = orig + h * head_dim, *y = x + h * head_dim;
                    for (size_t i = 0; i < n_rot / 2; i++) {
                        double f = pow(10000.0, -2.0 * (double)i / (double)n_rot);
                        f = scaling == 1   ? f / 2
                            : scaling == 2 ? hf_yarn_inv_freq(i, n_rot, 10000.0, 4.0, 4096.0)
                                           : f;
                        const double th = (double)pos * f, c = cos(th) * mscale,
                                     sn = sin(th) * mscale;
                        const size_t a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
                        bad += fabs(y[a] - (o[a] * c - o[b] * sn)) > 2e-5;
                        bad += fabs(y[b] - (o[a] * sn + o[b] * c)) > 2e-5;
                    }
                    for (size_t i = n_rot; i < head_dim; i++)
                        bad += y[i] != o[i];
                }
                CHECK(bad == 0);
            }
        }
    /* The YaRN ramp's ends (ggml_rope_yarn_corr_dims) for a 4096-token context, n_rot 64,
     * base 10000: floor(10.47) = 10 and ceil(22.51) = 23, DeepSeek-V2's rope. */
    mvm_rope r = {64, 0, 10000.0f, 1, 0, 1, 0, 0};
    mvm_k_rope_yarn(&r, 40.0f, 4096, 32.0f, 1.0f, 1.0f, 1.0f);
    CHECK(r.corr_lo == 10.0f && r.corr_hi == 23.0f);
    CHECK(fabs(r.freq_scale - 0.025) < 1e-9 && fabs(r.mscale - (1 + 0.1 * log(40.0))) < 1e-6);
}

static void test_softmax(void)
{
    float x[50];
    double e[50];
    fill(x, 50, 20.0f);
    x[3] = 1000.0f, x[4] = 1001.0f; /* no overflow: the max is subtracted */
    double sum = 0;
    for (int i = 0; i < 50; i++)
        sum += e[i] = exp((double)x[i] - 1001.0);
    mvm_k_softmax(x, 50);
    double got = 0;
    int bad = 0;
    for (int i = 0; i < 50; i++) {
        got += x[i];
        bad += !close_to(x[i], e[i] / sum, e[i] / sum, 1e-5);
    }
    CHECK(bad == 0);
    CHECK(fabs(got - 1) < 1e-6);
    float one = -3.0f;
    mvm_k_softmax(&one, 1);
    CHECK(one == 1.0f);
}

static int cmp_rank(const void *a, const void *b, const float *x)
{
    const int i = *(const int *)a, j = *(const int *)b;
    return x[i] != x[j] ? (x[i] > x[j] ? -1 : 1) : (i > j) - (i < j);
}

static void test_topk(void)
{
    const float x[] = {1, 3, 3, 2, 3, 0};
    int idx[6];
    mvm_k_topk(x, 6, 4, idx);
    CHECK(idx[0] == 1 && idx[1] == 2 && idx[2] == 4 && idx[3] == 3);
    mvm_k_topk(x, 6, 6, idx);
    CHECK(idx[0] == 1 && idx[1] == 2 && idx[2] == 4 && idx[3] == 3 && idx[4] == 0 && idx[5] == 5);
    mvm_k_topk(x, 6, 1, idx);
    CHECK(idx[0] == 1);
    /* random with many ties, against a sort by (value desc, index asc): sizes on both
     * sides of the rounds' group sizes (whole groups, a last group short by one or all but
     * one, a single group) and of the rounds' limit */
    static float r[1100];
    static int want[1100];
    int got[41];
    const size_t sizes[] = {1, 2, 5, 16, 17, 63, 64, 65, 128, 129, 256, 384, 1000, 1024, 1100};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const size_t n = sizes[si];
        for (int round = 0; round < 12; round++) {
            for (size_t i = 0; i < n; i++)
                r[i] = (float)(rand32() % 20), want[i] = (int)i;
            for (size_t i = 1; i < n; i++) /* insertion sort with the ranking */
                for (size_t j = i; j > 0 && cmp_rank(&want[j - 1], &want[j], r) > 0; j--) {
                    const int tmp = want[j];
                    want[j] = want[j - 1], want[j - 1] = tmp;
                }
            /* k up to 16: a router's sizes (rounds of maxima); past it, the one pass */
            size_t k = round < 9 ? 1 + rand32() % 16 : 17 + rand32() % 24;
            k = k < n ? k : n;
            memset(got, 0xFF, sizeof got);
            mvm_k_topk(r, n, k, got);
            CHECK(memcmp(got, want, k * sizeof *got) == 0);
            CHECK(got[k] == -1); /* nothing written past k */
        }
    }
    /* +0 and -0 tie as floats do (the lower index first), NaN ranks as -inf, and k past the
     * finite keys still takes the rest in index order: on both ways, the second in 1,100
     * keys (more than the rounds take), the rest -inf */
    static float z[1100];
    const float head[6] = {-0.0f, 0.0f, NAN, -INFINITY, 0.0f, -0.0f};
    const int order[6] = {0, 1, 4, 5, 2, 3};
    for (size_t n = 6; n <= 1100; n += 1094) {
        for (size_t i = 0; i < n; i++)
            z[i] = i < 6 ? head[i] : -INFINITY;
        memset(got, 0xFF, sizeof got);
        mvm_k_topk(z, n, 6, got);
        CHECK(memcmp(got, order, sizeof order) == 0);
    }
}

/* The level's SwiGLU against a double reference: random gates of both signs out to where the
 * exp overflows (ops.c's expf, the AVX2 level's polynomial: within 2 ulp of it, 1e-6 here),
 * every length from 1 to 40 (the vector loop's tails), the outputs written over the gates;
 * each element the same wherever it sits in x. */
static void test_swiglu(void)
{
    enum { N = 40 };
    float x[N], y[N], orig[N];
    static const float edges[] = {0.0f, -0.0f, 1e-20f, -1e-20f, 87.5f, -87.5f, 88.5f, -88.5f,
                                  100.0f, -100.0f, 20.0f, -20.0f};
    for (size_t n = 1; n <= N; n++) {
        fill(orig, n, 12.0f);
        fill(y, n, 3.0f);
        if (n % 3 == 0) /* every third length: the edges in place of random gates */
            for (size_t i = 0; i < n; i++)
                orig[i] = edges[i % (sizeof edges / sizeof *edges)];
        memcpy(x, orig, n * sizeof *x);
        mvm_k_swiglu(x, y, n);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            const double g = orig[i], want = g / (1 + exp(-g)) * y[i];
            bad += !close_to(x[i], want, fabs(want), 1e-6);
            float one = orig[i];
            mvm_k_swiglu(&one, &y[i], 1);
            bad += memcmp(&one, &x[i], sizeof one) != 0;
        }
        CHECK(bad == 0);
        if (bad)
            fprintf(stderr, "  swiglu of %zu: %d bad\n", n, bad);
    }
}

/* Random keys and values (n each, keys `kscale` wide) stored in kc and vc as the cache's
 * type kv, and in k and v the F32 values those hold, which the references read. */
static void random_cache(enum mvm_wtype kv, float *k, float *v, void *kc, void *vc, size_t n,
                         float kscale)
{
    fill(k, n, kscale);
    fill(v, n, 1.0f);
    mvm_k_quantize(kv, k, kc, n);
    mvm_k_quantize(kv, v, vc, n);
    mvm_k_dequantize(kv, kc, k, n);
    mvm_k_dequantize(kv, vc, v, n);
}

/* A group of 3 heads over shared keys and values, against a double reference per head:
 * with and without sink logits (gpt-oss), which join the softmax's denominator only; over an
 * F32 and an F16 cache (the reference reads the F16 elements as they are stored). The group
 * gives each head bit for bit what a call for that head alone gives. */
static void test_attn_heads(void)
{
    enum { NQ = 3 };
    static const size_t n_pos_s[] = {1, 5, 37}, dims[] = {64, 20};
    static const enum mvm_wtype types[] = {MVM_W_F32, MVM_W_F16};
    for (size_t a = 0; a < 3; a++) {
        for (size_t b = 0; b < 8; b++) {
            const size_t n_pos = n_pos_s[a], hd = dims[b % 2], stride = 3 * hd + 1;
            const float sinks[NQ] = {0.75f - (float)b, -INFINITY, 1.5f};
            const float *sk = b % 4 < 2 ? NULL : sinks;
            const enum mvm_wtype kv = types[b / 4];
            const size_t n = n_pos * stride, es = kv == MVM_W_F16 ? 2 : 4;
            float *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v);
            uint8_t *kc = malloc(n * es), *vc = malloc(n * es);
            float q[NQ * 64], out[NQ * 64], one[64], scratch[NQ * 37];
            random_cache(kv, k, v, kc, vc, n, 1.0f);
            fill(q, NQ * hd, 1.0f);
            const float scale = 1.0f / sqrtf((float)hd);
            fill(out, NQ * hd, 1e3f); /* poisoned: every element must be written */
            mvm_k_attn_heads(q, NQ, kv, kc, vc, stride, n_pos, hd, scale, sk, scratch, out);
            int bad = 0, differs = 0;
            for (size_t j = 0; j < NQ; j++) {
                const float sink = sk ? sk[j] : -INFINITY;
                double s[37], want[64] = {0}, terms[64] = {0}, max = sink, sum;
                for (size_t p = 0; p < n_pos; p++) {
                    s[p] = 0;
                    for (size_t d = 0; d < hd; d++)
                        s[p] += (double)q[j * hd + d] * k[p * stride + d];
                    s[p] *= scale;
                    max = fmax(max, s[p]);
                }
                sum = exp(sink - max);
                for (size_t p = 0; p < n_pos; p++)
                    sum += s[p] = exp(s[p] - max);
                for (size_t p = 0; p < n_pos; p++)
                    for (size_t d = 0; d < hd; d++) {
                        want[d] += s[p] / sum * v[p * stride + d];
                        terms[d] += fabs(s[p] / sum * v[p * stride + d]);
                    }
                for (size_t d = 0; d < hd; d++)
                    bad += !close_to(out[j * hd + d], want[d], terms[d], 1e-5);
                mvm_k_attn_heads(q + j * hd, 1, kv, kc, vc, stride, n_pos, hd, scale,
                                 sk ? sk + j : NULL, scratch, one);
                differs += memcmp(one, out + j * hd, hd * sizeof *one) != 0;
            }
            CHECK(bad == 0 && differs == 0);
            free(k), free(v), free(kc), free(vc);
        }
    }
}

/* The softmax's exponentials across their range: one head whose scores fall from 0 to -82
 * (e^-82 is near the smallest normal float) over one-hot values, so that the output is the
 * softmax itself, against exp in double, each within 1e-6 of itself (a few ulp; the AVX-512
 * level computes e^x with its own polynomial, attn_avx512.c). */
static void test_attn_softmax(void)
{
    enum { N = 64 };
    float k[N * N], v[N * N], q[N], out[N], scratch[N];
    memset(k, 0, sizeof k);
    memset(v, 0, sizeof v);
    memset(q, 0, sizeof q);
    q[0] = 1.0f;
    for (size_t p = 0; p < N; p++) {
        k[p * N] = -1.3f * (float)p;
        v[p * N + p] = 1.0f;
    }
    fill(out, N, 1e3f); /* poisoned: every element must be written */
    mvm_k_attn_heads(q, 1, MVM_W_F32, k, v, N, N, N, 1.0f, NULL, scratch, out);
    double sum = 0;
    for (size_t p = 0; p < N; p++)
        sum += exp((double)k[p * N]);
    int bad = 0;
    for (size_t p = 0; p < N; p++) {
        const double want = exp((double)k[p * N]) / sum;
        bad += !close_to(out[p], want, want, 1e-6);
    }
    CHECK(bad == 0);
}

/* The softmax step between the scores and the values (mvm_k_attn_weights, the level's
 * softmax where it has one) against a double reference: two queries of 40 rows, every count
 * of positions from 1 to 40 (the vector loops' tails; the rows past a query's count are
 * poisoned and must stay so), without a sink and with one; the log-normaliser; the outputs
 * zeroed. */
static void test_attn_weights(void)
{
    enum { ROWS = 40, HD = 8 };
    for (uint32_t n = 1; n <= ROWS; n++)
        for (int with_sink = 0; with_sink < 2; with_sink++) {
            const float sinks[2] = {0.7f, -2.0f};
            const uint32_t n_pos[2] = {n, (n + 1) / 2};
            float x[2 * ROWS], scores[2 * ROWS], out[2 * HD], lse[2];
            fill(scores, 2 * ROWS, 8.0f);
            memcpy(x, scores, sizeof x);
            fill(out, 2 * HD, 1e3f);
            mvm_k_attn_weights(x, ROWS, 2, 1, n_pos, with_sink ? sinks : NULL, lse, 1, out, HD,
                               HD);
            int bad = 0;
            for (int i = 0; i < 2; i++) {
                const float *sc = scores + i * ROWS;
                const double sink = with_sink ? sinks[0] : -INFINITY;
                double m = sink, sum = 0;
                for (uint32_t p = 0; p < n_pos[i]; p++)
                    m = fmax(m, sc[p]);
                for (uint32_t p = 0; p < n_pos[i]; p++)
                    sum += exp(sc[p] - m);
                sum += exp(sink - m);
                for (uint32_t p = 0; p < ROWS; p++) {
                    const double want = exp(sc[p] - m) / sum;
                    bad += p < n_pos[i] ? !close_to(x[i * ROWS + p], want, want, 2e-6)
                                        : x[i * ROWS + p] != sc[p];
                }
                bad += !close_to(lse[i], m + log(sum), fabs(m + log(sum)), 1e-6);
                for (int d = 0; d < HD; d++)
                    bad += out[i * HD + d] != 0;
            }
            CHECK(bad == 0);
            if (bad)
                fprintf(stderr, "  attention weights of %u positions, sink %d: %d bad\n", n,
                        with_sink, bad);
        }
}

/* A prompt's 6 tokens at positions 34..39 (and, in a second call, one token alone) with 2
 * heads each over shared rows of an F16 cache, with sinks: each query bit for bit what
 * mvm_k_attn_heads gives it alone over its own first positions (the reference above); the
 * rows beyond a token's position are poisoned, so reading them shows. 12 queries over 40
 * rows: more than attn_avx512.c's 8 queries summed together and its 16-row tiles. */
static void test_attn_block(void)
{
    enum { NT = 6, NQ = 2, HD = 24, ROWS = 40, STRIDE = NQ * HD + 3 };
    const uint32_t n_pos[NT] = {35, 36, 37, 38, 39, 40};
    const float sinks[NQ] = {0.5f, -1.0f};
    float k[ROWS * STRIDE], v[ROWS * STRIDE], q[NT * NQ * HD], out[NT * NQ * HD], one[NQ * HD];
    float scratch[NT * NQ * ROWS];
    uint16_t kc[ROWS * STRIDE], vc[ROWS * STRIDE];
    fill(k, ROWS * STRIDE, 1.0f);
    fill(v, ROWS * STRIDE, 1.0f);
    fill(q, NT * NQ * HD, 1.0f);
    mvm_k_quantize(MVM_W_F16, k, kc, ROWS * STRIDE);
    mvm_k_quantize(MVM_W_F16, v, vc, ROWS * STRIDE);
    for (int shared = 0; shared < 2; shared++) {
        const size_t nt = shared ? NT : 1;
        fill(out, NT * NQ * HD, 1e3f); /* poisoned: every element must be written */
        mvm_k_attn_block(q, NQ * HD, nt, NQ, 1, n_pos, MVM_W_F16, kc, vc, STRIDE, HD, 0.2f,
                         sinks, scratch, out, NULL);
        int differs = 0;
        for (size_t i = 0; i < nt; i++) {
            /* the rows past this token's last position poisoned for its own call */
            uint16_t kp[ROWS * STRIDE], vp[ROWS * STRIDE];
            memcpy(kp, kc, sizeof kp);
            memcpy(vp, vc, sizeof vp);
            for (size_t e = n_pos[i] * STRIDE; e < ROWS * STRIDE; e++)
                kp[e] = vp[e] = 0x7E00; /* an f16 NaN */
            mvm_k_attn_heads(q + i * NQ * HD, NQ, MVM_W_F16, kp, vp, STRIDE, n_pos[i], HD, 0.2f,
                             sinks, scratch, one);
            differs += memcmp(one, out + i * NQ * HD, sizeof one) != 0;
        }
        CHECK(differs == 0);
    }
}

/* KV heads side by side (mvm_k_attn_block's n_kv): 3 KV heads of a row, 1 or 2 queries each,
 * 1 token or 4, F32 and F16, with sinks, heads of 24 (one stream a row) and of 400 (3 x 400
 * wider than MVM_K_ATTN_ROW_MAX: the SIMD levels take it in parts): each query bit for bit
 * what mvm_k_attn_heads gives it alone over its KV head's part of the rows, every output
 * written (poisoned first), the rows past a token's last position never read (NaN there),
 * and each query's log-normaliser (lse) that of the scores and its sink, against double. */
static void test_attn_wide(void)
{
    enum { NKV = 3, NQ = 2, NT = 4, ROWS = 21 };
    static const size_t dims[] = {24, 400};
    static const enum mvm_wtype types[] = {MVM_W_F32, MVM_W_F16};
    const uint32_t n_pos[NT] = {18, 19, 20, 21};
    const float sinks[NKV * NQ] = {0.5f, -1.0f, 0.25f, -INFINITY, 1.5f, 0.0f};
    for (size_t c = 0; c < 2 * 2 * 2 * 2; c++) {
        const size_t hd = dims[c % 2], nq = 1 + (c / 2) % 2, nt = (c / 4) % 2 ? NT : 1;
        const enum mvm_wtype kv = types[c / 8];
        const size_t es = kv == MVM_W_F16 ? 2 : 4, stride = NKV * hd + 5, n = ROWS * stride;
        const size_t qs = NKV * nq * hd; /* a token's queries */
        float *x = malloc(n * sizeof *x), *q = malloc(NT * qs * sizeof *q);
        float *out = malloc(NT * qs * sizeof *out), *one = malloc(hd * sizeof *one);
        float *scratch = malloc(NT * NKV * NQ * ROWS * sizeof *scratch), lse[NT * NKV * NQ];
        uint8_t *kc = malloc(n * es), *vc = malloc(n * es), *kp = malloc(n * es),
                *vp = malloc(n * es);
        fill(x, n, 1.0f);
        mvm_k_quantize(kv, x, kc, n);
        fill(x, n, 1.0f);
        mvm_k_quantize(kv, x, vc, n);
        fill(q, NT * qs, 1.0f);
        fill(out, NT * qs, 1e3f); /* poisoned: every element must be written */
        mvm_k_attn_block(q, qs, nt, nq, NKV, n_pos, kv, kc, vc, stride, hd, 0.3f, sinks,
                         scratch, out, lse);
        int differs = 0;
        for (size_t i = 0; i < nt; i++) {
            /* this token's call: the rows past its last position NaN */
            memcpy(kp, kc, n * es);
            memcpy(vp, vc, n * es);
            for (size_t e = n_pos[i] * stride; e < n; e++) {
                if (kv == MVM_W_F16) {
                    ((uint16_t *)kp)[e] = ((uint16_t *)vp)[e] = 0x7E00;
                } else {
                    ((float *)kp)[e] = ((float *)vp)[e] = NAN;
                }
            }
            for (size_t h = 0; h < NKV * nq; h++) {
                const size_t g = h / nq;
                mvm_k_attn_heads(q + i * qs + h * hd, 1, kv, kp + g * hd * es, vp + g * hd * es,
                                 stride, n_pos[i], hd, 0.3f, sinks + h, scratch, one);
                differs += memcmp(one, out + i * qs + h * hd, hd * sizeof *one) != 0;
                /* the log-normaliser, in double from the stored keys */
                double sum = exp(sinks[h]);
                for (size_t p = 0; p < n_pos[i]; p++) {
                    double dot = 0;
                    for (size_t d = 0; d < hd; d++)
                        dot += (double)q[i * qs + h * hd + d] *
                               (kv == MVM_W_F16 ? mvm_fp16_to_fp32(((uint16_t *)kc)[p * stride + g * hd + d])
                                                : ((float *)kc)[p * stride + g * hd + d]);
                    sum += exp(0.3 * dot);
                }
                differs += fabs(lse[i * NKV * nq + h] - log(sum)) > 1e-5 * (1 + fabs(log(sum)));
            }
        }
        CHECK(differs == 0);
        free(x), free(q), free(out), free(one), free(scratch), free(kc), free(vc), free(kp),
            free(vp);
    }
    /* More than 16 KV heads of one query each (the sweep's lanes in groups of 16, the last
     * one partial): 20 heads of 16 over 9 rows, F16, each head its own call's. */
    enum { WIDE = 20, HD16 = 16, R9 = 9, ST = WIDE * HD16 + 3 };
    float xw[R9 * ST], qw[WIDE * HD16], ow[WIDE * HD16], o1[HD16], sw[WIDE * R9];
    uint16_t kw[R9 * ST], vw[R9 * ST];
    const uint32_t r9 = R9;
    fill(xw, R9 * ST, 1.0f);
    mvm_k_quantize(MVM_W_F16, xw, kw, R9 * ST);
    fill(xw, R9 * ST, 1.0f);
    mvm_k_quantize(MVM_W_F16, xw, vw, R9 * ST);
    fill(qw, WIDE * HD16, 1.0f);
    fill(ow, WIDE * HD16, 1e3f);
    mvm_k_attn_block(qw, 0, 1, 1, WIDE, &r9, MVM_W_F16, kw, vw, ST, HD16, 0.25f, NULL, sw, ow,
                     NULL);
    int wide_differs = 0;
    for (size_t h = 0; h < WIDE; h++) {
        mvm_k_attn_heads(qw + h * HD16, 1, MVM_W_F16, kw + h * HD16, vw + h * HD16, ST, R9, HD16,
                         0.25f, NULL, sw, o1);
        wide_differs += memcmp(o1, ow + h * HD16, sizeof o1) != 0;
    }
    CHECK(wide_differs == 0);
}

/* A cache of a type the attention converts as it reads (llama.cpp's -ctk/-ctv: BF16, Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL): every call gives bit for bit what the same call gives
 * over an F32 cache holding the dequantized values (which test_attn_heads and
 * test_attn_wide check against double). Heads of 32 (3 KV heads: a row of 3 blocks), 128
 * and 576 (DeepSeek's latent row; 3 x 576 wider than MVM_K_ATTN_ROW_MAX: in parts), rows
 * one block longer than the heads, 1 or 2 queries a KV head (the sweep, the tiles), 1 token
 * or 5 reaching 30..38 positions (a whole tile and a partial one), sinks and lse; outputs
 * poisoned, and the rows past every token's positions (the one token's: 30 of 38) blocks
 * whose scale is NaN (BF16: elements), so reading them shows. */
static void attn_converted_case(enum mvm_wtype kv)
{
    enum { NKV = 3, NT = 5, ROWS = 38 };
    static const size_t dims[] = {32, 128, 576};
    const uint32_t n_pos[NT] = {30, 31, 36, 37, 38};
    const float sinks[NKV * 2] = {0.5f, -1.0f, 0.25f, -INFINITY, 1.5f, 0.0f};
    for (size_t c = 0; c < 3 * 2 * 2; c++) {
        const size_t hd = dims[c % 3], nq = 1 + (c / 3) % 2, nt = c / 6 ? NT : 1;
        const size_t stride = NKV * hd + MVM_QBLOCK, n = ROWS * stride, qs = NKV * nq * hd;
        const size_t qb = mvm_k_row_bytes(kv, n), eb = mvm_k_block_elems(kv);
        const size_t bb = mvm_k_row_bytes(kv, eb);
        float *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v), *q = malloc(NT * qs * 4);
        float *o8 = malloc(NT * qs * 4), *o32 = malloc(NT * qs * 4);
        float *scratch = malloc(NT * NKV * 2 * ROWS * sizeof *scratch);
        float lse8[NT * NKV * 2], lse32[NT * NKV * 2];
        uint8_t *kc = malloc(qb), *vc = malloc(qb);
        random_cache(kv, k, v, kc, vc, n, 2.0f);
        fill(q, NT * qs, 1.0f);
        /* past the shortest reach, rows only the longer tokens see; past the longest, none
         * (a block's scale, or a BF16 element, made a NaN: the same two bytes) */
        const size_t last = nt == 1 ? n_pos[0] : n_pos[NT - 1];
        for (size_t b = last * stride / eb; b < n / eb; b++) {
            const uint16_t nan = kv == MVM_W_BF16 ? 0x7FC0 : 0x7E00;
            memcpy(kc + b * bb, &nan, sizeof nan), memcpy(vc + b * bb, &nan, sizeof nan);
        }
        fill(o8, NT * qs, 1e3f), fill(o32, NT * qs, 1e3f);
        mvm_k_attn_block(q, qs, nt, nq, NKV, n_pos, MVM_W_F32, k, v, stride, hd, 0.125f, sinks,
                         scratch, o32, lse32);
        mvm_k_attn_block(q, qs, nt, nq, NKV, n_pos, kv, kc, vc, stride, hd, 0.125f, sinks,
                         scratch, o8, lse8);
        int finite = 1;
        for (size_t i = 0; i < nt * qs; i++)
            finite &= isfinite(o8[i]) && o8[i] != 1e3f;
        CHECK(finite);
        const int same = memcmp(o8, o32, nt * qs * sizeof *o8) == 0 &&
                         memcmp(lse8, lse32, nt * NKV * nq * sizeof *lse8) == 0;
        if (!same)
            fprintf(stderr, "attention over a %s cache, heads of %zu, %zu a KV head, %zu "
                    "tokens: not an F32 cache's results\n", mvm_k_wtype_name(kv), hd, nq, nt);
        CHECK(same);
        free(k), free(v), free(q), free(o8), free(o32), free(scratch), free(kc), free(vc);
    }
}

static void test_attn_converted(void)
{
    static const enum mvm_wtype types[] = {MVM_W_BF16, MVM_W_Q8_0, MVM_W_Q4_0, MVM_W_Q4_1,
                                           MVM_W_Q5_0, MVM_W_Q5_1, MVM_W_IQ4_NL};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        attn_converted_case(types[i]);
}

/* mvm_k_prepare_act at this level (the AVX-512 levels' vector quantizers) against blocks.h's
 * scalar blocks, bit for bit: random blocks; halves after scaling (Q8_0 rounds them away
 * from zero, Q8_K to even: 127 sets a scale of 1); two elements of the largest magnitude
 * with opposite signs (the first sets Q8_K's sign); an all-zero block; a NaN and an
 * infinity (the scalar code's own handling). */
static void test_act_quantizers(void)
{
    enum { NB = 7 };
    float x[NB * MVM_QK_K];
    fill(x, NB * MVM_QK_K, 3.0f);
    const float halves[] = {127, 2.5f, -3.5f, 0.5f, -0.5f, 1.5f, -2.5f, 126.5f};
    memcpy(x + MVM_QK_K, halves, sizeof halves);               /* block 1 (Q8_0 block 8) */
    x[2 * MVM_QK_K + 5] = -9.0f, x[2 * MVM_QK_K + 200] = 9.0f; /* block 2's ties */
    memset(x + 3 * MVM_QK_K, 0, MVM_QK_K * sizeof *x);          /* block 3 */
    x[4 * MVM_QK_K + 17] = NAN;
    x[5 * MVM_QK_K + 40] = -INFINITY;
    x[6 * MVM_QK_K] = -127.0f; /* block 6: Q8_K's scale 1, its halves to even */
    memcpy(x + 6 * MVM_QK_K + 1, halves + 1, sizeof halves - sizeof *halves);
    mvm_block_q8_K k[NB], kref[NB];
    mvm_block_q8_0 q[NB * 8], qref[NB * 8];
    memset(k, 0x5A, sizeof k), memset(q, 0x5A, sizeof q);
    mvm_k_prepare_act(MVM_W_Q4_K, x, k, NB * MVM_QK_K);
    mvm_k_prepare_act(MVM_W_Q8_0, x, q, NB * MVM_QK_K);
    memset(kref, 0x5A, sizeof kref), memset(qref, 0x5A, sizeof qref);
    for (int b = 0; b < NB; b++)
        mvm_k_q8_K_block(x + b * MVM_QK_K, &kref[b]);
    for (int b = 0; b < NB * 8; b++)
        mvm_k_q8_0_block(x + b * MVM_QBLOCK, &qref[b]);
    /* NaN-holding blocks give the scalar code's bytes, whatever they are */
    CHECK(memcmp(k, kref, sizeof k) == 0);
    CHECK(memcmp(q, qref, sizeof q) == 0);
    CHECK(q[8].qs[1] == 3 && q[8].qs[2] == -4 && q[8].qs[3] == 1 && q[8].qs[4] == -1);
    CHECK(k[6].qs[1] == 2 && k[6].qs[2] == -4 && k[6].qs[3] == 0 && k[6].qs[5] == 2);
}

/* ---- the levels against each other -------------------------------------------------------- */

/* Levels that compute the same integers agree bit for bit:
 *  - x86: the Q and K types at every level (the AVX-512 levels inline avx2.h's integer code,
 *    and VNNI's fused products give the same integers), the float types at the two AVX-512
 *    levels and at AVX2 and AVX-VNNI (the same code for another target);
 *  - ARM: the Q and K types at both levels and the portable one (neon.h rounds the portable
 *    level's integers with its expressions), every type at the two ARM levels (SDOT gives
 *    the same integers as the widening products).
 * dot and down, 1..MVM_K_NT tokens, a row with a tail after the x86 levels' 8-block steps.
 * Pairs with a level this CPU lacks are skipped. */
static void test_levels_agree(void)
{
    static const struct {
        enum mvm_simd a, b;
        int floats; /* the float types agree too */
    } pairs[] = {{MVM_SIMD_AVX2, MVM_SIMD_AVXVNNI, 1},   {MVM_SIMD_AVXVNNI, MVM_SIMD_AVX512VNNI, 0},
                 {MVM_SIMD_AVX2, MVM_SIMD_AVX512, 0},    {MVM_SIMD_AVX2, MVM_SIMD_AVX512VNNI, 0},
                 {MVM_SIMD_AVX512, MVM_SIMD_AVX512VNNI, 1}, {MVM_SIMD_SCALAR, MVM_SIMD_NEON, 0},
                 {MVM_SIMD_SCALAR, MVM_SIMD_DOTPROD, 0}, {MVM_SIMD_NEON, MVM_SIMD_DOTPROD, 1}};
    enum { n_embd = 96 };
    const enum mvm_simd before = mvm_k_simd_current();
    for (size_t pi = 0; pi < sizeof pairs / sizeof *pairs; pi++) {
        if (!mvm_k_simd_has(pairs[pi].a) || !mvm_k_simd_has(pairs[pi].b))
            continue;
        const struct mvm_k_level *lv[2];
        mvm_k_simd_use(pairs[pi].a);
        lv[0] = mvm_k_kernels;
        mvm_k_simd_use(pairs[pi].b);
        lv[1] = mvm_k_kernels;
        for (int ti = 0; ti < MVM_W_COUNT; ti++) {
            const enum mvm_wtype t = (enum mvm_wtype)ti;
            if (!is_q(t) && !is_k(t) && !pairs[pi].floats)
                continue;
            /* K rows of ten super-blocks: a whole step of the AVX-512 lattice-grid rows'
             * 8 blocks (avx512_iqgrid.h) and a part */
            const size_t g = is_k(t) ? 256 : 32, n = is_k(t) ? 2560 : 288;
            const size_t rb = mvm_k_row_bytes(t, n);
            const size_t ab = mvm_k_act_bytes(t, n), gb = mvm_k_act_bytes(t, g);
            uint8_t *w = malloc(rb), *down = malloc(n_embd * mvm_k_row_bytes(t, g));
            uint8_t *act = malloc(MVM_K_NT * ab), *ga = malloc(MVM_K_NT * gb);
            float *x = malloc(n_embd * g * sizeof *x);
            fill(x, n, 1.0f);
            mvm_k_quantize(t, x, w, n);
            fill(x, n_embd * g, 1.0f);
            mvm_k_quantize(t, x, down, n_embd * g);
            if (t == MVM_W_Q8_0) /* a file may hold -128, the one quant whose |q| needs 8 bits */
                w[2 + 5] = down[2 + 7] = 0x80;
            /* every IQ3_XXS and IQ3_S grid entry, which the AVX-512 levels look up by
             * codes (kernels/iqgrid.h): the row's 640 indices run through them in turn
             * (IQ3_S's ninth bit in qh) */
            for (size_t b = 0; t == MVM_W_IQ3_XXS && b < n / 256; b++)
                for (size_t i = 0; i < 64; i++)
                    w[b * sizeof(mvm_block_iq3_xxs) + 2 + i] = (uint8_t)(64 * b + i);
            for (size_t b = 0; t == MVM_W_IQ3_S && b < n / 256; b++) {
                mvm_block_iq3_s *x = (mvm_block_iq3_s *)(w + b * sizeof *x);
                for (size_t i = 0; i < 64; i++) {
                    const size_t e = (64 * b + i) % 512;
                    x->qs[i] = (uint8_t)e;
                    x->qh[i / 8] = (uint8_t)((x->qh[i / 8] & ~(1u << i % 8)) |
                                             (unsigned)(e >> 8) << i % 8);
                }
            }
            for (int k = 0; k < MVM_K_NT; k++) {
                fill(x, n, 2.0f);
                mvm_k_prepare_act(t, x, act + k * ab, n);
                fill(x, g, 2.0f);
                mvm_k_prepare_act(t, x, ga + k * gb, g);
            }
            int differs = 0;
            for (size_t nt = 1; nt <= MVM_K_NT; nt++) {
                float y[2][MVM_K_NT], o[2][MVM_K_NT * n_embd];
                fill(o[0], nt * n_embd, 1.0f); /* down adds into its outputs */
                memcpy(o[1], o[0], nt * n_embd * sizeof *o[0]);
                for (int l = 0; l < 2; l++) {
                    lv[l]->dotn[t](w, act, ab, nt, n, y[l], 1);
                    lv[l]->downn[t](down, ga, gb, nt, o[l], n_embd, n_embd);
                }
                differs += memcmp(y[1], y[0], nt * sizeof *y[0]) != 0 ||
                           memcmp(o[1], o[0], nt * n_embd * sizeof *o[0]) != 0;
            }
            CHECK(differs == 0);
            if (differs)
                fprintf(stderr, "  %s: %s and %s differ\n", tname(t),
                        mvm_k_simd_name(pairs[pi].a), mvm_k_simd_name(pairs[pi].b));
            free(w), free(down), free(act), free(ga), free(x);
        }
    }
    mvm_k_simd_use(before);
}

/* IQ3_XXS's and IQ3_S's codes (kernels/iqgrid.h) give their grids' every entry, value by
 * value. */
static void test_iq3_codes(void)
{
    int wrong = 0;
    for (unsigned i = 0; i < 256; i++)
        for (unsigned j = 0; j < 4; j++)
            wrong += mvm_k_iq3xxs_levels[mvm_k_iq3xxs_codes[i] >> 3 * j & 7] !=
                         (uint8_t)(mvm_k_grid(MVM_W_IQ3_XXS, i) >> 8 * j) ||
                     mvm_k_iq3xxs_codes[i] >> 12;
    for (unsigned i = 0; i < 512; i++)
        for (unsigned j = 0; j < 4; j++)
            wrong += mvm_k_iq3s_levels[mvm_k_iq3s_codes[i] >> 3 * j & 7] !=
                         (uint8_t)(mvm_k_grid(MVM_W_IQ3_S, i) >> 8 * j) ||
                     mvm_k_iq3s_codes[i] >> 12;
    CHECK(wrong == 0);
}

static void test_simd_select(void)
{
    const enum mvm_simd best = mvm_k_simd_detect();
    CHECK(mvm_k_simd_current() == best); /* the default, before any mvm_k_simd_use */
    CHECK(mvm_k_simd_use(MVM_SIMD_COUNT) == -1);
    CHECK(mvm_k_simd_use(best) == 0 && mvm_k_simd_current() == best);
    if (best + 1 < MVM_SIMD_COUNT) {
        CHECK(mvm_k_simd_use((enum mvm_simd)(best + 1)) == -1);
        CHECK(mvm_k_simd_current() == best);
    }
    CHECK(mvm_k_simd_use(MVM_SIMD_SCALAR) == 0 && mvm_k_kernels == &mvm_k_level_scalar);
#if defined(__x86_64__) || defined(__i386__)
    /* every x86 level above the portable one has AVX2's, and AVX-512 VNNI AVX-512's; AVX-VNNI
     * stands apart (a Zen 4 lacks it) */
    CHECK(best == MVM_SIMD_SCALAR || mvm_k_simd_has(MVM_SIMD_AVX2));
    CHECK(!mvm_k_simd_has(MVM_SIMD_AVX512VNNI) || mvm_k_simd_has(MVM_SIMD_AVX512));
    CHECK(!mvm_k_simd_has(MVM_SIMD_AVXVNNI) || best >= MVM_SIMD_AVXVNNI);
    if (mvm_k_simd_has(MVM_SIMD_AVX2))
        CHECK(mvm_k_simd_use(MVM_SIMD_AVX2) == 0 && mvm_k_kernels == &mvm_k_level_avx2);
    if (mvm_k_simd_has(MVM_SIMD_AVXVNNI))
        CHECK(mvm_k_simd_use(MVM_SIMD_AVXVNNI) == 0 && mvm_k_kernels == &mvm_k_level_avxvnni);
    else
        CHECK(mvm_k_simd_use(MVM_SIMD_AVXVNNI) == -1 && mvm_k_kernels != &mvm_k_level_avxvnni);
    if (mvm_k_simd_has(MVM_SIMD_AVX512))
        CHECK(mvm_k_simd_use(MVM_SIMD_AVX512) == 0 && mvm_k_kernels == &mvm_k_level_avx512);
    if (mvm_k_simd_has(MVM_SIMD_AVX512VNNI))
        CHECK(mvm_k_simd_use(MVM_SIMD_AVX512VNNI) == 0 &&
              mvm_k_kernels == &mvm_k_level_avx512vnni);
    /* the other architecture's levels are not there */
    CHECK(!mvm_k_simd_has(MVM_SIMD_NEON) && mvm_k_simd_use(MVM_SIMD_DOTPROD) == -1);
#elif defined(__aarch64__)
    CHECK(best >= MVM_SIMD_NEON); /* Linux on AArch64 always has Advanced SIMD */
    CHECK(mvm_k_simd_use(MVM_SIMD_NEON) == 0 && mvm_k_kernels == &mvm_k_level_neon);
    if (best >= MVM_SIMD_DOTPROD)
        CHECK(mvm_k_simd_use(MVM_SIMD_DOTPROD) == 0 && mvm_k_kernels == &mvm_k_level_dotprod);
    CHECK(!mvm_k_simd_has(MVM_SIMD_AVX2) && mvm_k_simd_use(MVM_SIMD_AVX512) == -1);
#endif
    static const char *const names[MVM_SIMD_COUNT] = {"scalar", "avx2",  "avxvnni", "avx512",
                                                      "avx512vnni", "neon", "dotprod"};
    for (int lv = 0; lv < MVM_SIMD_COUNT; lv++)
        CHECK(strcmp(mvm_k_simd_name((enum mvm_simd)lv), names[lv]) == 0);
}

int main(void)
{
    RUN(test_simd_select);
    fprintf(stderr, "     (this CPU: %s)\n", mvm_k_simd_name(mvm_k_simd_detect()));
    RUN(test_fp16);
    RUN(test_bf16);
    RUN(test_sizes);
    RUN(test_quantize_known);
    RUN(test_quantize_random);
    RUN(test_quantize_k);
    RUN(test_iq4_nearest);
    RUN(test_quantize_iq4_nl);
    RUN(test_quantize_iq4_xs);
    RUN(test_quantize_iq);
    RUN(test_quantize_mxfp4);
    RUN(test_rmsnorm);
    RUN(test_rope);
    RUN(test_softmax);
    RUN(test_topk);
    RUN(test_iq3_codes);
    RUN(test_levels_agree);
    RUN(test_row_floats);
    for (int lv = 0; lv < MVM_SIMD_COUNT; lv++) {
        if (mvm_k_simd_use((enum mvm_simd)lv) != 0)
            continue;
        fprintf(stderr, "---- %s\n", mvm_k_simd_name((enum mvm_simd)lv));
        RUN(test_matvec);
        RUN(test_matmul);
        RUN(test_expert);
        RUN(test_expert_batch);
        RUN(test_expert_tiles);
        RUN(test_attn_heads);
        RUN(test_attn_block);
        RUN(test_attn_wide);
        RUN(test_attn_converted);
        RUN(test_attn_softmax);
        RUN(test_attn_weights);
        RUN(test_act_quantizers);
        RUN(test_swiglu);
    }
    TEST_END();
}
