/*
 * Host topology: hwloc finds the cores and NUMA node nearest a PCI device (or the calling
 * thread), libnuma answers whether NUMA policy calls work here, and mbind plus a pinned
 * parallel first touch put host memory on that node.
 *
 * "Cores" are logical CPUs (hwloc PUs, the numbering of cpu_set_t). hwloc's default topology
 * holds only the CPUs and nodes this process is allowed to use (cgroup cpuset), so every
 * set taken from it is usable for pinning as is.
 */
#include "vmm/topo.h"

#include <errno.h>
#include <hwloc.h>
#include <hwloc/glibc-sched.h>
#include <hwloc/linux.h>
#include <inttypes.h>
#include <limits.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/error.h"

/* Default thread count cap for mvm_topo_place: first-touch throughput flattens out between 16
 * and 32 threads (ai-dynamo/dynamo#13710), and the cost is per thread. */
#define TOPO_DEFAULT_MAX_THREADS 16

/* Linux supports at most 1024 NUMA nodes (NODES_SHIFT <= 10); mbind's mask is sized so. */
#define TOPO_MAX_NODES 1024
#define ULONG_BITS (sizeof(unsigned long) * CHAR_BIT)

/* ---------------------------------------------------------------------------------------
 * Probe
 */

/* hwloc loads its plugins (and with them libxml2, ICU, X11, OpenCL) when the first live
 * topology is initialised and unloads them when the last is destroyed: about 5 ms each
 * time on the CI VM, and a process probes two or three times (the engine's threads, the
 * space). One topology initialised and never loaded nor destroyed keeps them loaded; each
 * probe still loads a topology of its own, so it sees what the environment says then
 * (HWLOC_XMLFILE, the cpuset). */
static pthread_once_t plugins_once = PTHREAD_ONCE_INIT;

static void keep_plugins_loaded(void)
{
    static hwloc_topology_t anchor;
    (void)hwloc_topology_init(&anchor);
}

/* with_io: discover PCI devices, for a GPU's bus id to be looked up in a topology that is
 * not this kernel's (an XML file's); the kernel's devices are looked up in sysfs
 * (device_parent). */
static mvm_status load_topology(hwloc_topology_t *topo, int with_io)
{
    pthread_once(&plugins_once, keep_plugins_loaded);
    if (hwloc_topology_init(topo) < 0)
        return mvm_fail(MVM_ERR_BACKEND, "hwloc_topology_init failed: %s", strerror(errno));
    /* Only the PCI devices that matter (GPUs, NICs and the bridges above them): full IO
     * discovery costs far more and tells us nothing we use. Even those read every device's
     * config space, where each read traps on a VM (pci_user_read_config_dword, perf record
     * of `moevm run`): 9.4 ms a probe on the CI VM against 1.2 without. */
    enum hwloc_type_filter_e io = with_io ? HWLOC_TYPE_FILTER_KEEP_IMPORTANT
                                          : HWLOC_TYPE_FILTER_KEEP_NONE;
    if (hwloc_topology_set_io_types_filter(*topo, io) < 0) {
        int err = errno;
        hwloc_topology_destroy(*topo);
        return mvm_fail(MVM_ERR_BACKEND, "hwloc_topology_set_io_types_filter failed: %s",
                        strerror(err));
    }
    /* The PCI bus ids come from sysfs; hwloc's plugins for GPU APIs would only name the same
     * devices again, and cost every start: "gl" tries ten X displays, "opencl", "cuda" and
     * "nvml" initialise those runtimes in this process (on a GPU machine, a context). */
    static const char *const unused[] = {"gl", "opencl", "cuda", "nvml", "rsmi", "levelzero"};
    for (size_t i = 0; i < sizeof unused / sizeof *unused; i++)
        (void)hwloc_topology_set_components(*topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                            unused[i]);
    if (hwloc_topology_load(*topo) < 0) {
        int err = errno;
        hwloc_topology_destroy(*topo);
        return mvm_fail(MVM_ERR_BACKEND, "hwloc_topology_load failed: %s", strerror(err));
    }
    return MVM_OK;
}

