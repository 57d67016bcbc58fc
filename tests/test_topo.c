/*
 * Tests for vmm/topo.c. Probing must never fail on an unknown or malformed bus id, the
 * cores it returns must be the calling thread's node's cores (checked against libnuma, not
 * hwloc), and placement must preserve every byte while leaving every page resident (and,
 * on a machine with several nodes, on the chosen node).
 */
#include <errno.h>
#include <hwloc.h>
#include <hwloc/glibc-sched.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmm/topo.h"

static int n_pass, n_fail, n_skip;

/* A check this machine cannot make: counted, and printed as "skip: why" for the summary
 * `make test` prints (scripts/skip_summary.sh). */
#define SKIPPED(...) (n_skip++, printf("skip: " __VA_ARGS__))

#define CHECK(cond, ...)                                                                    \
    do {                                                                                    \
        if (cond) {                                                                         \
            n_pass++;                                                                       \
        } else {                                                                            \
            n_fail++;                                                                       \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                          \
            printf(__VA_ARGS__);                                                            \
            printf(" (last error: %s)\n", mvm_last_error());                                \
        }                                                                                   \
    } while (0)

#define MIB (1024u * 1024u)

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* ------------------------------------------------------------------------------------- */

/* Every core in t->cores is a CPU of t->numa_node according to libnuma. */
static void check_cores_on_node(const mvm_topo *t, const char *what)
{
    struct bitmask *cpus = numa_allocate_cpumask();
    CHECK(numa_node_to_cpus(t->numa_node, cpus) == 0, "%s: numa_node_to_cpus(%d)", what,
          t->numa_node);
    int outside = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &t->cores) && !numa_bitmask_isbitset(cpus, (unsigned)c))
            outside++;
    CHECK(outside == 0, "%s: %d cores are not on node %d", what, outside, t->numa_node);
    numa_free_cpumask(cpus);
}

static void check_probe_no_gpu(const char *busid)
{
    mvm_topo t;
    memset(&t, 0xa5, sizeof t); /* poison: every field must be written */
    const char *what = busid ? busid : "(null)";
    CHECK(mvm_topo_probe(busid, &t) == MVM_OK, "probe %s", what);
    CHECK(t.gpu_found == 0, "probe %s: gpu_found %d", what, t.gpu_found);
    CHECK(strcmp(t.gpu_bus_id, busid ? busid : "") == 0, "probe %s: gpu_bus_id \"%s\"", what,
          t.gpu_bus_id);
    CHECK(t.n_cores >= 1 && t.n_cores <= t.n_cores_total, "probe %s: %d of %d cores", what,
          t.n_cores, t.n_cores_total);
    CHECK(CPU_COUNT(&t.cores) == t.n_cores, "probe %s: cpu_set has %d, n_cores %d", what,
          CPU_COUNT(&t.cores), t.n_cores);
    CHECK(t.summary[0] != '\0' && memchr(t.summary, '\0', sizeof t.summary),
          "probe %s: summary", what);
    if (busid && busid[0])
        CHECK(strstr(t.summary, "not found") && strstr(t.summary, busid),
              "probe %s: summary \"%s\"", what, t.summary);
    if (numa_available() < 0) {
        CHECK(t.n_numa_nodes == 1 && t.numa_node <= 0, "probe %s: no NUMA, node %d of %d",
              what, t.numa_node, t.n_numa_nodes);
        return;
    }
    /* hwloc counts only the nodes this process may use (cgroup cpuset.mems). */
    CHECK(t.n_numa_nodes >= 1 && t.n_numa_nodes <= numa_num_configured_nodes(),
          "probe %s: %d nodes, libnuma %d", what, t.n_numa_nodes, numa_num_configured_nodes());
    if ((!busid || !busid[0]) && t.n_numa_nodes > 1) { /* no GPU: every core, every node */
        CHECK(t.numa_node == -1 && t.n_cores == t.n_cores_total,
              "probe %s: node %d, %d of %d cores", what, t.numa_node, t.n_cores,
              t.n_cores_total);
        printf("probe %s: %s\n", what, t.summary);
        return;
    }
    CHECK(t.numa_node >= 0 && t.numa_node <= numa_max_node(), "probe %s: node %d", what,
          t.numa_node);
    check_cores_on_node(&t, what);
    printf("probe %s: %s\n", what, t.summary);
}

