/* Backend selection: AUTO prefers cuda and falls back to host, saying why at info level. */
#include "vmm/backend.h"

#include "vmm/error.h"

mvm_status mvm_backend_open(mvm_backend_kind kind, int device, mvm_backend **out)
{
    switch (kind) {
    case MVM_BACKEND_HOST: return mvm_backend_host_open(out);
    case MVM_BACKEND_CUDA: return mvm_backend_cuda_open(device, out);
    case MVM_BACKEND_AUTO: {
        mvm_status st = mvm_backend_cuda_open(device, out);
        if (st == MVM_OK)
            return st;
        mvm_log(MVM_LOG_INFO, "cuda backend unavailable (%s); using the host backend",
                mvm_last_error());
        return mvm_backend_host_open(out);
    }
    }
    return mvm_fail(MVM_ERR_INVALID, "unknown backend kind %d", (int)kind);
}