/* Whether hwloc takes the topology from this kernel, rather than from what the environment
 * names in its place (an XML file, a synthetic description, another file system's root:
 * hwloc's HWLOC_XMLFILE, HWLOC_SYNTHETIC, HWLOC_FSROOT, or HWLOC_COMPONENTS naming those
 * components). HWLOC_THISSYSTEM can call such a topology this system's, so
 * hwloc_topology_is_thissystem cannot tell. */
static int topology_from_kernel(void)
{
    const char *c = getenv("HWLOC_COMPONENTS");
    return !getenv("HWLOC_XMLFILE") && !getenv("HWLOC_SYNTHETIC") && !getenv("HWLOC_FSROOT") &&
           !(c && (strstr(c, "xml") || strstr(c, "synthetic")));
}

/* The non-IO object (package, group, NUMA node's parent) that PCI device `busid` hangs
 * off, whose cpuset is the cores nearest the device and nodeset the memory nearest it; NULL
 * where there is no such device. From this kernel's topology (from_kernel), the smallest
 * object that holds the cores the kernel names for the device (sysfs's local_cpus, which
 * hwloc's PCI discovery reads to place it too; a set of no object's cores gets the object
 * above, where hwloc would make a group of them), with no PCI discovery; from another
 * one, which holds its devices, the device's own parent. The bus id as hwloc parses it:
 * "dddd:bb:dd.f" or "bb:dd.f". */
static hwloc_obj_t device_parent(hwloc_topology_t topo, const char *busid, int from_kernel)
{
    if (!from_kernel) {
        hwloc_obj_t dev = hwloc_get_pcidev_by_busidstring(topo, busid);
        return dev ? hwloc_get_non_io_ancestor_obj(topo, dev) : NULL;
    }
    unsigned dom, bus, dev, fn;
    char extra;
    if (sscanf(busid, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &extra) != 4) {
        dom = 0; /* the short form's, and not what a failed first parse left there */
        if (sscanf(busid, "%x:%x.%x%c", &bus, &dev, &fn, &extra) != 3)
            return NULL;
    }
    char path[80];
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%04x:%02x:%02x.%01x/local_cpus", dom,
             bus, dev, fn);
    hwloc_bitmap_t near = hwloc_bitmap_alloc();
    if (!near || hwloc_linux_read_path_as_cpumask(path, near) < 0) {
        hwloc_bitmap_free(near);
        return NULL;
    }
    hwloc_bitmap_and(near, near, hwloc_topology_get_topology_cpuset(topo));
    hwloc_obj_t obj = hwloc_bitmap_iszero(near) ? NULL : hwloc_get_obj_covering_cpuset(topo, near);
    hwloc_bitmap_free(near);
    return obj ? obj : hwloc_get_root_obj(topo);
}

/* The node of the CPU the calling thread runs on now, and that node's cores. */
static int near_thread(hwloc_topology_t topo, hwloc_const_cpuset_t *cores)
{
    int cpu = sched_getcpu();
    int node = cpu >= 0 ? numa_node_of_cpu(cpu) : -1;
    hwloc_obj_t obj = node >= 0 ? hwloc_get_numanode_obj_by_os_index(topo, (unsigned)node)
                                : NULL;
    if (!obj) {
        /* Neither call knew: take the whole machine rather than guess a node. */
        *cores = hwloc_topology_get_topology_cpuset(topo);
        return -1;
    }
    *cores = obj->cpuset;
    return node;
}

/* cpu_set_t holds CPU_SETSIZE (1024) CPUs; say so rather than drop higher ones silently. */
static void to_cpu_set(hwloc_topology_t topo, hwloc_const_cpuset_t set, cpu_set_t *out)
{
    if (hwloc_bitmap_last(set) >= CPU_SETSIZE)
        mvm_log(MVM_LOG_WARN, "topology: cores at or above %d are not usable (cpu_set_t)",
                CPU_SETSIZE);
    hwloc_cpuset_to_glibc_sched_affinity(topo, set, out, sizeof *out);
}

