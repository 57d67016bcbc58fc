/*
 * Device-side copies and memsets: device-to-host, device-to-device, peer, array, 2D, 3D and
 * batched copies, and every memset, with their per-thread-stream twins (the list is
 * MVM_CU_GUARDED in preload.h).
 *
 * They move no pages and teach no objects (their data is what kernels produced, not weights
 * the program loaded), but one that touches managed memory is held under the read lock
 * while it is queued. A miss takes the write lock, drains the device and then remaps pages:
 * without the lock, another thread could queue a copy of a page between that drain and the
 * remap, and read it half-moved, or write into a home that is about to be replaced by the
 * device copy. With it, the copy is queued either before the miss (the drain waits for it)
 * or after (the page has its new backing).
 *
 * While pages are being prefetched (prefetch.c), one that touches managed memory first lands
 * them with the device drained: their copies read homes this call may write.
 *
 * A call that touches no managed memory costs one range compare per pointer.
 */
#include "interpose/preload.h"

#define MVM_IN(p) mvm_heap_contains((uint64_t)(p))

#define SIDES_IN(p)                                                                           \
    ((p) && (mvm_copy_side_managed((p)->srcMemoryType, (p)->srcDevice) ||                     \
             mvm_copy_side_managed((p)->dstMemoryType, (p)->dstDevice)))

static bool mvm_touches_2d(const CUDA_MEMCPY2D *p) { return SIDES_IN(p); }
static bool mvm_touches_3d(const CUDA_MEMCPY3D *p) { return SIDES_IN(p); }
static bool mvm_touches_3d_peer(const CUDA_MEMCPY3D_PEER *p) { return SIDES_IN(p); }

static bool mvm_touches_list(const CUdeviceptr *p, size_t n)
{
    for (size_t i = 0; p && i < n; i++)
        if (MVM_IN(p[i]))
            return true;
    return false;
}

static bool operand_in(const CUmemcpy3DOperand *o)
{
    return o->type == CU_MEMCPY_OPERAND_TYPE_POINTER && MVM_IN(o->op.ptr.ptr);
}

static bool mvm_touches_ops(const CUDA_MEMCPY3D_BATCH_OP *ops, size_t n)
{
    for (size_t i = 0; ops && i < n; i++)
        if (operand_in(&ops[i].src) || operand_in(&ops[i].dst))
            return true;
    return false;
}

static bool hold_off_misses(bool touches)
{
    if (!touches)
        return false;
    mvm_prefetch_settle(); /* a prefetch copy must not read a home this one changes */
    mvm_count(&mvm_counts_mine()->copies);
    pthread_rwlock_rdlock(&mvm_interposer.lock);
    return true;
}

#define GUARDED_HOOK(field, sym, params, args, touches)                                      \
    CUresult hk_##field params                                                                \
    {                                                                                         \
        if (!mvm_real_load() || !mvm_real_fn.field)                                           \
            return CUDA_ERROR_NOT_SUPPORTED;                                                  \
        bool locked = hold_off_misses(touches);                                               \
        CUresult r = mvm_real_fn.field args;                                                  \
        if (locked)                                                                           \
            pthread_rwlock_unlock(&mvm_interposer.lock);                                      \
        return r;                                                                             \
    }
MVM_CU_GUARDED(GUARDED_HOOK)
