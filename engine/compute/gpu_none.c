/*
 * The engine's device in a build without the CUDA toolkit (CMakeLists.txt compiles this file
 * instead of gpu.c): there is none, so the engine plans and computes on the CPU. Only what
 * the CPU-side code calls is here; the device forward pass is not built at all.
 */
#include "engine/compute/gpu.h"
#include "vmm/error.h"

mvm_status mvm_gpu_open(int device, unsigned flags, mvm_gpu **out)
{
    (void)flags;
    *out = NULL;
    return mvm_fail(MVM_ERR_UNSUPPORTED, "device %d: this moevm was built without the CUDA "
                    "toolkit", device);
}

void mvm_gpu_close(mvm_gpu *g)
{
    (void)g;
}