static void describe(hwloc_const_cpuset_t cores, int numa_ok, mvm_topo *t)
{
    char list[80], nodes[32], where[128];
    /* A long core list is cut visibly; the full set is in t->cores. */
    if (hwloc_bitmap_list_snprintf(list, sizeof list, cores) >= (int)sizeof list)
        memcpy(list + sizeof list - 4, "...", 4);
    if (numa_ok)
        snprintf(nodes, sizeof nodes, "%d NUMA node%s", t->n_numa_nodes,
                 t->n_numa_nodes == 1 ? "" : "s");
    else
        snprintf(nodes, sizeof nodes, "NUMA unavailable");
    if (t->numa_node >= 0)
        snprintf(where, sizeof where, "node %d (cores %s)", t->numa_node, list);
    else if (numa_ok && t->n_numa_nodes > 1)
        snprintf(where, sizeof where, "all cores (%s), memory interleaved", list);
    else
        snprintf(where, sizeof where, "all cores (%s)", list);

    char gpu[64];
    if (!t->gpu_bus_id[0])
        snprintf(gpu, sizeof gpu, "no GPU, using");
    else if (t->gpu_found)
        snprintf(gpu, sizeof gpu, "GPU %s on", t->gpu_bus_id);
    else
        snprintf(gpu, sizeof gpu, "GPU %s not found, using", t->gpu_bus_id);
    snprintf(t->summary, sizeof t->summary, "%d core%s, %s; %s %s", t->n_cores_total,
             t->n_cores_total == 1 ? "" : "s", nodes, gpu, where);
}

static void fill(hwloc_topology_t topo, int from_kernel, mvm_topo *t)
{
    hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(topo);
    int hw_nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    hwloc_obj_t near_gpu =
        t->gpu_bus_id[0] ? device_parent(topo, t->gpu_bus_id, from_kernel) : NULL;
    int numa_ok = numa_available() >= 0;
    hwloc_const_cpuset_t cores = all;

    t->gpu_found = near_gpu != NULL;
    t->n_cores_total = hwloc_bitmap_weight(all);
    if (!numa_ok) {
        /* No NUMA policy calls here (kernel without NUMA, or a seccomp filter): nothing can
         * be bound to a node, so treat the machine as one node with every core. */
        t->n_numa_nodes = 1;
        t->numa_node = hw_nodes == 1 ? 0 : -1;
    } else {
        t->n_numa_nodes = hw_nodes;
        if (near_gpu) {
            cores = near_gpu->cpuset;
            t->numa_node = hwloc_bitmap_first(near_gpu->nodeset);
        } else if (!t->gpu_bus_id[0] && hw_nodes > 1)
            t->numa_node = -1; /* no GPU to be near: the CPU computes, on every core, from
                                  every memory controller (homes interleaved) */
        else
            t->numa_node = near_thread(topo, &cores);
    }
    /* An object without usable cores (a CPU-less memory node) is no place to pin threads. */
    if (hwloc_bitmap_iszero(cores))
        cores = all;
    to_cpu_set(topo, cores, &t->cores);
    t->n_cores = CPU_COUNT(&t->cores);
    describe(cores, numa_ok, t);
}

mvm_status mvm_topo_probe(const char *pci_bus_id, mvm_topo *out)
{
    if (!out)
        return mvm_fail(MVM_ERR_INVALID, "mvm_topo_probe: out is NULL");
    const char *busid = pci_bus_id ? pci_bus_id : "";
    size_t n = strlen(busid);
    if (n >= sizeof out->gpu_bus_id)
        return mvm_fail(MVM_ERR_INVALID,
                        "mvm_topo_probe: PCI bus id \"%.40s\" is longer than %zu characters",
                        busid, sizeof out->gpu_bus_id - 1);

    hwloc_topology_t topo;
    const int from_kernel = topology_from_kernel();
    mvm_status s = load_topology(&topo, n > 0 && !from_kernel);
    if (s != MVM_OK)
        return s;
    memset(out, 0, sizeof *out);
    memcpy(out->gpu_bus_id, busid, n + 1);
    fill(topo, from_kernel, out);
    hwloc_topology_destroy(topo);
    return MVM_OK;
}

