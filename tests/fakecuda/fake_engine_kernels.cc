/*
 * The engine's device kernels (the .cu files of kernels/cuda) as a fakecuda plugin
 * (FAKECUDA_KERNELS, fakecuda.h): every module the fake loads then also has them, under
 * their own names, run on the CPU through tests/cuda_emu.h. So the engine's GPU code runs
 * here for real over the fake driver: the embedded PTX loaded as a module, each kernel found
 * by name and launched with its argument struct in the shape the host computed.
 */
#include "tests/cuda_emu.h"

#include "kernels/cuda/attention_mma.cu"
#include "kernels/cuda/expert.cu"
#include "kernels/cuda/gemm.cu"
#include "kernels/cuda/matvec.cu"
#include "kernels/cuda/mmq.cu"
#include "kernels/cuda/ops.cu"

#include "fakecuda.h"

/* Launches of each kernel so far, for fake_engine_launches. */
template <typename A, void (*K)(A)> static unsigned long launched;

template <typename A, void (*K)(A)>
static void run(const void *params, const unsigned grid[3], const unsigned block[3])
{
    launched<A, K>++;
    A a;
    memcpy(&a, params, sizeof a);
    /* the kernels are one-dimensional in their blocks and two in their grids */
    if (grid[2] != 1 || block[1] != 1 || block[2] != 1)
        abort();
    emu_launch(dim3{grid[0], grid[1], 1}, block[0], {}, [&] { K(a); });
}

/* The routing kernel, and with FAKECUDA_ROUTE_BAD=1 a device that answers wrongly: its first
 * choice one past the last expert (the host must say so, not index by it); with
 * FAKECUDA_ROUTE_BAD=2 the CPU's share's first expert instead, where it gives the CPU one
 * (the kernel writes a copy of the share, handed over as the kernel would: token last). */
static void route_run(const void *params, const unsigned grid[3], const unsigned block[3])
{
    const char *bad = getenv("FAKECUDA_ROUTE_BAD");
    mvm_g_route_args a;
    memcpy(&a, params, sizeof a);
    if (bad && strcmp(bad, "2") == 0 && a.share) {
        const uint64_t bytes = mvm_g_cpu_share_bytes(a.n_embd);
        mvm_g_cpu_share *real = (mvm_g_cpu_share *)a.share;
        std::vector<uint64_t> copy(bytes / 8); /* the kernel only writes the share */
        a.share = (mvm_dptr)(uintptr_t)copy.data();
        run<mvm_g_route_args, mvm_g_route>(&a, grid, block);
        mvm_g_cpu_share *made = (mvm_g_cpu_share *)copy.data();
        made->expert[0] = made->n ? (int32_t)a.n_expert : made->expert[0];
        /* back only what the kernel writes (n, the choices, their weights, the router's
         * input): the host's thread may be storing `done` of the share meanwhile */
        const size_t from = offsetof(mvm_g_cpu_share, n);
        memcpy((char *)real + from, (char *)made + from, offsetof(mvm_g_cpu_share, pad0) - from);
        memcpy((char *)real + MVM_G_CPU_SHARE_HEAD, (char *)made + MVM_G_CPU_SHARE_HEAD,
               (size_t)a.n_embd * sizeof(float));
        __atomic_store_n(&real->token, made->token, __ATOMIC_RELEASE);
        return;
    }
    run<mvm_g_route_args, mvm_g_route>(params, grid, block);
    if (bad && strcmp(bad, "1") == 0)
        ((int32_t *)a.sel)[0] = (int32_t)a.n_expert;
}

/* A prompt batch's routing, and with FAKECUDA_ROUTE_BAD=1 its first token's first choice
 * one past the last expert, as route_run's. */
static void route_rows_run(const void *params, const unsigned grid[3], const unsigned block[3])
{
    const char *bad = getenv("FAKECUDA_ROUTE_BAD");
    run<mvm_g_route_args, mvm_g_route_rows>(params, grid, block);
    mvm_g_route_args a;
    memcpy(&a, params, sizeof a);
    if (bad && strcmp(bad, "1") == 0)
        ((int32_t *)a.sel)[0] = (int32_t)a.n_expert;
}

