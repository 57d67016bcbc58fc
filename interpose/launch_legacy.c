/*
 * The pre-CUDA-4 launch API, deprecated and still exported: cuParamSeti, cuParamSetf and
 * cuParamSetv write a function's parameter buffer at offsets the caller picks,
 * cuParamSetSize says how long it is, and cuLaunch, cuLaunchGrid and cuLaunchGridAsync
 * launch the function with it. The driver keeps that buffer where nothing can read it back,
 * so every write is also copied into a shadow of it here (the call itself passes through),
 * and a launch is scanned as a launch with the shadow as its `extra` buffer: through the
 * function's parameter layout where the driver describes it, word by word otherwise.
 *
 * Shadows live as long as the process: a program of this kind launches a fixed set of
 * functions. A function handle reused after its module was unloaded inherits the old
 * shadow's bytes until it sets its own; a stale pointer among them only makes an object
 * resident needlessly.
 */
#include <stdlib.h>
#include <string.h>

#include "interpose/preload.h"

#define PARAM_BYTES 4096 /* the API's limit on a function's parameter buffer */

typedef struct shadow {
    CUfunction f;
    uint32_t extent;  /* the end of the last byte written */
    int64_t size;     /* from cuParamSetSize; -1 until it is called */
    uint8_t bytes[PARAM_BYTES];
} shadow;

static pthread_mutex_t shadow_mu = PTHREAD_MUTEX_INITIALIZER;
static shadow **shadows;
static uint32_t n_shadows, cap_shadows;

/* f's shadow, made on first use (shadow_mu held); NULL when out of memory. */
static shadow *shadow_of(CUfunction f)
{
    for (uint32_t i = 0; i < n_shadows; i++)
        if (shadows[i]->f == f)
            return shadows[i];
    shadow **t = mvm_grow_array(shadows, &cap_shadows, n_shadows + 1, sizeof *t);
    shadow *sh = t ? calloc(1, sizeof *sh) : NULL;
    if (t)
        shadows = t;
    if (!sh)
        return NULL;
    sh->f = f;
    sh->size = -1;
    shadows[n_shadows++] = sh;
    return sh;
}

/* After the driver accepted the write, so offset and n are within its limits. */
static void shadow_write(CUfunction f, int offset, const void *value, size_t n)
{
    if (!mvm_interposer_on() || offset < 0 || (size_t)offset + n > PARAM_BYTES)
        return;
    pthread_mutex_lock(&shadow_mu);
    shadow *sh = shadow_of(f);
    if (sh) {
        memcpy(sh->bytes + offset, value, n);
        if ((uint32_t)offset + n > sh->extent)
            sh->extent = (uint32_t)(offset + n);
    }
    pthread_mutex_unlock(&shadow_mu);
}

CUresult hk_cuParamSetSize(CUfunction f, unsigned int n)
{
    if (!mvm_real_load() || !mvm_real_fn.cuParamSetSize)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = mvm_real_fn.cuParamSetSize(f, n);
    if (r == CUDA_SUCCESS && mvm_interposer_on() && n <= PARAM_BYTES) {
        pthread_mutex_lock(&shadow_mu);
        shadow *sh = shadow_of(f);
        if (sh)
            sh->size = n;
        pthread_mutex_unlock(&shadow_mu);
    }
    return r;
}

CUresult hk_cuParamSeti(CUfunction f, int offset, unsigned int value)
{
    if (!mvm_real_load() || !mvm_real_fn.cuParamSeti)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = mvm_real_fn.cuParamSeti(f, offset, value);
    if (r == CUDA_SUCCESS)
        shadow_write(f, offset, &value, sizeof value);
    return r;
}

/* A float cannot be a pointer, but it can overwrite half of one. */
CUresult hk_cuParamSetf(CUfunction f, int offset, float value)
{
    if (!mvm_real_load() || !mvm_real_fn.cuParamSetf)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = mvm_real_fn.cuParamSetf(f, offset, value);
    if (r == CUDA_SUCCESS)
        shadow_write(f, offset, &value, sizeof value);
    return r;
}

CUresult hk_cuParamSetv(CUfunction f, int offset, void *ptr, unsigned int n)
{
    if (!mvm_real_load() || !mvm_real_fn.cuParamSetv)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = mvm_real_fn.cuParamSetv(f, offset, ptr, n);
    if (r == CUDA_SUCCESS && ptr)
        shadow_write(f, offset, ptr, n);
    return r;
}

/* Scans f's parameters as they are now (a copy: the scan may run twice, and another thread
 * may set parameters meanwhile), for a launch on stream s. Returns with the lock held as
 * mvm_launch_prepare does. */
static bool prepare(CUfunction f, CUstream s)
{
    if (!mvm_interposer_on())
        return false;
    uint8_t bytes[PARAM_BYTES];
    size_t size = 0;
    pthread_mutex_lock(&shadow_mu);
    for (uint32_t i = 0; i < n_shadows; i++)
        if (shadows[i]->f == f) {
            const shadow *sh = shadows[i];
            size = sh->size >= 0 ? (size_t)sh->size : sh->extent;
            memcpy(bytes, sh->bytes, size);
            break;
        }
    pthread_mutex_unlock(&shadow_mu);
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, bytes, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    return mvm_launch_prepare_kernel(f, NULL, size ? extra : NULL, s);
}

CUresult hk_cuLaunch(CUfunction f)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunch)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = prepare(f, NULL);
    return mvm_launch_finish(locked, mvm_real_fn.cuLaunch(f));
}

CUresult hk_cuLaunchGrid(CUfunction f, int width, int height)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunchGrid)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = prepare(f, NULL);
    return mvm_launch_finish(locked, mvm_real_fn.cuLaunchGrid(f, width, height));
}

CUresult hk_cuLaunchGridAsync(CUfunction f, int width, int height, CUstream s)
{
    if (!mvm_real_load() || !mvm_real_fn.cuLaunchGridAsync)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = prepare(f, s);
    return mvm_launch_finish(locked, mvm_real_fn.cuLaunchGridAsync(f, width, height, s));
}