/* ---------------------------------------------------------------------------------------
 * Placement
 */

static mvm_status check_topo(const mvm_topo *topo, const char *fn)
{
    if (!topo)
        return mvm_fail(MVM_ERR_INVALID, "%s: topo is NULL", fn);
    if (CPU_COUNT(&topo->cores) == 0)
        return mvm_fail(MVM_ERR_INVALID, "%s: topo has no cores", fn);
    return MVM_OK;
}

/* mbind works on whole pages, so the range is rounded outward: every page holding a byte
 * of it gets the policy. The end pages may also hold a neighbour's bytes; giving them a
 * node preference is harmless. MPOL_PREFERRED rather than MPOL_BIND: when the node is full
 * the pages spill to another node instead of the process being OOM-killed (anonymous
 * memory) or getting SIGBUS (memfd), since placement is an optimisation. On a MAP_SHARED
 * mapping this sets the shared policy of the file's pages. MPOL_MF_MOVE also moves pages
 * that were already touched elsewhere. */
static mvm_status bind_range(const mvm_topo *topo, char *addr, size_t len, size_t page)
{
    int node = topo->numa_node;
    if (numa_available() < 0)
        return MVM_OK;
    if (node >= TOPO_MAX_NODES)
        return mvm_fail(MVM_ERR_INVALID, "mvm_topo_place: NUMA node %d out of range", node);

    uintptr_t lo = (uintptr_t)addr & ~(uintptr_t)(page - 1);
    uintptr_t hi = ((uintptr_t)addr + len + page - 1) & ~(uintptr_t)(page - 1);
    unsigned long mask[TOPO_MAX_NODES / ULONG_BITS] = {0};
    int mode = MPOL_PREFERRED;
    if (node >= 0) {
        mask[(size_t)node / ULONG_BITS] |= 1UL << ((size_t)node % ULONG_BITS);
    } else { /* no node: threads on every core read the pages, so spread them over all */
        struct bitmask *allowed = numa_get_mems_allowed();
        for (unsigned i = 0; allowed && i < allowed->size && i < TOPO_MAX_NODES; i++)
            if (numa_bitmask_isbitset(allowed, i))
                mask[i / ULONG_BITS] |= 1UL << (i % ULONG_BITS);
        if (allowed)
            numa_bitmask_free(allowed);
        mode = MPOL_INTERLEAVE;
    }
    /* The kernel reads maxnode - 1 bits (libnuma passes size + 1 for the same reason). */
    if (mbind((void *)lo, hi - lo, mode, mask, TOPO_MAX_NODES + 1, MPOL_MF_MOVE) == 0)
        return MVM_OK;

    int err = errno;
    if (err == EFAULT)
        return mvm_fail(MVM_ERR_INVALID, "mvm_topo_place: [%p, +%zu) is not entirely mapped",
                        (void *)addr, len);
    /* EPERM/ENOSYS/EINVAL: a container or kernel that refuses NUMA policy; first touch
     * from the pinned threads still places the pages. Anything else is unexpected. */
    mvm_log(err == EPERM || err == ENOSYS || err == EINVAL ? MVM_LOG_DEBUG : MVM_LOG_WARN,
            "mbind of %zu bytes to %s failed: %s; placing by first touch only",
            (size_t)(hi - lo), node >= 0 ? "a node" : "every node, interleaved", strerror(err));
    return MVM_OK;
}

/* What of a range is touched: items of `item` bytes from `base`, each only its first `used`
 * bytes (a plain range: one item, all used). */
typedef struct touch_items {
    uintptr_t base;
    size_t item, used;
} touch_items;

typedef struct touch_part {
    pthread_t thread;
    char *lo, *hi; /* the bytes of the caller's range this part covers */
    size_t page;
    const touch_items *items;
    int cpu;       /* core to pin to */
} touch_part;