static void test_probe_invalid(void)
{
    mvm_topo t;
    CHECK(mvm_topo_probe(NULL, NULL) == MVM_ERR_INVALID, "probe with out NULL");
    char longid[64];
    memset(longid, '0', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    CHECK(mvm_topo_probe(longid, &t) == MVM_ERR_INVALID, "probe with a 63-char bus id");
    CHECK(strstr(mvm_last_error(), "bus id") != NULL, "message names the bus id");
}

/* Two sockets of one core each, as hwloc's synthetic topology (its binding is a no-op;
 * libnuma still answers for this machine): without a GPU every core and no one node,
 * described as interleaved; a GPU that is not found, the calling thread's node alone. */
static void test_probe_two_nodes(void)
{
    if (numa_available() < 0) {
        SKIPPED("no NUMA, the two-node choice is not tested\n");
        return;
    }
    /* HWLOC_COMPONENTS (the sanitizer builds' "-pci") would keep hwloc from reading
     * HWLOC_SYNTHETIC; a synthetic topology has no PCI devices anyway */
    const char *comp = getenv("HWLOC_COMPONENTS");
    char saved[64] = "";
    if (comp)
        snprintf(saved, sizeof saved, "%s", comp);
    unsetenv("HWLOC_COMPONENTS");
    setenv("HWLOC_SYNTHETIC", "package:2 [numa] core:1 pu:1", 1);
    mvm_topo t, gpu;
    memset(&t, 0xa5, sizeof t);
    CHECK(mvm_topo_probe(NULL, &t) == MVM_OK, "probe two nodes");
    CHECK(mvm_topo_probe("0000:99:00.0", &gpu) == MVM_OK, "probe two nodes, a GPU");
    unsetenv("HWLOC_SYNTHETIC");
    if (comp)
        setenv("HWLOC_COMPONENTS", saved, 1);
    CHECK(t.n_numa_nodes == 2 && t.numa_node == -1, "two nodes: %d, node %d", t.n_numa_nodes,
          t.numa_node);
    CHECK(t.n_cores == 2 && t.n_cores_total == 2 && CPU_ISSET(0, &t.cores) &&
          CPU_ISSET(1, &t.cores), "two nodes: %d of %d cores", t.n_cores, t.n_cores_total);
    CHECK(strstr(t.summary, "no GPU") && strstr(t.summary, "interleaved"),
          "two nodes: summary \"%s\"", t.summary);
    CHECK(gpu.numa_node >= 0 && gpu.n_cores == 1, "two nodes, GPU not found: node %d, %d cores",
          gpu.numa_node, gpu.n_cores);
    printf("two nodes: %s\n", t.summary);
}

/* Some PCI device hwloc keeps (a bridge, a NIC, a GPU) stands in for a GPU: probing its bus
 * id must find it, near the cores and node where hwloc's PCI discovery puts it (the probe
 * reads them from sysfs without that discovery: vmm/topo.c, device_parent), under either
 * form of the id; with anything after the id, it is not found. */
static void test_probe_found(void)
{
    hwloc_topology_t topo;
    hwloc_topology_init(&topo);
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    hwloc_topology_load(topo);
    hwloc_obj_t dev = hwloc_get_next_pcidev(topo, NULL);
    if (!dev) {
        SKIPPED("hwloc sees no PCI device here, the found path is not tested\n");
        hwloc_topology_destroy(topo);
        return;
    }
    char busid[32], shortid[32], longer[40];
    snprintf(busid, sizeof busid, "%04x:%02x:%02x.%01x", dev->attr->pcidev.domain,
             dev->attr->pcidev.bus, dev->attr->pcidev.dev, dev->attr->pcidev.func);
    snprintf(shortid, sizeof shortid, "%02x:%02x.%01x", dev->attr->pcidev.bus,
             dev->attr->pcidev.dev, dev->attr->pcidev.func);
    snprintf(longer, sizeof longer, "%s:1", busid);
    hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(topo, dev);
    cpu_set_t want;
    hwloc_cpuset_to_glibc_sched_affinity(topo, near->cpuset, &want, sizeof want);
    const int want_node = hwloc_bitmap_first(near->nodeset);
    const int domain0 = dev->attr->pcidev.domain == 0; /* the short form names its devices */
    hwloc_topology_destroy(topo);

    mvm_topo t;
    CHECK(mvm_topo_probe(busid, &t) == MVM_OK, "probe %s", busid);
    CHECK(t.gpu_found == 1, "probe %s: gpu_found %d", busid, t.gpu_found);
    CHECK(t.n_cores >= 1 && t.n_cores <= t.n_cores_total, "probe %s: %d of %d cores", busid,
          t.n_cores, t.n_cores_total);
    CHECK(strstr(t.summary, busid) && strstr(t.summary, " on "), "probe %s: summary \"%s\"",
          busid, t.summary);
    CHECK(CPU_EQUAL(&t.cores, &want), "probe %s: not the cores hwloc puts the device near",
          busid);
    CHECK(numa_available() < 0 || t.numa_node == want_node, "probe %s: node %d, hwloc's %d",
          busid, t.numa_node, want_node);
    printf("probe %s: %s\n", busid, t.summary);
    mvm_topo s;
    if (domain0)
        CHECK(mvm_topo_probe(shortid, &s) == MVM_OK && s.gpu_found == 1 &&
                  CPU_EQUAL(&s.cores, &t.cores) && s.numa_node == t.numa_node,
              "probe %s", shortid);
    CHECK(mvm_topo_probe(longer, &s) == MVM_OK && s.gpu_found == 0, "probe %s", longer);
}

/* ------------------------------------------------------------------------------------- */

static uint64_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fill_pattern(unsigned char *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)next_random(&seed);
}

