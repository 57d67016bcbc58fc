/*
 * The rotary embedding's angle and magnitude for one pair of a head's dims, as both backends
 * compute it (kernels/cpu/ops.c's mvm_k_rope, kernels/cuda/ops.cu's mvm_g_rope): llama.cpp's
 * rope_ext (ggml's rope_yarn) with its context-extension variants. Pair i (of n_rot / 2) at
 * position pos:
 *
 *   theta_extrap = pos · base^(-2i / n_rot)
 *   none     theta = theta_extrap
 *   linear   theta = freq_scale · theta_extrap                    (freq_scale = 1 / factor)
 *   yarn     theta = (1 - mix) · freq_scale · theta_extrap + mix · theta_extrap, with
 *            mix = ext_factor · (1 - clamp((i - corr_lo) / max(0.001, corr_hi - corr_lo), 0, 1)):
 *            the fast pairs (i <= corr_lo) keep their angle, the slow ones (i >= corr_hi) are
 *            interpolated, those between are blended (YaRN's "NTK-by-parts")
 *
 * and the pair turns by theta with its length scaled by mscale (cos and sin times mscale).
 * The host sets the fields once per model (mvm_k_rope_yarn computes corr_lo, corr_hi and
 * YaRN's mscale); with none, freq_scale = mscale = 1 and ext_factor = 0 compute the plain
 * rotation bit for bit. Plain C that also compiles as CUDA C++.
 */
#ifndef MVM_KERNELS_ROPE_H
#define MVM_KERNELS_ROPE_H

#include "kernels/blocks.h"

typedef struct mvm_rope {
    uint32_t n_rot;             /* the rotated dims at the start of each head (even) */
    uint32_t neox;              /* pairs (i, i + n_rot/2) (llama.cpp ROPE_TYPE_NEOX), else
                                   (2i, 2i+1) (ROPE_TYPE_NORM) */
    float base, freq_scale, ext_factor, mscale, corr_lo, corr_hi;
} mvm_rope;

/* cos and sin of pair i's angle at position pos, times mscale. */
MVM_BLK_FN void mvm_rope_cos_sin(const mvm_rope *r, uint32_t pos, uint32_t i, float *c,
                                 float *s)
{
    const float theta_extrap = (float)pos * powf(r->base, -(float)(2 * i) / (float)r->n_rot);
    float theta = r->freq_scale * theta_extrap;
    if (r->ext_factor != 0.0f) {
        const float y = ((float)i - r->corr_lo) / fmaxf(0.001f, r->corr_hi - r->corr_lo);
        const float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * r->ext_factor;
        theta = theta * (1.0f - mix) + theta_extrap * mix;
    }
    *c = cosf(theta) * r->mscale;
    *s = sinf(theta) * r->mscale;
}

#endif