/* Faults in every page of [lo, hi) writable, preserving contents: an atomic OR with 0 on
 * one byte per page. It is one write fault (a plain read then write takes a read fault on
 * the zero page first, then a copy-on-write fault: measured ~1.7x slower on fresh
 * anonymous memory), and it cannot lose a byte written concurrently by someone else.
 * Only bytes inside the range are touched, never a neighbour's on a shared end page, nor
 * the bytes of an item past its used ones. */
static void touch_range(char *lo, char *hi, size_t page, const touch_items *it)
{
    for (uintptr_t p = (uintptr_t)lo; p < (uintptr_t)hi;) {
        size_t off = (p - it->base) % it->item;
        if (off >= it->used) { /* the item's unused tail: on to the next item */
            p += it->item - off;
            continue;
        }
        __atomic_fetch_or((volatile char *)p, 0, __ATOMIC_RELAXED);
        p = (p & ~(uintptr_t)(page - 1)) + page;
    }
}

static void *touch_worker(void *arg)
{
    touch_part *t = arg;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(t->cpu, &one);
    /* Pinned before the first touch, so the kernel allocates from this core's node. */
    int rc = pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    if (rc != 0)
        mvm_log(MVM_LOG_DEBUG, "pthread_setaffinity_np to core %d failed: %s", t->cpu,
                strerror(rc));
    touch_range(t->lo, t->hi, t->page, t->items);
    return NULL;
}

/* The k-th core (0-based) of a set with at least k + 1 cores. */
static int nth_core(const cpu_set_t *set, int k)
{
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, set) && k-- == 0)
            return cpu;
    return -1;
}

/* Part i of n: pages [i*q + min(i, r), ...) of the range's np pages (q = np / n,
 * r = np % n, so the first r parts get one page more), clipped to the range's bytes. */
static void set_part(touch_part *t, char *addr, size_t len, size_t page, size_t i, size_t n)
{
    uintptr_t base = (uintptr_t)addr & ~(uintptr_t)(page - 1);
    uintptr_t end = (uintptr_t)addr + len;
    size_t n_pages = (end - base + page - 1) / page;
    size_t q = n_pages / n, r = n_pages % n;
    uintptr_t lo = base + (i * q + (i < r ? i : r)) * page;
    uintptr_t hi = lo + (q + (i < r)) * page;
    t->lo = (char *)(lo > (uintptr_t)addr ? lo : (uintptr_t)addr);
    t->hi = (char *)(hi < end ? hi : end);
    t->page = page;
}

static size_t thread_count(const mvm_topo *topo, int n_threads, size_t n_pages)
{
    size_t n = n_threads > 0 ? (size_t)n_threads : (size_t)CPU_COUNT(&topo->cores);
    if (n_threads <= 0 && n > TOPO_DEFAULT_MAX_THREADS)
        n = TOPO_DEFAULT_MAX_THREADS;
    return n < n_pages ? n : n_pages;
}

/* Threads that cannot be created are not an error: the calling thread touches their parts
 * (the mbind policy, where there is one, still places those pages). */
static void touch_parallel(const mvm_topo *topo, char *addr, size_t len, size_t page,
                           const touch_items *items, int n_threads)
{
    uintptr_t first = (uintptr_t)addr / page, last = ((uintptr_t)addr + len - 1) / page;
    size_t n = thread_count(topo, n_threads, last - first + 1);
    touch_part *parts = calloc(n, sizeof *parts);
    if (!parts) {
        mvm_log(MVM_LOG_DEBUG, "mvm_topo_place: no memory for %zu threads; touching inline", n);
        touch_range(addr, addr + len, page, items);
        return;
    }
    int n_cores = CPU_COUNT(&topo->cores);
    size_t started = 0;
    for (; started < n; started++) {
        touch_part *t = &parts[started];
        set_part(t, addr, len, page, started, n);
        t->items = items;
        t->cpu = nth_core(&topo->cores, (int)(started % (size_t)n_cores));
        int rc = pthread_create(&t->thread, NULL, touch_worker, t);
        if (rc != 0) {
            mvm_log(MVM_LOG_DEBUG, "pthread_create failed: %s; touching %zu of %zu parts inline",
                    strerror(rc), n - started, n);
            break;
        }
    }
    for (size_t i = started; i < n; i++) {
        set_part(&parts[i], addr, len, page, i, n);
        touch_range(parts[i].lo, parts[i].hi, page, items);
    }
    for (size_t i = 0; i < started; i++)
        pthread_join(parts[i].thread, NULL);
    free(parts);
}