/* Index of the first byte that differs from the pattern, or len. */
static size_t check_pattern(const unsigned char *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != (unsigned char)next_random(&seed))
            return i;
    return len;
}

static void *map_anon(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* With several nodes, every page of [p, p+len) must be on the topo's node. */
static void check_on_node(const mvm_topo *t, void *p, size_t len, const char *what)
{
    if (numa_available() < 0 || numa_num_configured_nodes() < 2) {
        SKIPPED("%s: one NUMA node, page placement not checked\n", what);
        return;
    }
    size_t n = len / page_size();
    void **pages = malloc(n * sizeof *pages);
    int *status = malloc(n * sizeof *status);
    for (size_t i = 0; i < n; i++)
        pages[i] = (char *)p + i * page_size();
    long rc = move_pages(0, n, pages, NULL, status, 0);
    size_t off = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        off += status[i] != t->numa_node;
    CHECK(rc == 0 && off == 0, "%s: move_pages rc %ld, %zu of %zu pages off node %d", what,
          rc, off, n, t->numa_node);
    free(pages);
    free(status);
}

/* place() on [p+off, p+off+len) of a patterned buffer changes no byte, inside or outside. */
static void check_place_preserves(const mvm_topo *t, unsigned char *p, size_t size,
                                  size_t off, size_t len, int n_threads, const char *what)
{
    uint64_t seed = 0x9e3779b97f4a7c15u + (uint64_t)n_threads;
    fill_pattern(p, size, seed);
    CHECK(mvm_topo_place(t, p + off, len, n_threads) == MVM_OK, "%s: place", what);
    size_t bad = check_pattern(p, size, seed);
    CHECK(bad == size, "%s: byte %zu changed", what, bad);
}

static void test_place_anon(const mvm_topo *t)
{
    size_t size = 8 * MIB;
    unsigned char *p = map_anon(size);
    CHECK(p != NULL, "mmap 8 MiB");
    if (!p)
        return;
    check_place_preserves(t, p, size, 0, size, 0, "anon, default threads");
    check_place_preserves(t, p, size, 0, size, 1, "anon, 1 thread");
    check_place_preserves(t, p, size, 0, size, 3, "anon, 3 threads");
    /* Both ends off a page boundary: only bytes inside may be touched. */
    check_place_preserves(t, p, size, 123, size - 123 - 4567, 3, "anon, unaligned");
    check_place_preserves(t, p, size, 10, 100, 0, "anon, inside one page");
    check_place_preserves(t, p, size, page_size() - 1, 2, 5, "anon, 2 bytes over a boundary");
    check_place_preserves(t, p, size, 0, 3 * page_size(), 1000, "anon, more threads than pages");
    check_on_node(t, p, size, "anon");
    munmap(p, size);
}

static void test_place_memfd(const mvm_topo *t)
{
    size_t size = 8 * MIB;
    int fd = memfd_create("test_topo", 0);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)size) == 0, "memfd_create/ftruncate: %s",
          strerror(errno));
    unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED, "mmap memfd: %s", strerror(errno));
    if (p == MAP_FAILED) {
        close(fd);
        return;
    }
    check_place_preserves(t, p, size, 0, size, 0, "memfd");
    /* The data is in the file, not just in this mapping. */
    unsigned char *q = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(q != MAP_FAILED && check_pattern(q, size, 0x9e3779b97f4a7c15u) == size,
          "memfd: a second mapping sees the pattern");
    check_on_node(t, p, size, "memfd");
    if (q != MAP_FAILED)
        munmap(q, size);
    munmap(p, size);
    close(fd);
}

