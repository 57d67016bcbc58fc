/* The cuda backend of a build made without the CUDA toolkit. */
#include "vmm/backend.h"
#include "vmm/error.h"

mvm_status mvm_cuda_probe(int device)
{
    return mvm_backend_cuda_open(device, NULL);
}

mvm_status mvm_backend_cuda_open(int device, mvm_backend **out)
{
    (void)device, (void)out;
    return mvm_fail(MVM_ERR_UNSUPPORTED,
                    "this libmoevm was built without the CUDA toolkit (rebuild with nvcc on PATH)");
}
