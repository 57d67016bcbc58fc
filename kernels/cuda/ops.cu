/*
 * The small F32 ops of the engine's forward pass on the device (kernels/cuda/kernels.h), as
 * kernels/cpu/ops.c computes them: RMSNorm with its squares summed in double, the rotary
 * embedding with the CPU's angle formula (kernels/rope.h), causal attention (windowed, with
 * sinks: gpt-oss) over an F16 or F32 KV cache whose softmax sums in double, the stores into
 * that cache, and the element-wise adds (residual, bias, gated shared expert) and SwiGLU.
 */
#include "kernels/cuda/device.cuh"

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_rmsnorm(mvm_g_rmsnorm_args a)
{
    __shared__ double tmp[MVM_G_WARPS];
    const float *x = (const float *)a.x + blockIdx.x * a.x_stride;
    float *out = (float *)a.out + blockIdx.x * a.out_stride;
    double part = 0;
    for (uint32_t i = threadIdx.x; i < a.n; i += blockDim.x)
        part += (double)(x[i] * x[i]);
    const double sum = block_sum(part, tmp);
    const float mean = (float)(sum / (double)a.n);
    const float scale = 1.0f / sqrtf(mean + a.eps);
    for (uint32_t i = threadIdx.x; i < a.n; i += blockDim.x)
        out[i] = x[i] * scale * (a.w ? ((const float *)a.w)[i] : 1.0f);
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_rope(mvm_g_rope_args a)
{
    const uint32_t half = a.rope.n_rot / 2;
    const uint32_t u = blockIdx.x * blockDim.x + threadIdx.x, tok = blockIdx.y;
    if (u >= a.n_heads * half)
        return;
    const uint32_t h = u / half, i = u % half;
    float c, s;
    mvm_rope_cos_sin(&a.rope, a.pos0 + tok, i, &c, &s);
    const uint32_t i0 = a.rope.neox ? i : 2 * i, i1 = a.rope.neox ? i + half : 2 * i + 1;
    float *p = (float *)a.x + tok * a.stride + (uint64_t)h * a.head_dim;
    const float x0 = p[i0], x1 = p[i1];
    p[i0] = x0 * c - x1 * s;
    p[i1] = x0 * s + x1 * c;
}

/* Element i of the KV cache's rows at p: F16 or F32. */
static __device__ __forceinline__ float kv_elem(mvm_dptr p, uint64_t i, uint32_t f16)
{
    return f16 ? mvm_k_h2f(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)
    mvm_g_attention(mvm_g_attention_args a)
{
    __shared__ float fmax_tmp[MVM_G_WARPS];
    __shared__ double dsum_tmp[MVM_G_WARPS];
    const uint32_t h = blockIdx.x, i = blockIdx.y, n_pos = a.pos0 + i + 1;
    /* positions first..n_pos-1: all of them, or the window's last ones, in n consecutive
     * rows of the cache from first's */
    const uint32_t first = a.window && n_pos > a.window ? n_pos - a.window : 0;
    const uint32_t n = n_pos - first;
    const uint32_t q_dim = a.n_head * a.head_dim, kv_dim = a.n_head_kv * a.head_dim;
    const uint64_t kvo = (uint64_t)(a.ring ? first % a.ring : first) * kv_dim +
                         (uint64_t)(h / (a.n_head / a.n_head_kv)) * a.head_dim;
    const float *q = (const float *)a.q + (uint64_t)i * q_dim + (uint64_t)h * a.head_dim;
    float *scores = (float *)a.scores + ((uint64_t)i * a.n_head + h) * a.n_ctx;
    /* a sink is one more logit in the max and the sum, with no value (-INFINITY: none) */
    const float sink = a.sinks ? ((const float *)a.sinks)[h] : -INFINITY;
    float mx = sink;
    for (uint32_t j = threadIdx.x; j < n; j += blockDim.x) {
        const uint64_t k = kvo + (uint64_t)j * kv_dim;
        float s = 0;
        for (uint32_t d = 0; d < a.head_dim; d++)
            s += kv_elem(a.kc, k + d, a.kv_f16) * q[d];
        s *= a.scale;
        scores[j] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_max(mx, fmax_tmp);
    double part = threadIdx.x == 0 ? (double)expf(sink - mx) : 0;
    for (uint32_t j = threadIdx.x; j < n; j += blockDim.x) {
        const float e = expf(scores[j] - mx);
        scores[j] = e;
        part += e;
    }
    const float inv = (float)(1.0 / block_sum(part, dsum_tmp));
    /* block_sum's barrier also makes every thread's scores visible to the whole block */
    for (uint32_t d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
        float o = 0;
        for (uint32_t j = 0; j < n; j++)
            o += scores[j] * inv * kv_elem(a.vc, kvo + d + (uint64_t)j * kv_dim, a.kv_f16);
        ((float *)a.out)[(uint64_t)i * q_dim + (uint64_t)h * a.head_dim + d] = o;
    }
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)
    mvm_g_store_rows(mvm_g_store_rows_args a)
{
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (j >= a.n)
        return;
    const float x = ((const float *)a.src)[i * a.src_stride + j];
    if (a.f16)
        ((uint16_t *)a.dst)[i * a.dst_stride + j] = mvm_k_f2h(x);
    else
        ((float *)a.dst)[i * a.dst_stride + j] = x;
}

extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_add(mvm_g_add_args a)
{
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (j >= a.n)
        return;
    const float g = a.gate ? 1.0f / (1.0f + expf(-((const float *)a.gate)[i])) : 1.0f;
    const float y = ((const float *)a.y)[i * a.y_stride + j];
    ((float *)a.x)[(uint64_t)i * a.n + j] += a.gate ? g * y : y;
}

/* x[i][j] = silu(x[i][j]) * y[i][j], y[i] at y + i * y_stride (mvm_g_add_args; no gate). */
extern "C" __global__ void __launch_bounds__(MVM_G_THREADS) mvm_g_swiglu(mvm_g_add_args a)
{
    const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (j >= a.n)
        return;
    float *x = (float *)a.x + (uint64_t)i * a.n + j;
    *x = silu(*x) * ((const float *)a.y)[i * a.y_stride + j];
}
