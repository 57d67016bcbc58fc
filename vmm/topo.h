/*
 * Host topology (hwloc + libnuma): which NUMA node and CPU cores are nearest a GPU, so host
 * homes are allocated there and CPU expert threads run there. Without a GPU (pci_bus_id NULL
 * or ""), the CPU computes: every core, and homes interleaved over every node, so that a
 * machine with several sockets reads the experts with all its memory controllers (as
 * `numactl --interleave=all` and llama.cpp's `--numa distribute` do). A GPU asked for but
 * not found: the node of the calling thread. On a machine with one node everything is
 * "node 0, all cores".
 */
#ifndef MVM_VMM_TOPO_H
#define MVM_VMM_TOPO_H

#include <sched.h>
#include <stddef.h>

#include "moevm/moevm.h"

typedef struct mvm_topo {
    int numa_node;        /* the chosen node; -1: none (no GPU on several nodes: pages are
                             interleaved over all; or NUMA is unavailable) */
    int n_numa_nodes;     /* nodes on the machine (1 without NUMA) */
    int n_cores;          /* cores in `cores` */
    cpu_set_t cores;      /* the cores near the GPU (or the calling thread's node) */
    int n_cores_total;    /* cores on the machine */
    char gpu_bus_id[32];  /* the PCI bus id asked about, "" for none */
    int gpu_found;        /* 1 if hwloc found that PCI device */
    char summary[256];    /* one line for `moevm info` */
} mvm_topo;

/* Probes the machine. pci_bus_id: "0000:18:00.0" style (as cuDeviceGetPCIBusId returns),
 * or NULL/"" without a GPU. An unknown bus id is not an error: the result falls back to
 * the calling thread's node and gpu_found is 0. */
mvm_status mvm_topo_probe(const char *pci_bus_id, mvm_topo *out);

/* Binds [addr, addr+len) to topo->numa_node, or interleaves it over every node when that is
 * -1 (no-op without NUMA), and touches every page
 * from up to n_threads threads pinned to topo->cores, so the pages are allocated on that
 * node now rather than on first use by some other thread. Contents are preserved.
 * n_threads <= 0: one per core in topo->cores, at most 16. */
mvm_status mvm_topo_place(const mvm_topo *topo, void *addr, size_t len, int n_threads);
/* The same over n_items items of item_bytes from addr, touching only the first used_bytes
 * of each: the rest keeps no memory until written (an expert's tail past its weights, up to
 * its last page). The whole range is bound. */
mvm_status mvm_topo_place_items(const mvm_topo *topo, void *addr, size_t n_items,
                                size_t item_bytes, size_t used_bytes, int n_threads);

/* Pins the calling thread to topo->cores. */
mvm_status mvm_topo_bind_thread(const mvm_topo *topo);

/* Bytes the kernel can still give this process: MemAvailable (free and reclaimable), plus
 * free swap when the memory is `swappable` (pinned memory is not), and no more than the
 * process's memory cgroup still allows (a container's limit: v1, or v2 at every level);
 * UINT64_MAX when neither says. */
uint64_t mvm_topo_memory_available(int swappable);
/* MVM_OK when `need` bytes of `what` fit in it, else MVM_ERR_NOMEM naming both sizes: host
 * memory for the experts is asked for before any is touched, rather than ending in the OOM
 * killer (or, pinned, starving the machine) midway through a load. */
mvm_status mvm_topo_check_memory(const char *what, uint64_t need, int swappable);

/* The size of the transparent huge pages the kernel gives memory advised with
 * madvise(MADV_HUGEPAGE), as the THP settings under `dir` (/sys/kernel/mm/transparent_hugepage
 * for mvm_topo_huge_page) say: for `shared` memory (a memfd's: shmem_enabled at always,
 * within_size, advise or force) or anonymous memory (enabled at always or madvise). 0 where
 * they say never or deny, or the kernel has no THP. */
size_t mvm_topo_huge_page_in(const char *dir, int shared);
size_t mvm_topo_huge_page(int shared);
/* The directory mvm_topo_huge_page reads: the kernel's, or a test's stand-in. */
extern const char *mvm_topo_thp_dir;

/* The topology a space probed when it was made, for its GPU (its homes' node and the cores
 * near it): what the engine's threads follow (engine/model/model.c), without a second
 * probe. */
mvm_status mvm_space_topo(const mvm_space *sp, mvm_topo *out);

#endif