/* A fresh mapping is not resident; after place() every page is, and still reads zero. */
static void test_place_fresh(const mvm_topo *t)
{
    size_t size = 4 * MIB + 3 * page_size(), n = size / page_size();
    unsigned char *p = map_anon(size);
    unsigned char *vec = malloc(n);
    CHECK(p != NULL && vec != NULL, "mmap fresh");
    if (!p || !vec)
        return;
    madvise(p, size, MADV_NOHUGEPAGE); /* keep residency per page, not per 2 MiB */
    CHECK(mincore(p, size, vec) == 0, "mincore before: %s", strerror(errno));
    size_t resident = 0;
    for (size_t i = 0; i < n; i++)
        resident += vec[i] & 1;
    CHECK(resident == 0, "fresh mapping: %zu of %zu pages already resident", resident, n);

    CHECK(mvm_topo_place(t, p, size, 0) == MVM_OK, "place fresh");
    CHECK(mincore(p, size, vec) == 0, "mincore after: %s", strerror(errno));
    resident = 0;
    for (size_t i = 0; i < n; i++)
        resident += vec[i] & 1;
    CHECK(resident == n, "after place: %zu of %zu pages resident", resident, n);
    size_t nonzero = 0;
    for (size_t i = 0; i < size; i++)
        nonzero += p[i] != 0;
    CHECK(nonzero == 0, "after place: %zu bytes not zero", nonzero);
    check_on_node(t, p, size, "fresh");
    free(vec);
    munmap(p, size);
}

typedef struct place_job {
    const mvm_topo *t;
    size_t size;
    int ok;
} place_job;

static void *place_thread(void *arg)
{
    place_job *j = arg;
    unsigned char *p = map_anon(j->size);
    if (!p)
        return NULL;
    uint64_t seed = (uint64_t)(uintptr_t)p | 1;
    fill_pattern(p, j->size, seed);
    j->ok = mvm_topo_place(j->t, p, j->size, 2) == MVM_OK &&
            check_pattern(p, j->size, seed) == j->size;
    munmap(p, j->size);
    return NULL;
}

/* place() is called from several threads at once (space creation on many threads). */
static void test_place_concurrent(const mvm_topo *t)
{
    place_job jobs[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        jobs[i] = (place_job){.t = t, .size = 2 * MIB + (size_t)i * 777, .ok = 0};
        pthread_create(&th[i], NULL, place_thread, &jobs[i]);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].ok, "concurrent place %d", i);
    }
}

/* With a working mbind, a range with a hole is refused instead of crashing on the hole. */
static void test_place_hole(const mvm_topo *t)
{
    if (numa_available() < 0) {
        SKIPPED("no NUMA policy calls, a range with a hole is not checked\n");
        return;
    }
    size_t pg = page_size();
    unsigned char *p = map_anon(3 * pg);
    CHECK(p != NULL, "mmap 3 pages");
    if (!p)
        return;
    munmap(p + pg, pg);
    pid_t pid = fork(); /* a crash in the child is a failure here, not the end of the test */
    if (pid == 0)
        _exit(mvm_topo_place(t, p, 3 * pg, 1) == MVM_ERR_INVALID ? 0 : 1);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "range with a hole: status %#x", st);
    munmap(p, pg);
    munmap(p + 2 * pg, pg);
}

