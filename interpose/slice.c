/*
 * Slices: the experts inside one tensor. An MoE layer may keep all its experts in one tensor,
 * written by one host-to-device copy and so one extent (transformers' MixtralExperts keeps
 * gate_up_proj[E][2I][H]), and hand each kernel the address of one expert, base + e * stride
 * (`gate_up_proj[e]` is a view). Making the extent resident would move E experts to run one,
 * and hold all of them in the budget. So the pointers that launches carry into an extent
 * teach it a stride, the greatest common divisor of its length and of their offsets from its
 * start; the extent is cut into slices of that stride, and a pointer names only its slice:
 *
 *   - offset 0 teaches nothing: it is the first expert, or the whole tensor (once there are
 *     slices, it names the first);
 *   - with the length in the divisor, the slices always tile the extent, and one expert's
 *     offset is often enough (E = 8, expert 5: the divisor of 8S and 5S is S); else the
 *     slices hold a few experts each until a later offset refines them;
 *   - a divisor below one page (a row, a column block: a view that is no expert) makes the
 *     extent flat for good, one unit as without slicing.
 *
 * Learnt only when a miss is served (write lock): a launch whose slice is resident needs no
 * finer one. Only extents are cut, never whole allocations: an extent is one tensor the
 * program wrote from the host (weights), while a whole allocation holds what kernels
 * produced, tensors of any size side by side behind a caching allocator.
 *
 * A fused expert tensor copied from a GGUF file is cut as the file declares it instead
 * (mvm_slice_declare, from gguf_src.c): into its experts, exactly, even below a page, and
 * launch pointers teach it nothing. Its base names the whole tensor, which route.c narrows
 * to the experts a kernel's routing ids list.
 *
 * A wrong cut costs speed, never data: a page a kernel reaches outside the slice it named is
 * read where it is (device, or its home through the mapping), as for any object larger than
 * the budget. MOEVM_PRELOAD_SLICES=off keeps every extent whole.
 */
#include <stdlib.h>

#include "interpose/preload.h"
#include "vmm/error.h"

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

void mvm_slice_drop(mvm_obj *o)
{
    free(o->slice);
    o->slice = NULL;
    o->n_slices = 0;
    o->stride = 0;
    o->experts = 0;
    o->used = 0;
}

/* Cuts o into len / stride slices. The uses counted on the old slices since the last miss
 * go to the new slice where each old one began, so the evict policy still sees them. */
static void cut(mvm_obj *o, uint64_t stride)
{
    uint32_t n = (uint32_t)(o->len / stride);
    mvm_obj *s = calloc(n, sizeof *s);
    if (!s)
        return; /* the old cut (or none) stays: coarser, still correct */
    for (uint32_t i = 0; i < n; i++)
        s[i].va = o->va + (uint64_t)i * stride, s[i].len = stride;
    for (uint32_t i = 0; i < o->n_slices; i++) {
        uint64_t u = atomic_load_explicit(&o->slice[i].uses, memory_order_relaxed);
        atomic_fetch_add_explicit(&s[(uint64_t)i * o->stride / stride].uses, u,
                                  memory_order_relaxed);
    }
    free(o->slice);
    o->slice = s;
    o->n_slices = n;
    o->stride = stride;
    mvm_interposer.layout++;
    MVM_PL_LOG(MVM_LOG_DEBUG, "extent 0x%llx (%.1f MiB) cut into %u slices of %.1f MiB",
               (unsigned long long)o->va, (double)o->len / 1048576.0, n,
               (double)stride / 1048576.0);
}

void mvm_slice_learn(mvm_obj *o, uint64_t va)
{
    uint64_t off = va - o->va;
    if (o->experts || o->flat || off == 0 || off >= o->len)
        return;
    uint64_t stride = gcd(o->stride ? o->stride : o->len, off);
    if (stride == o->stride)
        return;
    if (stride >= mvm_interposer.page_size) {
        cut(o, stride);
        return;
    }
    if (o->slice) {
        uint64_t u = 0;
        for (uint32_t i = 0; i < o->n_slices; i++)
            u += atomic_load_explicit(&o->slice[i].uses, memory_order_relaxed);
        atomic_fetch_add_explicit(&o->uses, u, memory_order_relaxed);
        mvm_slice_drop(o);
        mvm_interposer.layout++;
    }
    o->flat = true;
    MVM_PL_LOG(MVM_LOG_DEBUG, "extent 0x%llx (%.1f MiB) stays whole: a launch pointed at "
               "offset %llu", (unsigned long long)o->va, (double)o->len / 1048576.0,
               (unsigned long long)off);
}

void mvm_slice_declare(mvm_obj *o, uint32_t experts, uint32_t used)
{
    if (experts < 2 || o->len % experts)
        return;
    if (o->experts != experts) {
        cut(o, o->len / experts);
        if (o->stride != o->len / experts)
            return; /* out of memory: the extent stays as it was */
        o->experts = experts;
        o->flat = false;
        mvm_interposer.routed_extents++;
    }
    o->used = used;
}
