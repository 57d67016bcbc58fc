/*
 * What the distributed mode (dist.h) is in every build: how a process knows mpirun started
 * it, and, in a build without MPI (no Open MPI found by CMake), the refusal to run as one
 * of several ranks. The MPI side is dist_mpi.c.
 */
#include "engine/dist/dist.h"

#include <stdlib.h>

#include "vmm/error.h"

int mvm_dist_launched(void)
{
    /* Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; a PMIx launcher (srun, prterun) sets
     * PMIX_RANK and the size in the job's data: any such process is taken as a rank. */
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (n)
        return atoi(n) > 1;
    return getenv("PMIX_RANK") != NULL;
}

#ifndef MVM_HAVE_MPI
/* No MPI here: a process of a job is refused; a single process runs as always (*out NULL,
 * and the other calls are never reached without a handle). */
mvm_status mvm_dist_init(mvm_dist **out)
{
    *out = NULL;
    if (mvm_dist_launched())
        return mvm_fail(MVM_ERR_UNSUPPORTED, "started by mpirun, but this moevm was built "
                        "without MPI (install libopenmpi-dev and rebuild: scripts/"
                        "install-deps.sh does)");
    return MVM_OK;
}

void mvm_dist_finish(mvm_dist *d, int abort_job) { (void)d, (void)abort_job; }
int mvm_dist_agree_rc(mvm_dist *d, int rc) { (void)d; return rc; }
uint32_t mvm_dist_rank(const mvm_dist *d) { (void)d; return 0; }
uint32_t mvm_dist_size(const mvm_dist *d) { (void)d; return 1; }
uint32_t mvm_dist_local_rank(const mvm_dist *d) { (void)d; return 0; }
uint32_t mvm_dist_serve_batch(const mvm_dist *d) { (void)d; return 0; }
mvm_status mvm_dist_agree(mvm_dist *d, mvm_status mine) { (void)d; return mine; }
mvm_status mvm_dist_stop(mvm_dist *d) { (void)d; return MVM_OK; }

static mvm_status no_mpi(void)
{
    return mvm_fail(MVM_ERR_UNSUPPORTED, "this moevm was built without MPI");
}

mvm_status mvm_dist_plan(mvm_dist *d, const mvm_model *probe, const mvm_dist_params *p,
                         const uint8_t **held)
{
    (void)d, (void)probe, (void)p, (void)held;
    return no_mpi();
}

mvm_status mvm_dist_serve(mvm_dist *d, mvm_model *m, mvm_pool *pool, mvm_ctx *c)
{
    (void)d, (void)m, (void)pool, (void)c;
    return no_mpi();
}

mvm_status mvm_dist_attach(mvm_dist *d, mvm_ctx *c, mvm_model *m, mvm_pool *pool,
                           uint32_t n_batch)
{
    (void)d, (void)c, (void)m, (void)pool, (void)n_batch;
    return no_mpi();
}

void mvm_dist_get_stats(const mvm_dist *d, mvm_dist_stats *out)
{
    (void)d;
    *out = (mvm_dist_stats){.ranks = 1, .homes = 1};
}
#endif