/* Items: each one's used bytes are faulted in (all of their pages, the partial last one
 * too), its tail's whole pages are not, on 1 thread and on several; nothing changes. */
static void test_place_items(const mvm_topo *t)
{
    size_t pg = page_size(), item = 5 * pg, used = 2 * pg + 10, n_items = 7;
    size_t size = n_items * item, n = size / pg;
    for (int threads = 1; threads <= 3; threads += 2) {
        unsigned char *p = map_anon(size);
        unsigned char *vec = malloc(n);
        CHECK(p != NULL && vec != NULL, "mmap items");
        if (!p || !vec)
            return;
        madvise(p, size, MADV_NOHUGEPAGE);
        CHECK(mvm_topo_place_items(t, p, n_items, item, used, threads) == MVM_OK,
              "place items, %d threads", threads);
        CHECK(mincore(p, size, vec) == 0, "mincore items: %s", strerror(errno));
        size_t wrong = 0;
        for (size_t i = 0; i < n; i++)
            wrong += (vec[i] & 1) != (i % 5 < 3); /* pages 0-2 of each item hold used bytes */
        CHECK(wrong == 0, "items, %d threads: %zu pages resident where they should not be, "
              "or not where they should", threads, wrong);
        size_t nonzero = 0;
        for (size_t i = 0; i < size; i++)
            nonzero += p[i] != 0;
        CHECK(nonzero == 0, "items: %zu bytes not zero", nonzero);
        munmap(p, size);
        free(vec);
    }
    char buf[64];
    CHECK(mvm_topo_place_items(t, buf, 2, 32, 33, 0) == MVM_ERR_INVALID, "used > item");
    CHECK(mvm_topo_place_items(t, buf, SIZE_MAX / 4, 8, 8, 0) == MVM_ERR_INVALID,
          "items overflow");
    CHECK(mvm_topo_place_items(t, buf, 0, 32, 32, 0) == MVM_OK, "no items");
}

/* No node (no GPU on several nodes): the pages are interleaved over every node the process
 * may use, one node here as anywhere. */
static void test_place_interleaved(const mvm_topo *t)
{
    if (numa_available() < 0) {
        SKIPPED("no NUMA, interleaving not tested\n");
        return;
    }
    mvm_topo all = *t;
    all.numa_node = -1;
    size_t size = 4 * page_size();
    unsigned char *p = map_anon(size);
    CHECK(p != NULL, "mmap interleaved");
    if (!p)
        return;
    CHECK(mvm_topo_place(&all, p, size, 1) == MVM_OK, "place interleaved");
    int mode = -1;
    CHECK(get_mempolicy(&mode, NULL, 0, p, MPOL_F_ADDR) == 0 && mode == MPOL_INTERLEAVE,
          "interleaved: policy %d (%s)", mode, strerror(errno));
    mvm_topo one = *t;
    if (one.numa_node >= 0) {
        CHECK(mvm_topo_place(&one, p, size, 1) == MVM_OK, "place on node");
        CHECK(get_mempolicy(&mode, NULL, 0, p, MPOL_F_ADDR) == 0 && mode == MPOL_PREFERRED,
              "on node %d: policy %d", one.numa_node, mode);
    }
    munmap(p, size);
}

/* Writes `text` to dir/name; 0 on success. */
static int write_file(const char *dir, const char *name, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0;
    return (f ? fclose(f) : 0) == 0 && ok ? 0 : -1;
}

/* A memory cgroup's limit caps what is available (a container's): a child process moves
 * into a new cgroup v1 memory group of 256 MiB under its own, where root may make one (else
 * the check is skipped), and must see at most that; then it moves back and removes it. */