/* The kernels registered, and where their launches are counted. */
static struct {
    const char *name;
    unsigned long *n;
} counted[320]; /* FK_MAX_PLUGIN, the fake's most */
static size_t n_counted;

/* How many times kernel `name` ran (0 for one not registered): which path a pass took, for
 * the tests (dlsym it from FAKECUDA_KERNELS's library). */
extern "C" __attribute__((visibility("default"))) unsigned long
fake_engine_launches(const char *name)
{
    for (size_t i = 0; i < n_counted; i++)
        if (strcmp(counted[i].name, name) == 0)
            return *counted[i].n;
    return 0;
}

template <typename A, void (*K)(A)>
static void add_counted(fakecuda_add_kernel_fn add, const char *name)
{
    if (n_counted == sizeof counted / sizeof *counted)
        abort();
    counted[n_counted++] = {name, &launched<A, K>};
    add(name, sizeof(A), run<A, K>);
}

#define ADD(name, A) add_counted<A, name>(add, #name)
#define ADD_TYPED(name, T)                                                                     \
    ADD(mvm_g_matvec_##name, mvm_g_matvec_args);                                               \
    ADD(mvm_g_expert_up_##name, mvm_g_expert_args);                                            \
    ADD(mvm_g_expert_up1_##name, mvm_g_expert_args);                                           \
    ADD(mvm_g_expert_down_##name, mvm_g_expert_args);                                          \
    ADD(mvm_g_expert_down1_##name, mvm_g_expert_args);                                         \
    ADD(mvm_g_expert_up1_keep_##name, mvm_g_expert_args);                                      \
    ADD(mvm_g_expert_down1_keep_##name, mvm_g_expert_args);                                    \
    ADD(mvm_g_dequant_##name, mvm_g_dequant_args);
#define ADD_MMQ(name, T)                                                                       \
    ADD(mvm_g_expert_mmq_up_##name, mvm_g_expert_args);                                        \
    ADD(mvm_g_expert_mmq_down_##name, mvm_g_expert_args);                                      \
    ADD(mvm_g_mmq_matmul_##name, mvm_g_matvec_args);

extern "C" __attribute__((visibility("default"))) void
fakecuda_register_kernels(fakecuda_add_kernel_fn add)
{
    ADD(mvm_g_quantize, mvm_g_quantize_args);
    MVM_G_FOR_TYPES(ADD_TYPED)
    ADD(mvm_g_expert_quantize, mvm_g_expert_args);
    MVM_G_MMQ_TYPES(ADD_MMQ)
    ADD(mvm_g_expert_sum, mvm_g_expert_sum_args);
    ADD(mvm_g_cpu_wait, mvm_g_cpu_wait_args);
    add("mvm_g_route", sizeof(mvm_g_route_args), route_run); /* counted by run<> */
    counted[n_counted++] = {"mvm_g_route", &launched<mvm_g_route_args, mvm_g_route>};
    add("mvm_g_route_rows", sizeof(mvm_g_route_args), route_rows_run);
    counted[n_counted++] = {"mvm_g_route_rows",
                            &launched<mvm_g_route_args, mvm_g_route_rows>};
    ADD(mvm_g_route_group, mvm_g_route_group_args);
    ADD(mvm_g_rmsnorm, mvm_g_rmsnorm_args);
    ADD(mvm_g_rope, mvm_g_rope_args);
    ADD(mvm_g_qk_rope, mvm_g_qk_rope_args);
    ADD(mvm_g_attention, mvm_g_attention_args);
    ADD(mvm_g_attention_combine, mvm_g_attention_args);
    ADD(mvm_g_attention_mma, mvm_g_attention_args);
    ADD(mvm_g_store_rows, mvm_g_store_rows_args);
    ADD(mvm_g_add, mvm_g_add_args);
    ADD(mvm_g_swiglu, mvm_g_add_args);
    ADD(mvm_g_to_half, mvm_g_to_half_args);
    ADD(mvm_g_glu_half, mvm_g_glu_half_args);
    ADD(mvm_g_rows_out, mvm_g_rows_out_args);
    ADD(mvm_g_attn_softmax, mvm_g_attn_softmax_args);
}