mvm_status mvm_topo_place_items(const mvm_topo *topo, void *addr, size_t n_items,
                                size_t item_bytes, size_t used_bytes, int n_threads)
{
    mvm_status s = check_topo(topo, "mvm_topo_place");
    if (s != MVM_OK)
        return s;
    if (used_bytes > item_bytes || (item_bytes && n_items > SIZE_MAX / item_bytes))
        return mvm_fail(MVM_ERR_INVALID, "mvm_topo_place: %zu items of %zu bytes, %zu used",
                        n_items, item_bytes, used_bytes);
    size_t len = n_items * item_bytes;
    if (len == 0)
        return MVM_OK;
    if (!addr)
        return mvm_fail(MVM_ERR_INVALID, "mvm_topo_place: addr is NULL with len %zu", len);
    if ((uintptr_t)addr > UINTPTR_MAX - len)
        return mvm_fail(MVM_ERR_INVALID, "mvm_topo_place: [%p, +%zu) wraps around", addr, len);

    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    s = bind_range(topo, addr, len, page);
    if (s != MVM_OK)
        return s;
    touch_items items = {(uintptr_t)addr, item_bytes, used_bytes};
    touch_parallel(topo, addr, len, page, &items, n_threads);
    return MVM_OK;
}

mvm_status mvm_topo_place(const mvm_topo *topo, void *addr, size_t len, int n_threads)
{
    return mvm_topo_place_items(topo, addr, 1, len, len, n_threads);
}

mvm_status mvm_topo_bind_thread(const mvm_topo *topo)
{
    mvm_status s = check_topo(topo, "mvm_topo_bind_thread");
    if (s != MVM_OK)
        return s;
    int rc = pthread_setaffinity_np(pthread_self(), sizeof topo->cores, &topo->cores);
    if (rc != 0)
        return mvm_fail(MVM_ERR_BACKEND, "pthread_setaffinity_np to %d cores failed: %s",
                        CPU_COUNT(&topo->cores), strerror(rc));
    return MVM_OK;
}