static void test_memory_cgroup(void)
{
    uint64_t machine = mvm_topo_memory_available(1);
    CHECK(machine > 0 && machine != UINT64_MAX, "available memory: %llu",
          (unsigned long long)machine);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = fopen("/proc/self/cgroup", "r");
        char line[512], parent[600] = "", dir[700];
        while (f && fgets(line, sizeof line, f))
            if (strstr(line, ":memory:")) {
                line[strcspn(line, "\n")] = '\0';
                snprintf(parent, sizeof parent, "/sys/fs/cgroup/memory%s",
                         strstr(line, ":memory:") + 8);
            }
        if (f)
            fclose(f);
        snprintf(dir, sizeof dir, "%s/moevm-test-%d", parent, (int)getpid());
        char me[32];
        snprintf(me, sizeof me, "%d", (int)getpid());
        if (!parent[0] || mkdir(dir, 0755) != 0)
            _exit(77);
        int ok = write_file(dir, "memory.limit_in_bytes", "268435456") == 0 &&
                 write_file(dir, "cgroup.procs", me) == 0;
        uint64_t seen = ok ? mvm_topo_memory_available(1) : 0;
        write_file(parent, "cgroup.procs", me);
        rmdir(dir);
        _exit(!ok ? 77 : seen > 0 && seen <= (256u << 20) ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status),
          "cgroup child: status %d", status);
    if (WEXITSTATUS(status) == 77)
        SKIPPED("no memory cgroup to make here, the container limit is not tested\n");
    else
        CHECK(WEXITSTATUS(status) == 0, "a 256 MiB cgroup: the child saw more");
}

static void test_place_invalid(const mvm_topo *t)
{
    char buf[16];
    mvm_topo empty = *t;
    CPU_ZERO(&empty.cores);
    mvm_topo far = *t;
    far.numa_node = 5000;
    CHECK(mvm_topo_place(NULL, buf, sizeof buf, 0) == MVM_ERR_INVALID, "place topo NULL");
    CHECK(mvm_topo_place(t, NULL, 10, 0) == MVM_ERR_INVALID, "place addr NULL, len 10");
    CHECK(mvm_topo_place(t, NULL, 0, 0) == MVM_OK, "place addr NULL, len 0");
    CHECK(mvm_topo_place(&empty, buf, sizeof buf, 0) == MVM_ERR_INVALID, "place no cores");
    CHECK(mvm_topo_place(t, (void *)(UINTPTR_MAX - 4), 100, 0) == MVM_ERR_INVALID,
          "place wrapping range");
    if (numa_available() >= 0)
        CHECK(mvm_topo_place(&far, buf, sizeof buf, 0) == MVM_ERR_INVALID, "place node 5000");
    CHECK(mvm_topo_bind_thread(NULL) == MVM_ERR_INVALID, "bind topo NULL");
    CHECK(mvm_topo_bind_thread(&empty) == MVM_ERR_INVALID, "bind no cores");
}

static void test_bind_thread(const mvm_topo *t)
{
    CHECK(mvm_topo_bind_thread(t) == MVM_OK, "bind_thread");
    cpu_set_t now, extra;
    CHECK(sched_getaffinity(0, sizeof now, &now) == 0, "sched_getaffinity: %s",
          strerror(errno));
    CPU_AND(&extra, &now, &t->cores);
    CHECK(CPU_COUNT(&now) > 0 && CPU_EQUAL(&extra, &now), "affinity %d cores, %d outside topo",
          CPU_COUNT(&now), CPU_COUNT(&now) - CPU_COUNT(&extra));
    int cpu = sched_getcpu();
    CHECK(cpu >= 0 && CPU_ISSET(cpu, &t->cores), "running on core %d", cpu);
}

int main(void)
{
    check_probe_no_gpu(NULL);
    check_probe_no_gpu("");
    check_probe_no_gpu("0000:ff:1f.7");
    check_probe_no_gpu("zz");
    test_probe_invalid();
    test_probe_found();
    test_probe_two_nodes();

    mvm_topo t;
    if (mvm_topo_probe(NULL, &t) != MVM_OK) {
        printf("FAIL: probe: %s\n%d passed, %d failed\n", mvm_last_error(), n_pass, n_fail + 1);
        return 1;
    }
    test_place_anon(&t);
    test_place_memfd(&t);
    test_place_fresh(&t);
    test_place_concurrent(&t);
    test_place_hole(&t);
    test_place_items(&t);
    test_place_interleaved(&t);
    test_memory_cgroup();
    test_place_invalid(&t);
    test_bind_thread(&t);

    printf("%d passed, %d failed, %d skipped\n", n_pass, n_fail, n_skip);
    return n_fail != 0;
}
