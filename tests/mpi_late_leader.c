/*
 * An LD_PRELOAD shim for test_dist.sh: the rank it is loaded into takes the leader's (rank
 * 0's) messages late. When MPI_Probe from any source finds one of rank 0's, another rank's
 * message that comes within 50 ms is returned instead. MPI allows that order (it orders
 * messages only between one pair of ranks), and it is the one that makes a home's request
 * under a new placement reach a holder before the leader's OP_MIGRATE does
 * (engine/dist/dist_impl.h), which a loaded machine met once in a while.
 */
#include <dlfcn.h>
#include <mpi.h>
#include <time.h>

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status)
{
    static int (*real)(int, int, MPI_Comm, MPI_Status *);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "MPI_Probe");
    int rc = real(source, tag, comm, status), size, flag;
    if (rc != MPI_SUCCESS || source != MPI_ANY_SOURCE || status->MPI_SOURCE != 0)
        return rc;
    MPI_Comm_size(comm, &size);
    for (int ms = 0; ms < 50; ms++) {
        for (int s = 1; s < size; s++) {
            MPI_Status other;
            if (MPI_Iprobe(s, tag, comm, &flag, &other) == MPI_SUCCESS && flag) {
                *status = other;
                return rc;
            }
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return rc;
}