/* The number in a one-value file (memory.max's "max" is none); 0 when unreadable. */
static int file_u64(const char *dir, const char *name, uint64_t *v)
{
    char path[640], buf[64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    int ok = f && fgets(buf, sizeof buf, f) && sscanf(buf, "%" SCNu64, v) == 1;
    if (f)
        fclose(f);
    return ok;
}

/* The value of `key` in a memory.stat; 0 when absent. */
static int stat_u64(const char *dir, const char *key, uint64_t *v)
{
    char path[640], line[128], name[64];
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    FILE *f = fopen(path, "r");
    int ok = 0;
    while (f && !ok && fgets(line, sizeof line, f))
        ok = sscanf(line, "%63s %" SCNu64, name, v) == 2 && strcmp(name, key) == 0;
    if (f)
        fclose(f);
    return ok;
}

/* What a memory cgroup directory still allows: its limit less what it charges, but for its
 * inactive file pages (reclaimed first, as the kubelet's working set counts); UINT64_MAX
 * without a limit. v1 states the limit of the whole hierarchy; v2 one level's. */
static uint64_t cgroup_room(const char *dir, int v1)
{
    uint64_t limit, used, inactive = 0;
    if (!(v1 ? stat_u64(dir, "hierarchical_memory_limit", &limit)
             : file_u64(dir, "memory.max", &limit)) ||
        !file_u64(dir, v1 ? "memory.usage_in_bytes" : "memory.current", &used))
        return UINT64_MAX;
    stat_u64(dir, v1 ? "total_inactive_file" : "inactive_file", &inactive);
    used = used > inactive ? used - inactive : 0;
    return limit > used ? limit - used : 0;
}

/* The calling process's memory cgroup (v1's memory controller, else v2's, up every level
 * to the root): what it still allows, UINT64_MAX without a limit. Containers see their own
 * cgroup as the root. */
static uint64_t cgroup_available(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[512], v1[400] = "", v2[400] = "";
    while (f && fgets(line, sizeof line, f)) {
        char *path = strchr(line, ':') ? strchr(strchr(line, ':') + 1, ':') : NULL;
        if (!path)
            continue;
        path[strcspn(path, "\n")] = '\0';
        if (strncmp(line, "0::", 3) == 0)
            snprintf(v2, sizeof v2, "%s", path + 1);
        else if (strstr(line, ":memory:"))
            snprintf(v1, sizeof v1, "%s", path + 1);
    }
    if (f)
        fclose(f);
    char dir[520];
    if (v1[0]) {
        snprintf(dir, sizeof dir, "/sys/fs/cgroup/memory%s", v1);
        return cgroup_room(dir, 1);
    }
    /* v2: the path, then each parent (the root has no limit); unified or hybrid mounts */
    static const char *const roots[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
    uint64_t room = UINT64_MAX;
    while (v2[0] == '/' && v2[1]) {
        for (size_t r = 0; r < 2; r++) {
            snprintf(dir, sizeof dir, "%s%s", roots[r], v2);
            uint64_t here = cgroup_room(dir, 0);
            room = here < room ? here : room;
        }
        *strrchr(v2, '/') = '\0'; /* "/a/b" -> "/a" -> "" */
    }
    return room;
}

uint64_t mvm_topo_memory_available(int swappable)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long kib, avail = 0, swap = 0;
    int found = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            avail = kib, found |= 1;
        else if (sscanf(line, "SwapFree: %llu kB", &kib) == 1)
            swap = kib, found |= 2;
    }
    if (f)
        fclose(f);
    uint64_t machine = found == 3 ? (uint64_t)(avail + (swappable ? swap : 0)) << 10
                                  : UINT64_MAX;
    uint64_t cgroup = cgroup_available(); /* a container's own swap is not counted */
    return cgroup < machine ? cgroup : machine;
}

size_t mvm_topo_huge_page_in(const char *dir, int shared)
{
    char path[640], mode[160] = "";
    snprintf(path, sizeof path, "%s/%s", dir, shared ? "shmem_enabled" : "enabled");
    FILE *f = fopen(path, "r");
    int ok = f && fgets(mode, sizeof mode, f);
    if (f)
        fclose(f);
    /* the setting in force is the bracketed one: "always [madvise] never" */
    const char *from = ok ? strchr(mode, '[') : NULL, *to = from ? strchr(from, ']') : NULL;
    if (!to)
        return 0;
    char word[32];
    snprintf(word, sizeof word, "%.*s", (int)(to - from - 1), from + 1);
    static const char *const huge_shared[] = {"always", "within_size", "advise", "force"};
    static const char *const huge_anon[] = {"always", "madvise"};
    const char *const *on = shared ? huge_shared : huge_anon;
    size_t n_on = shared ? 4 : 2, k = 0;
    while (k < n_on && strcmp(word, on[k]) != 0)
        k++;
    uint64_t size;
    if (k == n_on || !file_u64(dir, "hpage_pmd_size", &size))
        return 0;
    return (size_t)size;
}

const char *mvm_topo_thp_dir = "/sys/kernel/mm/transparent_hugepage";

size_t mvm_topo_huge_page(int shared)
{
    return mvm_topo_huge_page_in(mvm_topo_thp_dir, shared);
}

mvm_status mvm_topo_check_memory(const char *what, uint64_t need, int swappable)
{
    uint64_t avail = mvm_topo_memory_available(swappable);
    if (need <= avail)
        return MVM_OK;
    return mvm_fail(MVM_ERR_NOMEM, "%s need %.1f GiB of memory and %.1f GiB are available (%s): "
                    "they do not fit in this machine's memory", what,
                    (double)need / 1073741824.0, (double)avail / 1073741824.0,
                    swappable ? "MemAvailable and free swap"
                              : "MemAvailable; pinned memory cannot be swapped out");
}
