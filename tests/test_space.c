/*
 * Unit tests of the expert space, run once per backend: `test_space host`, and
 * `test_space cuda` against tests/fakecuda (whose device memory is host memory, so the
 * test can read expert addresses directly and compare them with the weights).
 *
 * Weights are random per expert (never zeros), so a page mapped to the wrong chunk, a copy
 * of the wrong length or a stale chunk shows up as a byte mismatch.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "moevm/moevm.h"

#define PAGE (64u << 10)

static mvm_backend_kind backend;
static bool on_fake; /* cuda backend over fakecuda: copies can be slowed, streams held */

/* fakecuda's test controls, looked up at run time (absent on the host backend). */
static void (*fake_set_fail)(const char *);
static int (*fake_live_handles)(void);
static void (*fake_stream_hold)(void *, int);
static void (*fake_set_event_sync_delay_us)(unsigned long long);
static void (*fake_hold_maps)(int);
static int (*fake_wait_map_held)(unsigned);
static void (*fake_hold_copies)(int);
static int (*fake_wait_copy_held)(unsigned);
static void (*fake_pass_copies)(unsigned);
static void (*fake_set_copy_delay_us)(unsigned long long);
static unsigned long (*fake_copies_begun)(void);
static unsigned long (*fake_calls)(const char *);

static mvm_space *make_space(uint32_t layers, uint32_t experts, uint64_t bytes,
                             uint32_t budget_pages)
{
    mvm_space_desc d;
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    d.n_layers = layers;
    d.n_experts = experts;
    d.expert_bytes = bytes;
    d.device_budget = (uint64_t)budget_pages * PAGE;
    d.page_size = PAGE;
    d.backend = backend;
    mvm_space *sp = NULL;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    return sp;
}

/* Expert (l, e)'s weights: random bytes from a seed of its own, so that the test can make
 * them again without trusting the space's copy. */
static void weights_of(uint32_t l, uint32_t e, uint8_t *out, uint64_t bytes)
{
    uint64_t s = l * 1000 + e + 1;
    for (uint64_t i = 0; i < bytes; i++)
        out[i] = (uint8_t)check_rng_next(&s);
}

static void fill(mvm_space *sp, uint32_t layers, uint32_t experts, uint64_t bytes)
{
    for (uint32_t l = 0; l < layers; l++)
        for (uint32_t e = 0; e < experts; e++)
            weights_of(l, e, mvm_expert_home(sp, l, e), bytes);
}

/* Whether expert (l, e), filled by fill(), holds its weights: each resident page read
 * through the expert's address, each other page in its home and, where homes are mapped,
 * through the address too; where a kernel can read the homes in place, every page through
 * the home's device address (the fake's device reads host memory). The weights are made
 * again, not taken from the home. */
static bool reads_match(mvm_space *sp, uint32_t l, uint32_t e, uint64_t bytes)
{
    mvm_space_info info;
    mvm_space_get_info(sp, &info);
    uint8_t *want = malloc(bytes);
    if (!want)
        return false;
    weights_of(l, e, want, bytes);
    const uint8_t *addr = mvm_expert_addr(sp, l, e), *home = mvm_expert_home(sp, l, e);
    bool ok = true;
    for (uint32_t p = 0; ok && p * info.page_size < bytes; p++) {
        mvm_page_state s;
        mvm_page_get_state(sp, l, e, p, &s);
        uint64_t off = p * info.page_size;
        uint64_t len = bytes - off < info.page_size ? bytes - off : info.page_size;
        if (s == MVM_PAGE_RESIDENT)
            ok = memcmp(addr + off, want + off, len) == 0;
        else /* at home, or loading (still mapped at home until its copy lands) */
            ok = memcmp(home + off, want + off, len) == 0 &&
                 (!info.home_mapped || memcmp(addr + off, want + off, len) == 0);
        const uint8_t *in_place = mvm_expert_home_device(sp, l, e);
        ok = ok && (!info.home_readable || memcmp(in_place + off, want + off, len) == 0);
    }
    free(want);
    return ok;
}

static mvm_stats stats_of(mvm_space *sp)
{
    mvm_stats s;
    CHECK_ST(mvm_space_get_stats(sp, &s), MVM_OK);
    return s;
}

static void test_bad_inputs(void)
{
    mvm_space_desc d;
    mvm_space *sp = NULL;
    CHECK_ST(mvm_space_create(NULL, &sp), MVM_ERR_INVALID);
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    d.backend = backend;
    d.page_size = PAGE;
    d.n_layers = 0, d.n_experts = 4, d.expert_bytes = 100;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "layers") != NULL);
    d.n_layers = 2, d.expert_bytes = 0;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_ERR_INVALID);
    d.expert_bytes = 100, d.device_budget = PAGE - 1;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "smaller than one page") != NULL);
    d.device_budget = 0, d.device_budget_frac = 0;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_ERR_INVALID);
    d.device_budget = PAGE, d.page_size = 4096 + 1;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "granularity") != NULL);
    d.page_size = PAGE, d.n_layers = 1u << 20, d.n_experts = 1u << 10, d.expert_bytes = 1u << 30;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_ERR_INVALID);
    d.n_layers = 1u << 15, d.n_experts = 1u << 15, d.expert_bytes = 1ull << 40; /* 2^70 */
    CHECK_ST(mvm_space_create(&d, &sp), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "exceeds") != NULL);
    CHECK(sp == NULL);

    sp = make_space(2, 3, 3 * PAGE, 4);
    CHECK(mvm_expert_addr(sp, 2, 0) == NULL && mvm_expert_addr(sp, 0, 3) == NULL);
    CHECK(mvm_expert_home(sp, 2, 0) == NULL);
    CHECK_ST(mvm_make_resident(sp, 2, 0, MVM_ALL_PAGES), MVM_ERR_RANGE);
    CHECK_ST(mvm_make_resident(sp, 0, 3, 1), MVM_ERR_RANGE);
    CHECK_ST(mvm_make_resident(sp, 0, 0, 4), MVM_ERR_RANGE);
    CHECK_ST(mvm_prefetch(sp, 0, 9, 1, NULL), MVM_ERR_RANGE);
    CHECK_ST(mvm_evict(sp, 5, 0, 0), MVM_ERR_RANGE);
    CHECK_ST(mvm_evict(sp, 0, 0, 4), MVM_ERR_RANGE);
    CHECK_ST(mvm_pin(sp, 0, 7), MVM_ERR_RANGE);
    CHECK_ST(mvm_unpin(sp, 0, 0), MVM_ERR_INVALID); /* not pinned */
    mvm_page_state ps;
    CHECK_ST(mvm_page_get_state(sp, 0, 0, 3, &ps), MVM_ERR_RANGE);
    CHECK_ST(mvm_expert_residency(sp, 0, 0, NULL), MVM_ERR_INVALID);
    mvm_move *m = NULL;
    CHECK_ST(mvm_make_resident_async(sp, 0, 0, 1, &m), MVM_OK);
    CHECK_ST(mvm_move_wait(m, -1), MVM_OK);
    CHECK_ST(mvm_move_release(m), MVM_OK);
    CHECK_ST(mvm_move_release(m), MVM_ERR_INVALID); /* released twice */
    CHECK_ST(mvm_move_wait(NULL, 0), MVM_ERR_INVALID);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK_ST(mvm_space_destroy(sp), MVM_ERR_INVALID); /* destroyed twice */
    CHECK_ST(mvm_space_destroy(NULL), MVM_ERR_INVALID);
    CHECK_ST(mvm_make_resident(sp, 0, 0, 1), MVM_ERR_INVALID);

    setenv("MOEVM_GPU_BUDGET", "12Q", 1);
    CHECK_ST(mvm_space_desc_init(&d), MVM_ERR_OPTION);
    CHECK(strstr(mvm_last_error(), "MOEVM_GPU_BUDGET=12Q") != NULL);
    unsetenv("MOEVM_GPU_BUDGET");
}

static void test_layout(void)
{
    uint64_t bytes = 2 * PAGE + 123; /* three pages, the last partly used */
    mvm_space *sp = make_space(3, 5, bytes, 6);
    mvm_space_info info;
    CHECK_ST(mvm_space_get_info(sp, &info), MVM_OK);
    CHECK(info.page_size == PAGE);
    CHECK(info.pages_per_expert == 3 && info.expert_stride == 3 * PAGE);
    CHECK(info.device_pages == 6);
    CHECK(info.reserved_bytes == 15 * info.expert_stride);
    CHECK(strcmp(info.backend, backend == MVM_BACKEND_HOST ? "host" : "cuda") == 0);
    /* Homes are mapped on host, and on devices with HOST_NUMA VMM where MOEVM_HOME_MAP=on
     * asks for it (off is the default); never where the fake plays a device without it. */
    const char *host_numa = getenv("FAKECUDA_HOST_NUMA"), *home_map = getenv("MOEVM_HOME_MAP");
    bool unmapped = (host_numa && !strcmp(host_numa, "0")) || !home_map || strcmp(home_map, "on");
    CHECK(info.home_mapped == !(backend == MVM_BACKEND_CUDA && unmapped));
    /* A kernel reads any home in place on cuda (the pinned homes' device pointer, or the
     * HOST_NUMA home view), mapped or not: one address per expert, a stride apart. */
    CHECK(info.home_readable == (backend == MVM_BACKEND_CUDA));
    const uintptr_t dev0 = (uintptr_t)mvm_expert_home_device(sp, 0, 0);
    CHECK((dev0 != 0) == info.home_readable);
    for (uint32_t l = 0; l < 3; l++)
        for (uint32_t e = 0; e < 5; e++) {
            uint64_t want = info.base + (l * 5 + e) * info.expert_stride;
            CHECK((uint64_t)(uintptr_t)mvm_expert_addr(sp, l, e) == want);
            CHECK((uintptr_t)mvm_expert_home(sp, l, e) % PAGE == 0);
            CHECK((uintptr_t)mvm_expert_home_device(sp, l, e) ==
                  (dev0 ? dev0 + (l * 5 + e) * info.expert_stride : 0));
        }
    CHECK(mvm_expert_home_device(sp, 3, 0) == NULL && mvm_expert_home_device(NULL, 0, 0) == NULL);
    /* Registered homes the driver gives no device pointer for: the space works, and says
     * that nothing reads its homes in place. */
    if (backend == MVM_BACKEND_CUDA && unmapped) {
        fake_set_fail("cuMemHostGetDevicePointer:1");
        mvm_space *blind = make_space(1, 2, PAGE, 2);
        fake_set_fail("");
        mvm_space_info bi;
        CHECK_ST(mvm_space_get_info(blind, &bi), MVM_OK);
        CHECK(!bi.home_readable && mvm_expert_home_device(blind, 0, 0) == NULL);
        CHECK_ST(mvm_make_resident(blind, 0, 1, MVM_ALL_PAGES), MVM_OK);
        CHECK_ST(mvm_space_destroy(blind), MVM_OK);
    }
    /* Page-aligned however the system happens to place the mapping (it promises 4 KiB):
     * eight more spaces alive at once would all be aligned by luck 1 time in 16^8. */
    mvm_space *more[8];
    for (uint32_t i = 0; i < 8; i++) {
        more[i] = make_space(1, 1 + i, PAGE + 4096 * i, 2);
        CHECK((uintptr_t)mvm_expert_home(more[i], 0, 0) % PAGE == 0);
    }
    for (uint32_t i = 0; i < 8; i++)
        mvm_space_destroy(more[i]);
    /* A budget larger than the experts is capped at what they need. */
    mvm_space *big = make_space(1, 2, PAGE, 1000);
    mvm_space_get_info(big, &info);
    CHECK(info.device_pages == 2);
    CHECK_ST(mvm_space_destroy(big), MVM_OK);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

static void test_reads_follow_backing(void)
{
    uint64_t bytes = 3 * PAGE - 40;
    mvm_space *sp = make_space(2, 4, bytes, 9);
    fill(sp, 2, 4, bytes);
    for (uint32_t e = 0; e < 4; e++)
        CHECK(reads_match(sp, 1, e, bytes));
    CHECK_ST(mvm_make_resident(sp, 1, 2, MVM_ALL_PAGES), MVM_OK);
    CHECK_ST(mvm_make_resident(sp, 0, 0, 1), MVM_OK);
    CHECK_ST(mvm_make_resident(sp, 1, 3, 2), MVM_OK);
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t e = 0; e < 4; e++)
            CHECK(reads_match(sp, l, e, bytes));
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 1, 2, &r), MVM_OK);
    CHECK(r.n_pages == 3 && r.resident == 3 && r.resident_prefix == 3 && r.loading == 0);
    /* Evict and reload into different chunks: still the right bytes. */
    CHECK_ST(mvm_evict(sp, 1, 2, 0), MVM_OK);
    CHECK(reads_match(sp, 1, 2, bytes));
    CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_OK);
    CHECK_ST(mvm_make_resident(sp, 1, 2, MVM_ALL_PAGES), MVM_OK);
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t e = 0; e < 4; e++)
            CHECK(reads_match(sp, l, e, bytes));
    mvm_stats s = stats_of(sp);
    CHECK(s.pages_loaded == 3 + 1 + 2 + 3 + 3);
    /* Whole experts move their used bytes only (the last page is 40 bytes short). */
    CHECK(s.bytes_moved == 3 * bytes + PAGE + 2 * PAGE);
    CHECK(s.pages_evicted == 3);
    CHECK(s.resident_pages == 9 && s.free_pages == 0);
    /* the mappings' and the evictions' times: each counted where it happens */
    CHECK(s.remap_ns > 0 && s.evict_ns > 0);
    CHECK_ST(mvm_make_resident(sp, 1, 2, MVM_ALL_PAGES), MVM_OK); /* a hit maps nothing */
    mvm_stats t = stats_of(sp);
    CHECK(t.remap_ns == s.remap_ns && t.evict_ns == s.evict_ns);
    CHECK_ST(mvm_evict(sp, 1, 2, 0), MVM_OK);
    t = stats_of(sp);
    /* where homes are unmapped the worker unmaps the run later, in remap_ns (vmm/slab.c) */
    mvm_space_info info;
    CHECK_ST(mvm_space_get_info(sp, &info), MVM_OK);
    CHECK(t.evict_ns > s.evict_ns &&
          (info.home_mapped ? t.remap_ns == s.remap_ns : t.remap_ns >= s.remap_ns));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

/* cuda: an automatic budget is 90% of the device's free memory less the caller's reserve
 * (what it allocates beside the space); a reserve of all of it is an error naming both. */
static void test_auto_budget_reserve(void)
{
    mvm_space_desc d;
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    d.backend = backend;
    d.page_size = PAGE;
    d.n_layers = 4, d.n_experts = 4, d.expert_bytes = 4 * PAGE; /* 64 pages */
    d.device_budget = MVM_BUDGET_AUTO;
    mvm_space *sp = NULL;
    mvm_space_info info;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    if (!sp)
        return;
    mvm_space_get_info(sp, &info);
    uint64_t free_bytes = info.device_free;
    CHECK(free_bytes > 64 * PAGE && info.device_pages == 64); /* capped at the experts */
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    d.device_reserve = free_bytes - 20 * PAGE; /* 18 pages of the 20 left */
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    if (sp) {
        mvm_space_get_info(sp, &info);
        CHECK(info.device_free == free_bytes && info.device_pages == 18);
        CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    }
    d.device_reserve = free_bytes;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "needed beside the expert space") != NULL);
    d.device_reserve = free_bytes - PAGE / 2; /* 90% of half a page */
    CHECK_ST(mvm_space_create(&d, &sp), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "smaller than one page") != NULL);
}

/* Homes larger than the memory the kernel can give (MemAvailable and, on host, free swap;
 * cuda's are pinned) are refused before any is touched, naming both sizes. In a child,
 * first in line for the OOM killer, so that a regression costs that child and fails this
 * test. */
static void test_homes_beyond_memory(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long kib, avail = 0, swap = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            avail = kib;
        else if (sscanf(line, "SwapFree: %llu kB", &kib) == 1)
            swap = kib;
    if (f)
        fclose(f);
    CHECK(avail > 0);
    uint64_t experts = ((avail + swap) << 10) / (64 * PAGE) + 64; /* past it by 256 MiB */
    pid_t pid = fork();
    if (pid == 0) {
        FILE *adj = fopen("/proc/self/oom_score_adj", "w");
        if (adj)
            fputs("1000", adj), fclose(adj);
        mvm_space_desc d;
        mvm_space_desc_init(&d);
        d.backend = backend;
        d.page_size = PAGE;
        d.n_layers = (uint32_t)(experts / 256 + 1), d.n_experts = 256;
        d.expert_bytes = 64 * PAGE;
        d.device_budget = PAGE;
        mvm_space *sp = NULL;
        mvm_status st = mvm_space_create(&d, &sp);
        _exit(st == MVM_ERR_NOMEM &&
                      strstr(mvm_last_error(), backend == MVM_BACKEND_HOST
                                                   ? "host homes need" : "pinned host homes need") &&
                      strstr(mvm_last_error(), "GiB are available")
                  ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Host backend: the tail of an expert's last page, past its weights, is a hole in the homes
 * (no memory behind it), while the weights' pages are in memory; the weights read back
 * through both of the expert's addresses, resident or not. */
static void test_home_tails_take_no_memory(void)
{
    long sys = sysconf(_SC_PAGESIZE);
    uint64_t bytes = PAGE + PAGE / 2 + 100; /* two pages, the second's tail a hole */
    mvm_space *sp = make_space(2, 3, bytes, 2);
    fill(sp, 2, 3, bytes);
    CHECK_ST(mvm_make_resident(sp, 1, 1, MVM_ALL_PAGES), MVM_OK);
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t e = 0; e < 3; e++) {
            CHECK(reads_match(sp, l, e, bytes));
            uint8_t *h = mvm_expert_home(sp, l, e);
            uint64_t seed = l * 1000 + e + 1, wrong = 0; /* fill's bytes, up to the last */
            for (uint64_t i = 0; i < bytes; i++)
                wrong += h[i] != (uint8_t)check_rng_next(&seed);
            CHECK(wrong == 0);
            uint64_t first_hole = (bytes + (uint64_t)sys - 1) / (uint64_t)sys * (uint64_t)sys;
            size_t n = (size_t)((2 * PAGE) / (uint64_t)sys);
            unsigned char vec[2 * PAGE / 4096];
            CHECK(n <= sizeof vec && mincore(h, 2 * PAGE, vec) == 0);
            size_t in = 0, tail_in = 0;
            for (size_t i = 0; i < n; i++) {
                in += vec[i] & 1;
                tail_in += (i * (uint64_t)sys >= first_hole) & vec[i];
            }
            CHECK(tail_in == 0);
            CHECK(in == first_hole / (uint64_t)sys);
        }
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

/* write_back spaces: what the device wrote into a resident page survives its eviction (it is
 * copied home first); pages written while at home stay there. Read-only spaces copy nothing
 * back. */
static void test_write_back(void)
{
    mvm_space_desc d;
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    d.n_layers = 1, d.n_experts = 3, d.expert_bytes = 2 * PAGE - 24, d.page_size = PAGE;
    d.device_budget = 2 * PAGE, d.backend = backend, d.write_back = 1;
    mvm_space *sp = NULL;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    fill(sp, 1, 3, d.expert_bytes);
    CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_OK);
    uint8_t *addr = mvm_expert_addr(sp, 0, 1);
    const uint8_t *home = mvm_expert_home(sp, 0, 1);
    for (uint64_t i = 0; i < d.expert_bytes; i += 4093)
        addr[i] = (uint8_t)(i * 7 + 1); /* "the device writes" through the fixed address */
    addr[d.expert_bytes - 1] ^= 0x5a;
    uint8_t expect[2 * PAGE];
    memcpy(expect, addr, d.expert_bytes);
    CHECK(memcmp(home, expect, d.expert_bytes) != 0); /* not yet home */
    CHECK_ST(mvm_evict(sp, 0, 1, 0), MVM_OK);
    CHECK(memcmp(home, expect, d.expert_bytes) == 0);
    CHECK(stats_of(sp).bytes_written_back == d.expert_bytes);
    /* Back on the device: the written bytes come with it. */
    CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_OK);
    CHECK(memcmp(addr, expect, d.expert_bytes) == 0);
    /* Discarded: the device's writes are dropped, the home keeps what it held, the chunks
     * are free again. keep_pages works as for mvm_evict: page 0 is kept and still holds
     * the device's bytes. */
    for (uint64_t i = 0; i < d.expert_bytes; i += 4099)
        addr[i] = (uint8_t)(i * 3 + 2);
    uint8_t written[2 * PAGE];
    memcpy(written, addr, d.expert_bytes);
    mvm_stats before = stats_of(sp);
    CHECK_ST(mvm_discard(sp, 0, 1, 1), MVM_OK);
    mvm_stats after = stats_of(sp);
    /* The two pages were one run (one slab, one mapping): the kept page went home and came
     * back, so its writes are at home too. */
    CHECK(after.bytes_written_back == before.bytes_written_back + PAGE);
    CHECK(memcmp(home, written, PAGE) == 0);
    CHECK(after.pages_discarded == before.pages_discarded + 1);
    CHECK(after.pages_evicted == before.pages_evicted + 1);
    CHECK(after.free_pages == before.free_pages + 1);
    CHECK(memcmp(home + PAGE, expect + PAGE, d.expert_bytes - PAGE) == 0);
    CHECK(memcmp(addr, written, PAGE) == 0);
    mvm_page_state ps;
    CHECK_ST(mvm_page_get_state(sp, 0, 1, 1, &ps), MVM_OK);
    CHECK(ps == MVM_PAGE_HOME);
    CHECK_ST(mvm_discard(sp, 0, 1, 3), MVM_ERR_RANGE);
    CHECK_ST(mvm_discard(sp, 0, 3, 0), MVM_ERR_RANGE);
    CHECK_ST(mvm_pin(sp, 0, 1), MVM_OK);
    CHECK_ST(mvm_discard(sp, 0, 1, 0), MVM_ERR_PINNED);
    CHECK_ST(mvm_unpin(sp, 0, 1), MVM_OK);
    CHECK_ST(mvm_discard(sp, 0, 1, 0), MVM_OK);
    CHECK(memcmp(home, written, PAGE) == 0);
    CHECK(memcmp(home + PAGE, expect + PAGE, d.expert_bytes - PAGE) == 0);
    CHECK(stats_of(sp).bytes_written_back == before.bytes_written_back + PAGE);
    CHECK(stats_of(sp).pages_discarded == before.pages_discarded + 2);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);

    sp = make_space(1, 2, PAGE, 1);
    fill(sp, 1, 2, PAGE);
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
    CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_OK);
    CHECK(stats_of(sp).bytes_written_back == 0 && reads_match(sp, 0, 0, PAGE));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

/* Makes expert (0, e) resident, applies `write` to its address, evicts it, and returns the
 * change in the space's counters. */
static mvm_stats evict_after(mvm_space *sp, uint32_t e, void (*write)(uint8_t *addr))
{
    mvm_stats a = stats_of(sp);
    CHECK_ST(mvm_make_resident(sp, 0, e, MVM_ALL_PAGES), MVM_OK);
    if (write)
        write(mvm_expert_addr(sp, 0, e));
    CHECK_ST(mvm_evict(sp, 0, e, 0), MVM_OK);
    mvm_stats b = stats_of(sp);
    b.pages_clean -= a.pages_clean;
    b.bytes_written_back -= a.bytes_written_back;
    return b;
}

static void write_last_byte(uint8_t *addr) { addr[2 * PAGE - 25] ^= 0xff; }
static void write_and_restore(uint8_t *addr) { addr[5] ^= 1, addr[5] ^= 1; }
static void swap_two_words(uint8_t *addr)
{
    uint64_t a, b;
    memcpy(&a, addr + 64, 8), memcpy(&b, addr + 128, 8);
    memcpy(addr + 64, &b, 8), memcpy(addr + 128, &a, 8);
}

/* write_back spaces skip the write-back of a page the device left as it was loaded, where
 * the backend can digest pages (cuda); the host backend always copies. Checked by what
 * reaches the home and by the counters. */
static void test_clean_evict(void)
{
    const uint64_t bytes = 2 * PAGE - 24, last = bytes - PAGE; /* page 1 holds `last` bytes */
    mvm_space_desc d;
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    CHECK(d.clean_evict == 1); /* MOEVM_CLEAN_EVICT's default */
    d.n_layers = 1, d.n_experts = 2, d.expert_bytes = bytes, d.page_size = PAGE;
    d.device_budget = 2 * PAGE, d.backend = backend, d.write_back = 1;
    mvm_space *sp = NULL;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    mvm_space_info info;
    mvm_space_get_info(sp, &info);
    bool digests = backend == MVM_BACKEND_CUDA;
    CHECK(info.clean_evict == digests);
    fill(sp, 1, 2, bytes);
    const uint8_t *home = mvm_expert_home(sp, 0, 0);
    uint8_t before[2 * PAGE];
    memcpy(before, home, bytes);

    mvm_stats s = evict_after(sp, 0, NULL); /* read only: nothing goes home */
    CHECK(s.pages_clean == (digests ? 2 : 0));
    CHECK(s.bytes_written_back == (digests ? 0 : bytes));
    CHECK(memcmp(home, before, bytes) == 0);

    s = evict_after(sp, 0, write_last_byte); /* page 1 changed: it alone goes home */
    CHECK(s.pages_clean == (digests ? 1 : 0));
    CHECK(s.bytes_written_back == (digests ? last : bytes));
    before[bytes - 1] ^= 0xff;
    CHECK(memcmp(home, before, bytes) == 0);

    s = evict_after(sp, 0, write_and_restore); /* same bytes again: unchanged */
    CHECK(s.pages_clean == (digests ? 2 : 0));
    CHECK(memcmp(home, before, bytes) == 0);

    s = evict_after(sp, 0, swap_two_words); /* same words, other places: changed */
    CHECK(s.pages_clean == (digests ? 1 : 0));
    swap_two_words(before);
    CHECK(memcmp(home, before, bytes) == 0);

    /* Many experts at once (their checks in one batch): a pinned one is skipped, a repeat
     * is harmless, only the written page goes home. */
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    d.n_experts = 4, d.device_budget = 8 * PAGE;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    fill(sp, 1, 4, bytes);
    /* Digests go by batch: one launch marks a load's pages, one checks an eviction's. */
    unsigned long launches = on_fake ? fake_calls("cuLaunchKernel") : 0;
    for (uint32_t e = 0; e < 4; e++)
        CHECK_ST(mvm_make_resident(sp, 0, e, MVM_ALL_PAGES), MVM_OK);
    if (on_fake)
        CHECK(fake_calls("cuLaunchKernel") - launches == 4);
    uint8_t *addr2 = mvm_expert_addr(sp, 0, 2);
    addr2[100] ^= 0x42;
    uint8_t expect2[2 * PAGE];
    memcpy(expect2, addr2, bytes);
    CHECK_ST(mvm_pin(sp, 0, 3), MVM_OK);
    const uint32_t list[] = {0, 1, 2, 3, 1}, bad[] = {0, 9};
    mvm_stats a = stats_of(sp);
    CHECK_ST(mvm_evict_many(sp, 0, bad, 2), MVM_ERR_RANGE);
    CHECK_ST(mvm_evict_many(sp, 0, NULL, 1), MVM_ERR_INVALID);
    CHECK_ST(mvm_evict_many(sp, 1, list, 1), MVM_ERR_RANGE);
    CHECK_ST(mvm_evict_many(sp, 0, NULL, 0), MVM_OK);
    CHECK(stats_of(sp).resident_pages == 8);
    launches = on_fake ? fake_calls("cuLaunchKernel") : 0;
    CHECK_ST(mvm_evict_many(sp, 0, list, 5), MVM_ERR_PINNED);
    if (on_fake) /* six pages leave */
        CHECK(fake_calls("cuLaunchKernel") - launches == 1);
    mvm_stats b = stats_of(sp);
    CHECK(b.resident_pages == 2 && b.pages_evicted - a.pages_evicted == 6);
    CHECK(b.pages_clean - a.pages_clean == (digests ? 5 : 0));
    CHECK(b.bytes_written_back - a.bytes_written_back == (digests ? PAGE : 3 * bytes));
    CHECK(memcmp(mvm_expert_home(sp, 0, 2), expect2, bytes) == 0);
    CHECK_ST(mvm_unpin(sp, 0, 3), MVM_OK);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    d.n_experts = 2, d.device_budget = 2 * PAGE;

    d.clean_evict = 0; /* off: every eviction copies */
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    mvm_space_get_info(sp, &info);
    CHECK(info.clean_evict == 0);
    fill(sp, 1, 2, bytes);
    s = evict_after(sp, 1, NULL);
    CHECK(s.pages_clean == 0 && s.bytes_written_back == bytes);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

static void test_partial_residency(void)
{
    mvm_space *sp = make_space(1, 2, 5 * PAGE, 10);
    fill(sp, 1, 2, 5 * PAGE);
    mvm_residency r;
    CHECK_ST(mvm_make_resident(sp, 0, 1, 2), MVM_OK);
    CHECK_ST(mvm_expert_residency(sp, 0, 1, &r), MVM_OK);
    CHECK(r.resident == 2 && r.resident_prefix == 2);
    mvm_page_state s;
    CHECK_ST(mvm_page_get_state(sp, 0, 1, 1, &s), MVM_OK);
    CHECK(s == MVM_PAGE_RESIDENT);
    CHECK_ST(mvm_page_get_state(sp, 0, 1, 2, &s), MVM_OK);
    CHECK(s == MVM_PAGE_HOME);
    CHECK_ST(mvm_make_resident(sp, 0, 1, 4), MVM_OK);
    CHECK_ST(mvm_expert_residency(sp, 0, 1, &r), MVM_OK);
    CHECK(r.resident == 4 && r.resident_prefix == 4);
    CHECK(stats_of(sp).pages_loaded == 4); /* the first two were not loaded twice */
    CHECK_ST(mvm_evict(sp, 0, 1, 1), MVM_OK); /* shrink the split to one page */
    CHECK_ST(mvm_expert_residency(sp, 0, 1, &r), MVM_OK);
    CHECK(r.resident == 1 && r.resident_prefix == 1);
    CHECK(reads_match(sp, 0, 1, 5 * PAGE));
    CHECK_ST(mvm_make_resident(sp, 0, 1, 0), MVM_OK); /* zero pages: nothing to do */
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

static void test_capacity(void)
{
    mvm_space *sp = make_space(1, 4, 3 * PAGE, 7);
    fill(sp, 1, 4, 3 * PAGE);
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
    CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_OK);
    CHECK_ST(mvm_make_resident(sp, 0, 2, MVM_ALL_PAGES), MVM_ERR_NOSPACE);
    CHECK(strstr(mvm_last_error(), "needs 3 more pages, 1 of 7 are free") != NULL);
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 2, &r), MVM_OK);
    CHECK(r.resident == 0 && r.loading == 0); /* a refused request changes nothing */
    CHECK_ST(mvm_prefetch(sp, 0, 2, MVM_ALL_PAGES, NULL), MVM_ERR_NOSPACE);
    CHECK_ST(mvm_make_resident(sp, 0, 2, 1), MVM_OK); /* the one free page fits */
    CHECK(stats_of(sp).free_pages == 0);
    CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_OK);
    CHECK_ST(mvm_make_resident(sp, 0, 3, MVM_ALL_PAGES), MVM_OK);
    mvm_stats s = stats_of(sp);
    CHECK(s.resident_pages == 7 && s.free_pages == 0);
    for (uint32_t e = 0; e < 4; e++)
        CHECK(reads_match(sp, 0, e, 3 * PAGE));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

static void test_pins(void)
{
    mvm_space *sp = make_space(1, 3, 2 * PAGE, 6);
    fill(sp, 1, 3, 2 * PAGE);
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
    CHECK_ST(mvm_pin(sp, 0, 0), MVM_OK);
    CHECK_ST(mvm_pin(sp, 0, 0), MVM_OK); /* pins nest */
    CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_ERR_PINNED);
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
    CHECK(r.resident == 2 && r.pins == 2);
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK); /* resident: fine pinned */
    CHECK_ST(mvm_unpin(sp, 0, 0), MVM_OK);
    CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_ERR_PINNED);
    CHECK_ST(mvm_unpin(sp, 0, 0), MVM_OK);
    CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_OK);

    /* A pinned expert's pages cannot change backing: a synchronous request would wait on
     * its own caller, an asynchronous one completes after the last unpin. */
    CHECK_ST(mvm_pin(sp, 0, 1), MVM_OK);
    CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_ERR_PINNED);
    mvm_move *m = NULL;
    CHECK_ST(mvm_make_resident_async(sp, 0, 1, MVM_ALL_PAGES, &m), MVM_OK);
    CHECK_ST(mvm_move_wait(m, 50 * 1000 * 1000), MVM_ERR_TIMEOUT);
    CHECK_ST(mvm_expert_residency(sp, 0, 1, &r), MVM_OK);
    CHECK(r.resident == 0 && r.loading == 2); /* in flight is never reported resident */
    CHECK(reads_match(sp, 0, 1, 2 * PAGE));
    CHECK_ST(mvm_unpin(sp, 0, 1), MVM_OK);
    CHECK_ST(mvm_move_wait(m, -1), MVM_OK);
    CHECK_ST(mvm_move_release(m), MVM_OK);
    CHECK_ST(mvm_expert_residency(sp, 0, 1, &r), MVM_OK);
    CHECK(r.resident == 2);
    CHECK(reads_match(sp, 0, 1, 2 * PAGE));
    CHECK(stats_of(sp).pinned_experts == 0);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

static void test_moves_and_stats(void)
{
    mvm_space *sp = make_space(2, 4, 2 * PAGE, 16);
    fill(sp, 2, 4, 2 * PAGE);
    mvm_move *p[4];
    for (uint32_t e = 0; e < 4; e++)
        CHECK_ST(mvm_prefetch(sp, 1, e, MVM_ALL_PAGES, &p[e]), MVM_OK);
    for (uint32_t e = 0; e < 4; e++) {
        CHECK_ST(mvm_move_wait(p[e], -1), MVM_OK);
        CHECK_ST(mvm_move_test(p[e]), MVM_OK);
        CHECK_ST(mvm_move_release(p[e]), MVM_OK);
    }
    CHECK_ST(mvm_make_resident(sp, 1, 0, MVM_ALL_PAGES), MVM_OK); /* hit, uses 2 prefetched */
    CHECK_ST(mvm_make_resident(sp, 1, 1, 1), MVM_OK);             /* hit, uses 1 */
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK); /* miss */
    CHECK_ST(mvm_make_resident_async(sp, 0, 1, 1, NULL), MVM_OK); /* miss, fire and forget */
    mvm_stats s = stats_of(sp);
    CHECK(s.prefetches == 4 && s.prefetch_pages == 8);
    CHECK(s.hits == 2 && s.misses == 2);
    CHECK(s.prefetch_used == 3);
    CHECK(s.resident_pages + s.loading_pages == 8 + 2 + 1);
    CHECK(s.free_pages == 16 - 11);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

/* ---- tests that need slow copies or held streams: cuda backend over fakecuda ---------- */

/* Six prefetches queued, the first one's copy held on the bus; then a load on demand and
 * the last prefetch promoted to one. Three copies let through, the held one and the two
 * demands': the on-demand jobs went next, ahead of the queued prefetches (a worker that
 * took a prefetch first would leave a demand held: its wait times out), which are still
 * queued when the demands have landed; the promoted prefetch was the same job. */
static void test_priority_and_promotion(void)
{
    mvm_space *sp = make_space(1, 8, PAGE, 8);
    fill(sp, 1, 8, PAGE);
    mvm_move *pf[6], *demand, *promoted;
    fake_hold_copies(1);
    for (uint32_t e = 0; e < 6; e++)
        CHECK_ST(mvm_prefetch(sp, 0, e, MVM_ALL_PAGES, &pf[e]), MVM_OK);
    CHECK(fake_wait_copy_held(10000));
    CHECK_ST(mvm_make_resident_async(sp, 0, 7, MVM_ALL_PAGES, &demand), MVM_OK);
    CHECK_ST(mvm_make_resident_async(sp, 0, 5, MVM_ALL_PAGES, &promoted), MVM_OK);
    fake_pass_copies(3);
    const int64_t ten_s = 10000000000LL;
    CHECK_ST(mvm_move_wait(demand, ten_s), MVM_OK);
    CHECK_ST(mvm_move_wait(promoted, ten_s), MVM_OK);
    CHECK_ST(mvm_move_test(pf[4]), MVM_ERR_BUSY);
    CHECK_ST(mvm_move_test(pf[5]), MVM_OK); /* promoted: it was the same job */
    fake_hold_copies(0);
    for (uint32_t e = 0; e < 6; e++) {
        CHECK_ST(mvm_move_wait(pf[e], -1), MVM_OK);
        mvm_move_release(pf[e]);
    }
    mvm_move_release(demand);
    mvm_move_release(promoted);
    for (uint32_t e = 0; e < 8; e++)
        CHECK(reads_match(sp, 0, e, PAGE));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

/* An on-demand load overtakes a prefetch on the bus (MOEVM_COPY_PIECE): with pieces of a
 * page, a 16-page prefetch goes out in 16 copies of 20 ms each; a make-resident of another
 * expert asked once the first has begun is copied and lands next, so when it returns the
 * prefetch has not landed (15 pieces to go). With the expert one piece (0) the prefetch is
 * one copy, which the make-resident waits for: it has landed by then. Both read their
 * weights either way. */
static void test_prefetch_overtaken(void)
{
    fake_set_copy_delay_us(20000);
    for (int whole = 0; whole < 2; whole++) {
        setenv("MOEVM_COPY_PIECE", whole ? "0" : "1", 1); /* 1 byte: a page */
        mvm_space *sp = make_space(1, 2, 16 * PAGE, 32);
        fill(sp, 1, 2, 16 * PAGE);
        unsigned long begun = fake_copies_begun();
        mvm_move *pf;
        CHECK_ST(mvm_prefetch(sp, 0, 0, MVM_ALL_PAGES, &pf), MVM_OK);
        while (fake_copies_begun() == begun)
            usleep(1000); /* the prefetch's first copy is on the bus */
        CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_OK);
        mvm_residency r;
        CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
        CHECK(whole ? r.resident == 16 : r.resident == 0 && r.loading == 16);
        CHECK_ST(mvm_move_wait(pf, -1), MVM_OK);
        mvm_move_release(pf);
        CHECK(reads_match(sp, 0, 0, 16 * PAGE) && reads_match(sp, 0, 1, 16 * PAGE));
        CHECK(stats_of(sp).pages_loaded == 32 && stats_of(sp).overtakes == (whole ? 0u : 1u));
        CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    }
    unsetenv("MOEVM_COPY_PIECE");
    fake_set_copy_delay_us(0);
}

/* A demand that waits on a prefetch already on the bus hurries it: the prefetch's pieces no
 * longer let another demand overtake, which would delay the first by its whole copy. A
 * 16-page prefetch of expert 0 (a page a piece, 20 ms each) is asked for on demand once
 * begun; a make-resident of expert 1 asked then waits behind it: when it returns, expert 0
 * has landed and nothing overtook. (Without the hurry, expert 1 lands first:
 * test_prefetch_overtaken.) */
static void test_prefetch_hurried(void)
{
    fake_set_copy_delay_us(20000);
    setenv("MOEVM_COPY_PIECE", "1", 1);
    mvm_space *sp = make_space(1, 2, 16 * PAGE, 32);
    fill(sp, 1, 2, 16 * PAGE);
    unsigned long begun = fake_copies_begun();
    mvm_move *pf, *demand;
    CHECK_ST(mvm_prefetch(sp, 0, 0, MVM_ALL_PAGES, &pf), MVM_OK);
    while (fake_copies_begun() == begun)
        usleep(1000);
    CHECK_ST(mvm_make_resident_async(sp, 0, 0, MVM_ALL_PAGES, &demand), MVM_OK);
    CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_OK);
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
    CHECK(r.resident == 16 && stats_of(sp).overtakes == 0);
    CHECK_ST(mvm_move_wait(demand, -1), MVM_OK);
    CHECK_ST(mvm_move_wait(pf, -1), MVM_OK);
    mvm_move_release(demand);
    mvm_move_release(pf);
    CHECK(reads_match(sp, 0, 0, 16 * PAGE) && reads_match(sp, 0, 1, 16 * PAGE));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    unsetenv("MOEVM_COPY_PIECE");
    fake_set_copy_delay_us(0);
}

/* MoEpic's window closing: a queued prefetch is taken back, its pages home; a landed one,
 * a promoted one and one never asked are left alone. The worker takes one prefetch a
 * batch, 20 ms a page: the sixth has not started when it is cancelled. */
static void test_prefetch_cancel(void)
{
    mvm_space *sp = make_space(1, 8, 2 * PAGE, 16);
    fill(sp, 1, 8, 2 * PAGE);
    mvm_move *m[6], *demand;
    fake_hold_copies(1);
    for (uint32_t e = 0; e < 6; e++)
        CHECK_ST(mvm_prefetch(sp, 0, e, MVM_ALL_PAGES, &m[e]), MVM_OK);
    CHECK(fake_wait_copy_held(10000)); /* the first prefetch's copy on the bus, held there */
    CHECK_ST(mvm_make_resident_async(sp, 0, 4, MVM_ALL_PAGES, &demand), MVM_OK);
    uint32_t n = 99;
    CHECK_ST(mvm_prefetch_cancel(sp, 0, 5, &n), MVM_OK);
    CHECK(n == 2);
    CHECK_ST(mvm_move_test(m[5]), MVM_ERR_CANCELLED);
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 5, &r), MVM_OK);
    CHECK(r.resident == 0 && r.loading == 0);
    CHECK_ST(mvm_prefetch_cancel(sp, 0, 4, &n), MVM_OK); /* promoted: on demand now */
    CHECK(n == 0);
    fake_hold_copies(0);
    CHECK_ST(mvm_move_wait(m[0], -1), MVM_OK);
    CHECK_ST(mvm_prefetch_cancel(sp, 0, 0, &n), MVM_OK); /* landed */
    CHECK(n == 0);
    CHECK_ST(mvm_prefetch_cancel(sp, 0, 7, NULL), MVM_OK); /* never asked */
    CHECK_ST(mvm_prefetch_cancel(sp, 1, 0, &n), MVM_ERR_RANGE);
    CHECK_ST(mvm_move_wait(demand, -1), MVM_OK);
    mvm_move_release(demand);
    for (uint32_t e = 0; e < 6; e++) {
        CHECK_ST(mvm_move_wait(m[e], -1), e == 5 ? MVM_ERR_CANCELLED : MVM_OK);
        mvm_move_release(m[e]);
    }
    for (uint32_t e = 0; e < 8; e++)
        CHECK(reads_match(sp, 0, e, 2 * PAGE));
    CHECK(stats_of(sp).free_pages == 16 - 5 * 2);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

static void test_cancel_and_destroy_in_flight(void)
{
    fake_set_copy_delay_us(20000);
    mvm_space *sp = make_space(1, 8, 2 * PAGE, 16);
    fill(sp, 1, 8, 2 * PAGE);
    mvm_move *m[8];
    for (uint32_t e = 0; e < 8; e++)
        CHECK_ST(mvm_prefetch(sp, 0, e, MVM_ALL_PAGES, &m[e]), MVM_OK);
    CHECK_ST(mvm_evict(sp, 0, 7, 0), MVM_OK); /* still queued: cancelled at once */
    CHECK_ST(mvm_move_test(m[7]), MVM_ERR_CANCELLED);
    CHECK(stats_of(sp).moves_queued <= 7);
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 7, &r), MVM_OK);
    CHECK(r.resident == 0 && r.loading == 0);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK); /* with moves queued and one in flight */
    int cancelled = 0;
    for (uint32_t e = 0; e < 7; e++) {
        mvm_status st = mvm_move_wait(m[e], -1);
        CHECK(st == MVM_OK || st == MVM_ERR_CANCELLED);
        cancelled += st == MVM_ERR_CANCELLED;
        CHECK_ST(mvm_move_release(m[e]), MVM_OK); /* handles outlive their space */
    }
    CHECK(cancelled >= 4);
    mvm_move_release(m[7]);
    CHECK(fake_live_handles() == 0);
    fake_set_copy_delay_us(0);
}

/* A prefetch evicted while its pieces are on the bus, and its pages asked for again on
 * demand: the new load overtakes the cancelled one between two of its pieces (a page a
 * piece; the first held in the fake until the new load is queued) and lands first; the old
 * pieces land after it and change nothing (the pages stay resident and readable, on the
 * new load's chunks), and every chunk of the old load goes back to the pool. Twice, so the
 * second round starts from a pool the first one handed back. (vmm/migrate.c's
 * mvm_cancel_page and overtake. The cancelled prefetch was never mapped here, its mapping
 * comes after its last piece: the race of a mapping left at the address is the next
 * test's.) */
static void test_reload_overtakes_cancelled_prefetch(void)
{
    setenv("MOEVM_COPY_PIECE", "1", 1); /* 1 byte: a page a piece */
    mvm_space *sp = make_space(1, 2, 2 * PAGE, 4);
    fill(sp, 1, 2, 2 * PAGE);
    for (int round = 0; round < 2; round++) {
        mvm_move *old, *now = NULL;
        fake_hold_copies(1);
        CHECK_ST(mvm_prefetch(sp, 0, 0, MVM_ALL_PAGES, &old), MVM_OK);
        CHECK(fake_wait_copy_held(10000)); /* its first piece is on the bus */
        CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_OK);
        CHECK_ST(mvm_make_resident_async(sp, 0, 0, MVM_ALL_PAGES, &now), MVM_OK);
        fake_hold_copies(0); /* the new load queued before that piece ends */
        CHECK_ST(now ? mvm_move_wait(now, -1) : MVM_ERR_INVALID, MVM_OK);
        mvm_move_release(now);
        CHECK(reads_match(sp, 0, 0, 2 * PAGE));
        CHECK_ST(mvm_move_wait(old, -1), MVM_ERR_CANCELLED);
        CHECK_ST(mvm_move_release(old), MVM_OK);
        mvm_residency r;
        CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
        CHECK(r.resident == 2 && reads_match(sp, 0, 0, 2 * PAGE)); /* after the old landing */
        CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_OK);
    }
    CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_OK);
    mvm_space_info info;
    CHECK_ST(mvm_space_get_info(sp, &info), MVM_OK);
    CHECK(reads_match(sp, 0, 1, 2 * PAGE)); /* and every chunk back: only expert 1's taken */
    CHECK(stats_of(sp).free_pages == info.device_pages - 2 && stats_of(sp).overtakes == 2);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(fake_live_handles() == 0);
    unsetenv("MOEVM_COPY_PIECE");
}

/* A call on another thread while the fake driver holds the worker (inside a map, or a copy):
 * what it did, and whether it returned. */
enum side_what { SIDE_PIN, SIDE_VIEW, SIDE_LOAD };
struct side_call {
    mvm_space *sp;
    enum side_what what; /* a pin and unpin of (0, e), mvm_expert_wait_view of it, or its load */
    uint32_t e;
    mvm_status st;
    uint64_t addr;
    atomic_int done;
};

static void *side_call_run(void *p)
{
    struct side_call *c = p;
    if (c->what == SIDE_VIEW)
        c->st = mvm_expert_wait_view(c->sp, 0, c->e, NULL, &c->addr);
    else if (c->what == SIDE_LOAD)
        c->st = mvm_make_resident(c->sp, 0, c->e, MVM_ALL_PAGES);
    else if ((c->st = mvm_pin(c->sp, 0, c->e)) == MVM_OK)
        c->st = mvm_unpin(c->sp, 0, c->e);
    atomic_store(&c->done, 1);
    return NULL;
}

/* An expert evicted while its copy is on the bus: mvm_evict returns at once, its chunks back
 * only when that copy lands. A load that needs them (a budget with room for one expert)
 * waits for the landing and succeeds, where it used to fail 'device budget full' (seen in
 * forward_gpu_home_map_off: a context's load refused right after its caller's eviction); a
 * prefetch does not wait, it is refused for want of room. */
static void test_load_waits_for_cancelled_copy(void)
{
    enum { P = 2 };
    mvm_space *sp = make_space(1, 2, P * PAGE, P);
    fill(sp, 1, 2, P * PAGE);
    mvm_move *old;
    fake_hold_copies(1);
    CHECK_ST(mvm_make_resident_async(sp, 0, 0, MVM_ALL_PAGES, &old), MVM_OK);
    CHECK(fake_wait_copy_held(10000)); /* its copy on the bus, held there */
    CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_OK);
    CHECK(stats_of(sp).free_pages == 0);
    CHECK_ST(mvm_prefetch(sp, 0, 1, MVM_ALL_PAGES, NULL), MVM_ERR_NOSPACE);
    struct side_call c = {.sp = sp, .what = SIDE_LOAD, .e = 1, .st = MVM_ERR_INVALID};
    pthread_t t;
    bool started = pthread_create(&t, NULL, side_call_run, &c) == 0;
    CHECK(started);
    usleep(100000);
    CHECK(!atomic_load(&c.done)); /* the chunks it needs are still the held copy's */
    fake_hold_copies(0);
    if (started)
        pthread_join(t, NULL);
    CHECK_ST(c.st, MVM_OK);
    CHECK(reads_match(sp, 0, 1, P * PAGE));
    CHECK_ST(mvm_move_wait(old, -1), MVM_ERR_CANCELLED);
    CHECK_ST(mvm_move_release(old), MVM_OK);
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
    CHECK(r.resident == 0 && r.loading == 0 && stats_of(sp).free_pages == 0);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(fake_live_handles() == 0);
}

/* make_space with every expert's weights at home, and its info. */
static mvm_space *filled_space(uint32_t layers, uint32_t experts, uint64_t bytes,
                               uint32_t budget_pages, mvm_space_info *info)
{
    mvm_space *sp = make_space(layers, experts, bytes, budget_pages);
    fill(sp, layers, experts, bytes);
    CHECK_ST(mvm_space_get_info(sp, info), MVM_OK);
    return sp;
}

/* The fake driver's mapping, allocation and copy calls, and the copy lanes' joins: a
 * snapshot, and what a step added. */
struct calls {
    unsigned long map, access, unmap, create, copy, join, event;
};

static struct calls calls_now(void)
{
    return (struct calls){fake_calls("cuMemMap"),    fake_calls("cuMemSetAccess"),
                          fake_calls("cuMemUnmap"),  fake_calls("cuMemCreate"),
                          fake_calls("cuMemcpyHtoDAsync"), fake_calls("cuStreamWaitEvent"),
                          fake_calls("cuEventCreate")};
}

static struct calls calls_since(struct calls c)
{
    struct calls n = calls_now();
    return (struct calls){n.map - c.map,       n.access - c.access, n.unmap - c.unmap,
                          n.create - c.create, n.copy - c.copy,     n.join - c.join,
                          n.event - c.event};
}

/* Where homes are unmapped a load's slab is mapped at the pages' address ahead of its copy.
 * Evicted between that mapping and its landing (the worker waiting here 300 ms for the
 * copy's fence), the load is cancelled (mvm_cancel_page takes the mapping with it: b7eb190),
 * its pages asked for again load at the same address, and the cancelled slab comes back
 * when its copy lands. Where homes are mapped nothing is mapped ahead. */
static void test_reload_while_mapped_load_cancelled(void)
{
    enum { P = 4 };
    /* room for the cancelled load's slab, back only when its copy lands, and the reload */
    mvm_space_info info;
    mvm_space *sp = filled_space(1, 2, P * PAGE, 2 * P, &info);
    if (info.home_mapped) {
        CHECK_ST(mvm_space_destroy(sp), MVM_OK);
        return;
    }
    fake_set_event_sync_delay_us(300000); /* room for a slow (sanitized) thread to evict */
    const unsigned long access = fake_calls("cuMemSetAccess");
    mvm_move *old;
    CHECK_ST(mvm_make_resident_async(sp, 0, 0, MVM_ALL_PAGES, &old), MVM_OK);
    while (fake_calls("cuMemSetAccess") == access)
        usleep(1000); /* mapped ahead: the worker now waits for the copy's fence */
    CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_OK); /* cancels the load, in flight */
    /* (only now: a fence the worker polls is done at once without the delay, and under
     * TSan the load then landed before this eviction, once in a clean-clone run) */
    fake_set_event_sync_delay_us(0);
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
    CHECK(reads_match(sp, 0, 0, P * PAGE));
    CHECK_ST(mvm_move_wait(old, -1), MVM_ERR_CANCELLED);
    CHECK_ST(mvm_move_release(old), MVM_OK);
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
    CHECK(r.resident == P && stats_of(sp).free_pages == P); /* the cancelled slab came back */
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(fake_live_handles() == 0);
}

/* A load whose copy lands while its expert is pinned waits on the deferred list, mapped at
 * the pages' address ahead of its copy where homes are unmapped. The last unpin lands it at
 * once, on the unpinning thread, with no driver call, even while the worker is busy with
 * another expert's prefetch, a page a piece: the next reader finds it resident. (Before,
 * it waited for the worker, and an eviction in between cancelled it, mapped: the
 * interleaving b7eb190 fixed, seen once in stress_cuda_no_host_numa as 'remap of expert 21
 * pages 1-1 failed: cuMemMap ... INVALID_VALUE'. Now the eviction evicts it, and the
 * reload, overtaking the prefetch, maps at the same address.) Where homes are mapped the
 * landing remaps, which stays the worker's. */
static void test_unpin_lands_deferred_load(void)
{
    enum { P = 4, OTHER = 8 }; /* pages of expert 0; of expert 1, the prefetch overtaken */
    fake_set_copy_delay_us(25000);
    setenv("MOEVM_COPY_PIECE", "1", 1);
    mvm_space_info info;
    mvm_space *sp = filled_space(1, 2, OTHER * PAGE, P + OTHER + P, &info);
    CHECK_ST(mvm_pin(sp, 0, 0), MVM_OK);
    unsigned long begun = fake_copies_begun();
    mvm_move *old, *other;
    CHECK_ST(mvm_prefetch(sp, 0, 0, P, &old), MVM_OK);
    CHECK_ST(mvm_prefetch(sp, 0, 1, MVM_ALL_PAGES, &other), MVM_OK);
    while (fake_copies_begun() <= begun + P)
        usleep(1000); /* the prefetch's first piece on the bus: the old load is deferred */
    CHECK(stats_of(sp).moves_in_flight == 2);
    struct calls c = calls_now();
    CHECK_ST(mvm_unpin(sp, 0, 0), MVM_OK);
    c = calls_since(c);
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
    if (!info.home_mapped) {
        CHECK(r.resident == P && r.loading == 0 && c.map == 0 && c.access == 0);
        CHECK(stats_of(sp).moves_in_flight == 1);
    }
    const uint64_t evicted = stats_of(sp).pages_evicted;
    CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_OK);
    CHECK(info.home_mapped || stats_of(sp).pages_evicted == evicted + P);
    CHECK_ST(mvm_make_resident(sp, 0, 0, P), MVM_OK);
    CHECK(reads_match(sp, 0, 0, P * PAGE));
    CHECK(stats_of(sp).overtakes == 1);
    CHECK_ST(mvm_move_wait(other, -1), MVM_OK);
    mvm_status old_st = mvm_move_wait(old, -1);
    CHECK(info.home_mapped ? old_st == MVM_ERR_CANCELLED || old_st == MVM_OK : old_st == MVM_OK);
    CHECK_ST(mvm_move_release(other), MVM_OK);
    CHECK_ST(mvm_move_release(old), MVM_OK);
    CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
    CHECK(r.resident == P && reads_match(sp, 0, 0, P * PAGE));
    CHECK(reads_match(sp, 0, 1, OTHER * PAGE));
    CHECK(stats_of(sp).free_pages == P); /* every slab came back but the two experts' */
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(fake_live_handles() == 0);
    unsetenv("MOEVM_COPY_PIECE");
    fake_set_copy_delay_us(0);
}

/* A load that landed behind a pin and is evicted after the unpin but before the worker has
 * remapped it (the worker inside another expert's held copy) gives its chunks back at once:
 * the expert pinned again and loaded anew needs them, and its pin would defer the old
 * landing's remap for ever (the hang of fa96df1: a reader that pins an expert and then asks
 * for it). Where homes are unmapped the landing was mapped ahead, and the unpin lands it. */
static void test_evict_deferred_landing_then_repin(void)
{
    enum { P = 4 };
    mvm_space_info info;
    mvm_space *sp = filled_space(1, 2, P * PAGE, 2 * P, &info);
    CHECK_ST(mvm_pin(sp, 0, 0), MVM_OK);
    mvm_move *old, *other, *again = NULL;
    CHECK_ST(mvm_make_resident_async(sp, 0, 0, MVM_ALL_PAGES, &old), MVM_OK);
    for (int ms = 0; ms < 10000 && stats_of(sp).moves_deferred == 0; ms++)
        usleep(1000);
    CHECK(stats_of(sp).moves_deferred == 1); /* landed, its remap behind the pin */
    fake_hold_copies(1);
    CHECK_ST(mvm_prefetch(sp, 0, 1, MVM_ALL_PAGES, &other), MVM_OK);
    CHECK(fake_wait_copy_held(10000)); /* the worker is inside expert 1's copy */
    CHECK_ST(mvm_unpin(sp, 0, 0), MVM_OK);
    CHECK(stats_of(sp).moves_deferred == (info.home_mapped ? 1u : 0u));
    CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_OK);
    const bool back = stats_of(sp).free_pages == P; /* not when a landing no one runs lands */
    CHECK(back);
    CHECK_ST(mvm_pin(sp, 0, 0), MVM_OK);
    if (back) /* (else the load would wait for ever) */
        CHECK_ST(mvm_make_resident_async(sp, 0, 0, MVM_ALL_PAGES, &again), MVM_OK);
    fake_hold_copies(0);
    CHECK_ST(mvm_unpin(sp, 0, 0), MVM_OK); /* (a pinned expert's landings wait for this) */
    if (again) {
        CHECK_ST(mvm_move_wait(again, -1), MVM_OK);
        CHECK_ST(mvm_move_release(again), MVM_OK);
    }
    CHECK_ST(mvm_move_wait(other, -1), MVM_OK);
    mvm_status old_st = mvm_move_wait(old, -1);
    CHECK(info.home_mapped ? old_st == MVM_ERR_CANCELLED : old_st == MVM_OK);
    CHECK_ST(mvm_move_release(other), MVM_OK);
    CHECK_ST(mvm_move_release(old), MVM_OK);
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
    CHECK(r.resident == P && reads_match(sp, 0, 0, P * PAGE));
    CHECK(reads_match(sp, 0, 1, P * PAGE));
    CHECK(stats_of(sp).free_pages == 0 && stats_of(sp).moves_deferred == 0);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(fake_live_handles() == 0);
}

/* A load asked for while another's copy is on the bus (its fence not done for 300 ms) has
 * its copy queued at once, behind it, where the worker polls the fence (MOEVM_MOVE_SPIN);
 * a worker asleep in the fence's wait takes it once the first has landed, or before, if it
 * came before the worker went to wait. Both land with their bytes. */
static void test_copies_queued_in_flight(void)
{
    mvm_space_info info;
    mvm_space *sp = filled_space(1, 2, PAGE, 2, &info);
    mvm_move *a, *b;
    fake_set_event_sync_delay_us(300000);
    unsigned long begun = fake_copies_begun();
    CHECK_ST(mvm_make_resident_async(sp, 0, 0, MVM_ALL_PAGES, &a), MVM_OK);
    while (fake_copies_begun() == begun)
        sched_yield();
    begun = fake_copies_begun();
    CHECK_ST(mvm_make_resident_async(sp, 0, 1, MVM_ALL_PAGES, &b), MVM_OK);
    while (fake_copies_begun() == begun)
        sched_yield();
    if (info.move_spin_us) /* b's copy began with a's fence still pending (300 ms) */
        CHECK_ST(mvm_move_test(a), MVM_ERR_BUSY);
    fake_set_event_sync_delay_us(0);
    CHECK_ST(mvm_move_wait(a, -1), MVM_OK);
    CHECK_ST(mvm_move_wait(b, -1), MVM_OK);
    CHECK_ST(mvm_move_release(a), MVM_OK);
    CHECK_ST(mvm_move_release(b), MVM_OK);
    CHECK(reads_match(sp, 0, 0, PAGE) && reads_match(sp, 0, 1, PAGE));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

static void test_unpin_after_stream(void)
{
    mvm_space *sp = make_space(1, 2, PAGE, 2);
    fill(sp, 1, 2, PAGE);
    CHECK_ST(mvm_pin(sp, 0, 0), MVM_OK);
    void *stream = (void *)0; /* the default stream */
    fake_stream_hold(stream, 1);
    CHECK_ST(mvm_unpin_after(sp, 0, 0, stream), MVM_OK);
    CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_ERR_PINNED); /* the reader is held: still running */
    fake_stream_hold(stream, 0);
    /* The unpin lands once the worker sees the stream done; no deadline but the test's. */
    mvm_status st;
    while ((st = mvm_evict(sp, 0, 0, 0)) == MVM_ERR_PINNED)
        sched_yield();
    CHECK_ST(st, MVM_OK);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}


/* The copy lanes of the run (MOEVM_COPY_STREAMS, vmm/cuda_lanes.c). */
static unsigned long copy_lanes(void)
{
    const char *v = getenv("MOEVM_COPY_STREAMS");
    return v ? strtoul(v, NULL, 10) : 1;
}

/* The driver call the migration worker waits for a copy's fence with: asleep in
 * cuEventSynchronize, or polling cuEventQuery where it spins (MOEVM_MOVE_SPIN). */
static const char *fence_wait_call(const mvm_space_info *info)
{
    return info->move_spin_us ? "cuEventQuery" : "cuEventSynchronize";
}

/* Whether c is one load of a run of `pages` pages: a copy per lane it was split across (one
 * lane: a single copy), and each of those lanes joined once for the load's fence. */
static bool one_load(struct calls c, unsigned long pages)
{
    unsigned long n = pages < copy_lanes() ? pages : copy_lanes();
    return c.copy == n && c.join == (copy_lanes() > 1 ? n : 0);
}

/* A move costs a constant number of mapping calls, whatever the expert's size: one cuMemMap
 * and one cuMemSetAccess of its slab to load (plus, where homes are mapped, unmapping the
 * home's pages, a mapping each), one cuMemUnmap to evict (plus mapping the homes back); one
 * copy per run and lane; no allocation once the pool's slabs fit the runs, and no event once
 * the first fences' are given back (the backend keeps them). MoEpic's split costs one
 * reload the first time a layer's experts are cut at a page, and one unmap after that. */
static void test_calls_per_move(void)
{
    enum { N = 8 };
    mvm_space_info info;
    mvm_space *sp = filled_space(2, 2, N * PAGE, 2 * N, &info);
    unsigned long homes = info.home_mapped ? N : 0;
    struct calls c = calls_now();
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
    c = calls_since(c);
    CHECK(c.map == 1 && c.access == 1 && c.unmap == homes && c.create == 0 && one_load(c, N));
    CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_OK);
    c = calls_now();
    CHECK_ST(mvm_make_resident(sp, 1, 0, MVM_ALL_PAGES), MVM_ERR_NOSPACE);
    CHECK_ST(mvm_evict(sp, 0, 1, 0), MVM_OK);
    c = calls_since(c);
    /* where homes are unmapped the unmap is the worker's, when idle (vmm/slab.c): by now,
     * or later */
    CHECK(info.home_mapped ? c.unmap == 1 : c.unmap <= 1);
    CHECK(c.map == homes && c.access == (info.home_mapped ? 1u : 0u));
    CHECK(reads_match(sp, 0, 0, N * PAGE));

    /* MoEpic's split in layer 0, twice: the first cut at page 3 drops the run and reloads 3
     * pages into a new slab; the rest comes back as a second run, in another new slab. The
     * second time round the slabs exist: one unmap to cut, one map to grow, no copy to cut. */
    mvm_residency r;
    for (int round = 0; round < 2; round++) {
        const unsigned long unmaps = fake_calls("cuMemUnmap");
        c = calls_now();
        CHECK_ST(mvm_evict(sp, 0, 0, 3), MVM_OK);
        c = calls_since(c);
        CHECK(round == 0 ? one_load(c, 3) : c.copy == 0);
        CHECK(round == 0 || ((info.home_mapped ? c.unmap == 1 : c.unmap <= 1) && c.create == 0));
        CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
        CHECK(r.resident == 3 && r.resident_prefix == 3);
        CHECK(stats_of(sp).free_pages == 2 * N - 3);
        c = calls_now();
        CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
        c = calls_since(c);
        CHECK(one_load(c, N - 3) && (round == 0 || (c.map == 1 && c.access == 1 && c.create == 0)));
        /* the second round's cut left its run's mapping (where homes are unmapped) to the
         * worker, when idle, or to the growing load's map there: once either way */
        CHECK(round == 0 || info.home_mapped || fake_calls("cuMemUnmap") - unmaps == 1);
        CHECK(round == 0 || c.event == 0);
        CHECK(reads_match(sp, 0, 0, N * PAGE));
    }
    /* Another layer's experts keep whole runs: the cut is per layer. */
    CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_OK);
    c = calls_now();
    CHECK_ST(mvm_make_resident(sp, 1, 1, MVM_ALL_PAGES), MVM_OK);
    c = calls_since(c);
    CHECK(c.map - c.create == 1 && one_load(c, N) && c.event == 0);
    CHECK(reads_match(sp, 1, 1, N * PAGE));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(fake_live_handles() == 0);
}

/* Whether the expert's address reads its weights, whatever its pages' states. */
static bool address_reads(mvm_space *sp, uint32_t l, uint32_t e, uint64_t bytes)
{
    uint8_t *want = malloc(bytes);
    if (!want)
        return false;
    weights_of(l, e, want, bytes);
    bool ok = memcmp(mvm_expert_addr(sp, l, e), want, bytes) == 0;
    free(want);
    return ok;
}

/* A reader that pins an expert while it loads orders its stream after the copy, on the
 * device, instead of waiting on the host for the landing (mvm_expert_wait_on): it returns
 * with the copy queued and the slab mapped at the expert's address, the move still
 * unfinished (a pin holds the landing off, so a host wait there would never end); after
 * the last unpin it lands with no driver call. A copy that fails after the stream was ordered keeps its
 * mapping until then; one that fails before is reported, and its move says why. With homes
 * mapped the address shows the home until the copy lands: the host waits. */
static void test_wait_on_stream(void)
{
    enum { P = 2 };
    mvm_space_info info;
    mvm_space *sp = filled_space(1, 3, P * PAGE, 3 * P, &info);
    const char *fence_call = fence_wait_call(&info);
    void *stream = NULL; /* the default stream */
    CHECK_ST(mvm_pin(sp, 0, 0), MVM_OK);
    if (info.home_mapped) {
        CHECK_ST(mvm_expert_wait_on(sp, 0, 0, stream), MVM_ERR_UNSUPPORTED);
        CHECK_ST(mvm_unpin(sp, 0, 0), MVM_OK);
        CHECK_ST(mvm_space_destroy(sp), MVM_OK);
        return;
    }
    CHECK_ST(mvm_expert_wait_on(sp, 0, 1, stream), MVM_ERR_INVALID); /* not pinned */
    CHECK_ST(mvm_expert_wait_on(sp, 0, 0, stream), MVM_ERR_CANCELLED); /* never asked */
    mvm_move *m;
    /* counted before the request: the worker may wait for the fence before this thread
     * gets back */
    const unsigned long syncs = fake_calls(fence_call);
    CHECK_ST(mvm_make_resident_async(sp, 0, 0, MVM_ALL_PAGES, &m), MVM_OK);
    const unsigned long waits = fake_calls("cuStreamWaitEvent");
    CHECK_ST(mvm_expert_wait_on(sp, 0, 0, stream), MVM_OK);
    /* one stream wait (the fence is kept while the job lives), and no host wait on this
     * thread: the move cannot finish while the pin holds its landing */
    const unsigned long ordered = fake_calls("cuStreamWaitEvent") - waits;
    CHECK(copy_lanes() > 1 ? ordered >= 1 : ordered == 1); /* lanes join the copy stream too */
    CHECK_ST(mvm_move_test(m), MVM_ERR_BUSY);
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
    CHECK(r.loading == P && r.resident == 0 && address_reads(sp, 0, 0, P * PAGE));
    CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_ERR_PINNED); /* nor can it be cancelled */
    /* the worker's wait for the fence (not this thread's) lands it, once unpinned, with no
     * driver call: its slab was mapped before its copy was done */
    while (fake_calls(fence_call) == syncs)
        sched_yield();
    struct calls c = calls_now();
    CHECK_ST(mvm_unpin(sp, 0, 0), MVM_OK);
    CHECK_ST(mvm_move_wait(m, -1), MVM_OK);
    c = calls_since(c);
    CHECK_ST(mvm_move_release(m), MVM_OK);
    CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
    CHECK(r.resident == P && r.loading == 0 && reads_match(sp, 0, 0, P * PAGE));
    CHECK(c.map == 0 && c.access == 0 && c.unmap == 0);

    /* the fence's wait fails after the stream was ordered: mapped and readable until the
     * unpin, then home, its slab back, the move naming the call */
    CHECK_ST(mvm_pin(sp, 0, 1), MVM_OK);
    char rule[40];
    snprintf(rule, sizeof rule, "%s:1", fence_call);
    fake_set_fail(rule);
    CHECK_ST(mvm_make_resident_async(sp, 0, 1, MVM_ALL_PAGES, &m), MVM_OK);
    CHECK_ST(mvm_expert_wait_on(sp, 0, 1, stream), MVM_OK);
    CHECK_ST(mvm_move_test(m), MVM_ERR_BUSY);
    CHECK(address_reads(sp, 0, 1, P * PAGE));
    CHECK_ST(mvm_unpin(sp, 0, 1), MVM_OK);
    CHECK_ST(mvm_move_wait(m, -1), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), fence_call) != NULL);
    CHECK_ST(mvm_move_release(m), MVM_OK);
    fake_set_fail("");
    CHECK_ST(mvm_expert_residency(sp, 0, 1, &r), MVM_OK);
    CHECK(r.resident == 0 && r.loading == 0 && reads_match(sp, 0, 1, P * PAGE));
    CHECK(stats_of(sp).free_pages == 2 * P);

    /* the copy fails before any stream is ordered: the reader is told, and the move why */
    CHECK_ST(mvm_pin(sp, 0, 2), MVM_OK);
    fake_set_fail("cuMemcpyHtoDAsync:1");
    CHECK_ST(mvm_make_resident_async(sp, 0, 2, MVM_ALL_PAGES, &m), MVM_OK);
    CHECK_ST(mvm_expert_wait_on(sp, 0, 2, stream), MVM_ERR_CANCELLED);
    CHECK_ST(mvm_unpin(sp, 0, 2), MVM_OK);
    CHECK_ST(mvm_move_wait(m, -1), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "cuMemcpyHtoDAsync") != NULL);
    CHECK_ST(mvm_move_release(m), MVM_OK);
    fake_set_fail("");
    CHECK(stats_of(sp).free_pages == 2 * P && reads_match(sp, 0, 2, P * PAGE));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(fake_live_handles() == 0);
}

/* Runs c while a map is held (`held`: one was seen), gives it up to 10 s, then lets the
 * maps go and joins it: whether it returned while the map was held. */
static bool returns_while_held(struct side_call *c, int held)
{
    pthread_t t;
    if (pthread_create(&t, NULL, side_call_run, c) != 0) {
        fake_hold_maps(0);
        return false;
    }
    for (int i = 0; held && i < 10000 && !atomic_load(&c->done); i++)
        usleep(1000);
    const bool done = atomic_load(&c->done);
    fake_hold_maps(0);
    pthread_join(t, NULL);
    return done;
}

/* Where homes are unmapped the worker maps a load's slab at its address while the copy is
 * on the bus, and the driver's calls (~100 us while kernels run, on an H200) take place
 * without the space's lock: with the worker held inside that map, another thread pins and
 * unpins a resident expert (a decode step's pins, requests and unpins went through the lock
 * the worker held); then the load lands, readable. */
static void test_map_off_the_lock(void)
{
    enum { P = 2 };
    mvm_space_info info;
    mvm_space *sp = filled_space(1, 3, P * PAGE, 3 * P, &info);
    if (info.home_mapped) { /* every move maps at landing, under the lock */
        CHECK_ST(mvm_space_destroy(sp), MVM_OK);
        return;
    }
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
    fake_hold_maps(1);
    mvm_move *m = NULL;
    CHECK_ST(mvm_make_resident_async(sp, 0, 1, MVM_ALL_PAGES, &m), MVM_OK);
    const int held = fake_wait_map_held(10000);
    CHECK(held);
    struct side_call c = {.sp = sp};
    CHECK(returns_while_held(&c, held)); /* else it waits for the lock the map holds */
    CHECK_ST(c.st, MVM_OK);
    CHECK_ST(mvm_move_wait(m, -1), MVM_OK);
    CHECK_ST(mvm_move_release(m), MVM_OK);
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 1, &r), MVM_OK);
    CHECK(r.resident == P && r.loading == 0 && reads_match(sp, 0, 1, P * PAGE));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

/* A reader of the pool's view (mvm_expert_wait_view) is ordered after a load's copy once it
 * is queued, not once the slab is mapped at the expert's address: with the worker held
 * inside that map, it returns the view's address, where the copied bytes are; the load
 * lands at the unpin. A resident expert's address is its slab's in the view too. Where
 * homes are mapped, unsupported (the expert's address serves). */
static void test_wait_view(void)
{
    enum { P = 2 };
    mvm_space_info info;
    mvm_space *sp = filled_space(1, 3, P * PAGE, 3 * P, &info);
    uint64_t addr = 0;
    CHECK_ST(mvm_pin(sp, 0, 0), MVM_OK);
    if (info.home_mapped) {
        CHECK_ST(mvm_expert_wait_view(sp, 0, 0, NULL, &addr), MVM_ERR_UNSUPPORTED);
        CHECK_ST(mvm_unpin(sp, 0, 0), MVM_OK);
        CHECK_ST(mvm_space_destroy(sp), MVM_OK);
        return;
    }
    CHECK_ST(mvm_expert_wait_view(sp, 0, 1, NULL, &addr), MVM_ERR_INVALID); /* not pinned */
    CHECK_ST(mvm_expert_wait_view(sp, 0, 0, NULL, &addr), MVM_ERR_CANCELLED); /* not asked */
    CHECK_ST(mvm_expert_wait_view(sp, 0, 0, NULL, NULL), MVM_ERR_INVALID);
    uint8_t *want = malloc(P * PAGE);
    CHECK(want != NULL);
    if (!want)
        return;
    weights_of(0, 0, want, P * PAGE);
    fake_hold_maps(1);
    mvm_move *m = NULL;
    CHECK_ST(mvm_make_resident_async(sp, 0, 0, MVM_ALL_PAGES, &m), MVM_OK);
    const int held = fake_wait_map_held(10000); /* its copy is queued, its map under way */
    CHECK(held);
    const unsigned long waits = fake_calls("cuStreamWaitEvent");
    struct side_call v = {.sp = sp, .what = SIDE_VIEW};
    CHECK(returns_while_held(&v, held)); /* else it waits for the map */
    CHECK_ST(v.st, MVM_OK);
    addr = v.addr;
    CHECK(fake_calls("cuStreamWaitEvent") > waits);
    CHECK(addr != 0 && addr != (uint64_t)(uintptr_t)mvm_expert_addr(sp, 0, 0));
    CHECK(addr && memcmp((const void *)(uintptr_t)addr, want, P * PAGE) == 0);
    CHECK_ST(mvm_unpin(sp, 0, 0), MVM_OK);
    CHECK_ST(mvm_move_wait(m, -1), MVM_OK);
    CHECK_ST(mvm_move_release(m), MVM_OK);
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
    CHECK(r.resident == P && reads_match(sp, 0, 0, P * PAGE));
    /* resident: at once, the same slab's address */
    uint64_t again = 0;
    CHECK_ST(mvm_pin(sp, 0, 0), MVM_OK);
    CHECK_ST(mvm_expert_wait_view(sp, 0, 0, NULL, &again), MVM_OK);
    CHECK(again == addr);
    CHECK_ST(mvm_unpin(sp, 0, 0), MVM_OK);
    free(want);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

/* Loads by the reader (mvm_fill_*): a slab set aside counts against the budget and is
 * written at its view address; landed, the expert reads its bytes at its own address with
 * nothing copied; an expert not at home, an address not set aside, a full budget are
 * refused, changing nothing; landing a pinned expert waits for its unpin; a failed map
 * leaves the expert at home and readable and its slab free. The host backend has no view
 * a reader writes: unsupported. */
static void test_fill(void)
{
    enum { P = 2 };
    mvm_space_info info;
    mvm_space *sp = filled_space(1, 3, P * PAGE, 2 * P, &info);
    uint64_t a = 0, b = 0;
    if (backend == MVM_BACKEND_HOST) {
        CHECK_ST(mvm_fill_reserve(sp, &a), MVM_ERR_UNSUPPORTED);
        CHECK_ST(mvm_space_destroy(sp), MVM_OK);
        return;
    }
    uint8_t *w = malloc(P * PAGE);
    CHECK(w != NULL);
    if (!w)
        return;
    CHECK_ST(mvm_fill_reserve(sp, NULL), MVM_ERR_INVALID);
    CHECK_ST(mvm_fill_reserve(sp, &a), MVM_OK);
    CHECK(stats_of(sp).free_pages == P && stats_of(sp).reserved_pages == P);
    weights_of(0, 1, w, P * PAGE);
    memcpy((void *)(uintptr_t)a, w, P * PAGE); /* the reader's stores (the fake's memory) */
    CHECK_ST(mvm_fill_land(sp, 0, 1, a + 1, NULL), MVM_ERR_INVALID);
    uint64_t at = 1;
    CHECK_ST(mvm_fill_pending(sp, 0, 1, &at), MVM_OK);
    CHECK(at == 0); /* at home */
    mvm_move *m = NULL;
    const struct calls before = calls_now();
    CHECK_ST(mvm_fill_land(sp, 0, 1, a, &m), MVM_OK);
    CHECK_ST(mvm_move_wait(m, -1), MVM_OK);
    CHECK_ST(mvm_move_release(m), MVM_OK);
    const struct calls after = calls_now();
    CHECK(after.copy == before.copy && after.map == before.map + 1 &&
          after.create == before.create); /* one mapping, no copy, the slab it was given */
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 1, &r), MVM_OK);
    CHECK(r.resident == P && r.loading == 0 && reads_match(sp, 0, 1, P * PAGE));
    mvm_stats st = stats_of(sp);
    CHECK(st.pages_filled == P && st.pages_loaded == P && st.bytes_moved == 0);
    CHECK(st.reserved_pages == 0 && st.free_pages == P && st.resident_pages == P);
    CHECK_ST(mvm_fill_land(sp, 0, 1, a, NULL), MVM_ERR_INVALID); /* landed: not set aside */
    /* refused, nothing changed: an expert not at home; then given back, once */
    CHECK_ST(mvm_fill_reserve(sp, &b), MVM_OK);
    CHECK_ST(mvm_fill_reserve(sp, &a), MVM_ERR_NOSPACE); /* the budget is spoken for */
    CHECK_ST(mvm_fill_land(sp, 0, 1, b, NULL), MVM_ERR_BUSY);
    CHECK(reads_match(sp, 0, 1, P * PAGE) && stats_of(sp).reserved_pages == P);
    CHECK_ST(mvm_fill_return(sp, b), MVM_OK);
    CHECK_ST(mvm_fill_return(sp, b), MVM_ERR_INVALID);
    CHECK(stats_of(sp).free_pages == P && stats_of(sp).reserved_pages == 0);
    /* pinned: it lands at the unpin */
    CHECK_ST(mvm_pin(sp, 0, 2), MVM_OK);
    CHECK_ST(mvm_fill_reserve(sp, &b), MVM_OK);
    weights_of(0, 2, w, P * PAGE);
    memcpy((void *)(uintptr_t)b, w, P * PAGE);
    CHECK_ST(mvm_fill_land(sp, 0, 2, b, &m), MVM_OK);
    usleep(20000);
    CHECK_ST(mvm_move_test(m), MVM_ERR_BUSY);
    CHECK_ST(mvm_fill_pending(sp, 0, 2, &at), MVM_OK);
    CHECK(at == b && memcmp((const void *)(uintptr_t)at, w, P * PAGE) == 0);
    CHECK_ST(mvm_unpin(sp, 0, 2), MVM_OK);
    CHECK_ST(mvm_move_wait(m, -1), MVM_OK);
    CHECK_ST(mvm_move_release(m), MVM_OK);
    CHECK(reads_match(sp, 0, 2, P * PAGE) && stats_of(sp).resident_pages == 2 * P);
    CHECK_ST(mvm_fill_pending(sp, 0, 2, &at), MVM_OK);
    CHECK(at == 0); /* resident: its own address */
    /* a failed map: at home, readable, the slab free; evicted, a filled expert goes home */
    CHECK_ST(mvm_evict(sp, 0, 2, 0), MVM_OK);
    CHECK_ST(mvm_fill_reserve(sp, &b), MVM_OK);
    memcpy((void *)(uintptr_t)b, w, P * PAGE);
    fake_set_fail(info.home_mapped ? "cuMemMap:1" : "cuMemMap:1,cuMemMap:2");
    CHECK_ST(mvm_fill_land(sp, 0, 2, b, &m), MVM_OK);
    CHECK_ST(mvm_move_wait(m, -1), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "cuMemMap") != NULL);
    fake_set_fail("");
    CHECK_ST(mvm_move_release(m), MVM_OK);
    CHECK_ST(mvm_expert_residency(sp, 0, 2, &r), MVM_OK);
    CHECK(r.resident == 0 && r.loading == 0 && reads_match(sp, 0, 2, P * PAGE));
    CHECK(stats_of(sp).free_pages == P && stats_of(sp).reserved_pages == 0);
    CHECK_ST(mvm_evict(sp, 0, 1, 0), MVM_OK);
    CHECK(reads_match(sp, 0, 1, P * PAGE) && stats_of(sp).free_pages == 2 * P);
    CHECK_ST(mvm_fill_reserve(sp, &a), MVM_OK); /* left set aside: destroy frees it */
    free(w);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(fake_live_handles() == 0);
}

/* A failed unmap or home mapping during an eviction leaves the run resident and readable,
 * with an error naming the call; the eviction succeeds once the driver does. Where homes
 * are unmapped the eviction does not unmap (the worker does, later: vmm/slab.c), and a
 * failed unmap then fails the next load at that address, naming the call, or none if the
 * worker's try took the failure; the load after it succeeds. */
static void test_evict_failures(void)
{
    enum { N = 4 };
    mvm_space *sp = make_space(1, 2, N * PAGE, N);
    fill(sp, 1, 2, N * PAGE);
    mvm_space_info info;
    CHECK_ST(mvm_space_get_info(sp, &info), MVM_OK);
    mvm_residency r;
    const char *fails[] = {"cuMemUnmap:1", "cuMemSetAccess:1", "cuMemMap:2"};
    if (!info.home_mapped) {
        CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
        fake_set_fail("cuMemUnmap:1");
        CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_OK);
        mvm_status st = mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES);
        fake_set_fail("");
        CHECK(st == MVM_OK || (st == MVM_ERR_BACKEND &&
                               strstr(mvm_last_error(), "cuMemUnmap") != NULL));
        CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
        CHECK(reads_match(sp, 0, 0, N * PAGE) && stats_of(sp).free_pages == 0);
        CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_OK);
    }
    for (int f = 0; f < 3 && info.home_mapped; f++) { /* without homes only the unmap */
        CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
        mvm_stats before = stats_of(sp);
        fake_set_fail(fails[f]);
        CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_ERR_BACKEND);
        fake_set_fail("");
        char want[32];
        snprintf(want, sizeof want, "%.*s", (int)(strchr(fails[f], ':') - fails[f]), fails[f]);
        CHECK(strstr(mvm_last_error(), want) != NULL);
        CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
        CHECK(r.resident == N);
        CHECK(stats_of(sp).free_pages == before.free_pages);
        CHECK(reads_match(sp, 0, 0, N * PAGE));
        CHECK_ST(mvm_evict(sp, 0, 0, 0), MVM_OK);
        CHECK(stats_of(sp).free_pages == N);
        CHECK(reads_match(sp, 0, 0, N * PAGE) || !info.home_mapped);
    }
    /* A cut needs a slab of the kept length: when the driver cannot make one, the kept
     * pages stay home (readable where homes are mapped) and the error names the call;
     * nothing is leaked, and the next load makes the slab. */
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
    fake_set_fail("cuMemCreate:1");
    mvm_status st = mvm_evict(sp, 0, 0, 2); /* the fake's default: CUDA_ERROR_OUT_OF_MEMORY */
    fake_set_fail("");
    CHECK(st == MVM_ERR_NOMEM);
    CHECK(strstr(mvm_last_error(), "cuMemCreate") != NULL);
    CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
    CHECK(r.resident == 0 && r.loading == 0);
    CHECK(stats_of(sp).free_pages == N);
    CHECK(reads_match(sp, 0, 0, N * PAGE) || !info.home_mapped);
    CHECK_ST(mvm_make_resident(sp, 0, 0, 2), MVM_OK);
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
    CHECK(reads_match(sp, 0, 0, N * PAGE));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(fake_live_handles() == 0);
}

static void test_driver_failures(void)
{
    /* Pool creation fails halfway: a clean error and nothing leaked. */
    fake_set_fail("cuMemCreate:3");
    mvm_space_desc d;
    mvm_space_desc_init(&d);
    d.n_layers = 1, d.n_experts = 4, d.expert_bytes = PAGE, d.page_size = PAGE;
    d.device_budget = 4 * PAGE, d.backend = backend;
    mvm_space *sp = NULL;
    mvm_status st = mvm_space_create(&d, &sp);
    CHECK(st == MVM_ERR_NOMEM || st == MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "cuMemCreate") != NULL);
    CHECK(sp == NULL && fake_live_handles() == 0);
    fake_set_fail("");

    /* A remap fails in the worker: the move reports it, the page stays readable at home
     * and its chunk returns to the pool. */
    sp = make_space(1, 2, PAGE, 2);
    fill(sp, 1, 2, PAGE);
    mvm_space_info mapping;
    CHECK_ST(mvm_space_get_info(sp, &mapping), MVM_OK);
    /* Where homes are unmapped the worker maps a run while its copy is on the bus and, if
     * that fails, once more when it lands: both must fail for the move to. */
    fake_set_fail(mapping.home_mapped ? "cuMemMap:1" : "cuMemMap:1,cuMemMap:2");
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "cuMemMap failed") != NULL); /* the worker's reason */
    fake_set_fail("");
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 0, 0, &r), MVM_OK);
    CHECK(r.resident == 0 && r.loading == 0);
    CHECK(stats_of(sp).free_pages == 2);
    CHECK(reads_match(sp, 0, 0, PAGE));
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK); /* and it recovers */
    CHECK(reads_match(sp, 0, 0, PAGE));

    fake_set_fail("cuMemcpyHtoDAsync_v2:1");
    CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "cuMemcpyHtoDAsync failed") != NULL);
    fake_set_fail("");
    CHECK(stats_of(sp).free_pages == 1);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(fake_live_handles() == 0);

    /* The worker lands a batch job by job behind a fence after each job's copies. A fence
     * that cannot be recorded fails its job and the jobs of the batch after it (their
     * copies are not started); the jobs before it land. Expert 3's copy holds the worker
     * (half a second: long enough under TSan too) while 0, 1 and 2 queue up as the next
     * batch, whose second fence (the third counted, 3's first) fails. With copy lanes each
     * job's join records one lane's event before its fence: the sixth record fails. A fence
     * that cannot be waited for fails its job. */
    sp = make_space(1, 4, PAGE, 4);
    fill(sp, 1, 4, PAGE);
    mvm_space_info info;
    CHECK_ST(mvm_space_get_info(sp, &info), MVM_OK);
    mvm_move *mv[4];
    fake_set_copy_delay_us(500000);
    unsigned long begun = fake_copies_begun();
    CHECK_ST(mvm_make_resident_async(sp, 0, 3, MVM_ALL_PAGES, &mv[3]), MVM_OK);
    while (fake_copies_begun() == begun) /* until the worker is in 3's copy, */
        sched_yield();                   /* which read the delay as it began */
    fake_set_copy_delay_us(0);
    char rule[32];
    snprintf(rule, sizeof rule, "cuEventRecord:%d", copy_lanes() > 1 ? 6 : 3);
    fake_set_fail(rule);
    for (uint32_t e = 0; e < 3; e++)
        CHECK_ST(mvm_make_resident_async(sp, 0, e, MVM_ALL_PAGES, &mv[e]), MVM_OK);
    CHECK_ST(mvm_move_wait(mv[3], -1), MVM_OK);
    CHECK_ST(mvm_move_wait(mv[0], -1), MVM_OK);
    CHECK_ST(mvm_move_wait(mv[1], -1), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "copy fence") != NULL);
    CHECK_ST(mvm_move_wait(mv[2], -1), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "not copied: cuEventRecord (copy fence) failed") != NULL);
    for (uint32_t e = 0; e < 4; e++)
        mvm_move_release(mv[e]);
    CHECK_ST(mvm_evict(sp, 0, 3, 0), MVM_OK);
    snprintf(rule, sizeof rule, "%s:1", fence_wait_call(&info));
    fake_set_fail(rule);
    CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), fence_wait_call(&info)) != NULL);
    fake_set_fail("");
    CHECK(stats_of(sp).free_pages == 3); /* only expert 0 is resident */
    for (uint32_t e = 0; e < 4; e++)
        CHECK(reads_match(sp, 0, e, PAGE));
    CHECK_ST(mvm_make_resident(sp, 0, 2, MVM_ALL_PAGES), MVM_OK); /* and it recovers */
    CHECK(reads_match(sp, 0, 2, PAGE));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(fake_live_handles() == 0);

    /* Digests that cannot be had cost only the write-back they would have saved: a module
     * the driver refuses turns them off; a mark that fails (its launch, or the upload of
     * its page list) leaves its load's pages to be written back, a check that fails its
     * eviction's, while other batches keep theirs. */
    d.expert_bytes = 2 * PAGE, d.device_budget = 2 * PAGE, d.write_back = 1;
    fake_set_fail("cuModuleLoadData:1:CUDA_ERROR_UNSUPPORTED_PTX_VERSION");
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    fake_set_fail("");
    mvm_space_get_info(sp, &info);
    CHECK(info.clean_evict == 0);
    fill(sp, 1, 4, 2 * PAGE);
    mvm_stats s = evict_after(sp, 0, NULL);
    CHECK(s.pages_clean == 0 && s.bytes_written_back == 2 * PAGE);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    d.device_budget = 4 * PAGE;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    fill(sp, 1, 4, 2 * PAGE);
    fake_set_fail("cuLaunchKernel:1"); /* the marks of expert 0's load */
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
    fake_set_fail("");
    CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_OK);
    mvm_stats a = stats_of(sp);
    const uint32_t both[] = {0, 1};
    CHECK_ST(mvm_evict_many(sp, 0, both, 2), MVM_OK);
    mvm_stats b = stats_of(sp);
    CHECK(b.pages_clean - a.pages_clean == 2);
    CHECK(b.bytes_written_back - a.bytes_written_back == 2 * PAGE);
    fake_set_fail("cuMemcpyHtoDAsync:3"); /* a load's two pages, then its page list */
    s = evict_after(sp, 0, NULL);
    fake_set_fail("");
    CHECK(s.pages_clean == 0 && s.bytes_written_back == 2 * PAGE);
    CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_OK);
    fake_set_fail("cuLaunchKernel:1"); /* the checks of expert 1's eviction */
    s = evict_after(sp, 1, NULL);
    fake_set_fail("");
    CHECK(s.pages_clean == 0 && s.bytes_written_back == 2 * PAGE);
    s = evict_after(sp, 1, NULL); /* and all is well again */
    CHECK(s.pages_clean == 2 && s.bytes_written_back == 0);
    CHECK(reads_match(sp, 0, 0, 2 * PAGE) && reads_match(sp, 0, 1, 2 * PAGE));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    d.write_back = 0;

    /* No device: the cuda backend says so, AUTO falls back to host. */
    fake_set_fail("cuInit:1:CUDA_ERROR_NO_DEVICE,cuInit:2:CUDA_ERROR_NO_DEVICE");
    d.backend = MVM_BACKEND_CUDA;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "cuInit") != NULL);
    d.backend = MVM_BACKEND_AUTO;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    mvm_space_get_info(sp, &info);
    CHECK(strcmp(info.backend, "host") == 0);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    fake_set_fail("");

    /* A device index that does not exist. */
    d.backend = MVM_BACKEND_CUDA;
    d.device = 5;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_ERR_RANGE);
    CHECK(strstr(mvm_last_error(), "device 5") != NULL);
}

/* The probe MVM_BACKEND_AUTO tries: a usable device, one that is not there, no driver; none
 * of them takes a context. */
static void test_cuda_probe(void)
{
    unsigned long retains = fake_calls("cuDevicePrimaryCtxRetain");
    CHECK_ST(mvm_cuda_probe(0), MVM_OK);
    CHECK_ST(mvm_cuda_probe(99), MVM_ERR_RANGE);
    CHECK(strstr(mvm_last_error(), "CUDA device 99 requested") != NULL);
    CHECK(fake_calls("cuDevicePrimaryCtxRetain") == retains);
    char *lib = strdup(getenv("MOEVM_CUDA_LIBRARY"));
    setenv("MOEVM_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    CHECK_ST(mvm_cuda_probe(0), MVM_ERR_UNSUPPORTED);
    CHECK(strstr(mvm_last_error(), "no CUDA driver") != NULL);
    setenv("MOEVM_CUDA_LIBRARY", lib, 1);
    free(lib);
}

/* A packed space (mvm_space_desc.pack) of experts of 2 pages and 3000 bytes: where its
 * budget holds them back to back (21 pages for the 30 they take in pages), on a device;
 * the host backend, whose CPU reads the experts' addresses, keeps pages. The experts lie
 * their bytes (rounded to MVM_PACK_ALIGN) apart; the first request copies every expert up
 * straight from its home, zeros after it (over the fake, one whose first copy, a gap's,
 * or thirteenth, an expert's, fails: every page back home, the driver's call named, and
 * the next request copies them), after which each reads its weights at its address
 * and every page is resident; evictions and loads by the reader are refused, naming why. A
 * fraction under 1 of the budget, pack 0, or a write-back space keep pages. Over the fake,
 * a creation whose slab's map into the pool view or at the space's base fails says so and
 * leaves no handle behind. */
static void test_packed(void)
{
    const uint32_t L = 2, E = 5, ppe = 3;
    const uint64_t bytes = 2 * PAGE + 3000;
    const uint64_t stride = (bytes + MVM_PACK_ALIGN - 1) / MVM_PACK_ALIGN * MVM_PACK_ALIGN;
    const uint32_t packed_pages = (uint32_t)((L * E * stride + PAGE - 1) / PAGE);
    mvm_space_desc d;
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    d.n_layers = L, d.n_experts = E, d.expert_bytes = bytes, d.page_size = PAGE;
    d.backend = backend, d.pack = 1;
    d.device_budget = (uint64_t)packed_pages * PAGE; /* under the 30 pages in pages */
    mvm_space *sp = NULL;
    mvm_space_info info;
    const int live0 = on_fake ? fake_live_handles() : 0;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    CHECK_ST(sp ? mvm_space_get_info(sp, &info) : MVM_ERR_INVALID, MVM_OK);
    if (!sp || backend == MVM_BACKEND_HOST) {
        CHECK(!sp || (!info.packed && info.device_pages == packed_pages));
        mvm_space_destroy(sp);
        return;
    }
    CHECK(info.packed && info.expert_stride == stride && info.pages_per_expert == ppe);
    CHECK(info.device_pages == L * E * ppe && info.device_bytes == (uint64_t)packed_pages * PAGE);
    CHECK((uint8_t *)mvm_expert_addr(sp, 1, 0) - (uint8_t *)mvm_expert_addr(sp, 0, 0) ==
          (ptrdiff_t)(E * stride));
    fill(sp, L, E, bytes);
    mvm_residency r;
    for (int k = 1; on_fake && k <= 2; k++) { /* the first copy fails (a gap's zeros), then
                                                  an expert's: nothing resident, the call
                                                  named */
        fake_set_fail(k == 1 ? "cuMemcpyHtoDAsync:1" : "cuMemcpyHtoDAsync:13");
        CHECK_ST(mvm_make_resident(sp, 0, 2, MVM_ALL_PAGES), MVM_ERR_BACKEND);
        CHECK(strstr(mvm_last_error(), "cuMemcpyHtoDAsync") != NULL);
        fake_set_fail("");
        CHECK_ST(mvm_expert_residency(sp, 1, 4, &r), MVM_OK);
        CHECK(r.resident == 0 && r.loading == 0 && stats_of(sp).resident_pages == 0);
    }
    const unsigned long copies0 = fake_calls ? fake_calls("cuMemcpyHtoDAsync") : 0;
    mvm_move *m = NULL;
    CHECK_ST(mvm_prefetch(sp, 1, 3, MVM_ALL_PAGES, &m), MVM_OK);
    CHECK_ST(mvm_make_resident(sp, 0, 1, 1), MVM_OK); /* joins the one upload */
    CHECK_ST(m ? mvm_move_wait(m, -1) : MVM_ERR_INVALID, MVM_OK);
    mvm_move_release(m);
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t e = 0; e < E; e++) {
            CHECK_ST(mvm_expert_residency(sp, l, e, &r), MVM_OK);
            CHECK(r.resident == ppe && reads_match(sp, l, e, bytes));
        }
    /* each expert straight from its home (one copy where one lane carries it), and zeros
     * in the gap after it (the fake's new memory is 0xff) */
    const char *lanes = getenv("MOEVM_COPY_STREAMS");
    CHECK(!fake_calls || (lanes && strcmp(lanes, "1")) ||
          fake_calls("cuMemcpyHtoDAsync") - copies0 == 2 * L * E);
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t e = 0; e < E; e++) {
            const uint8_t *gap = (const uint8_t *)mvm_expert_addr(sp, l, e) + bytes;
            uint8_t any = 0;
            for (uint64_t i = 0; i < stride - bytes; i++)
                any |= gap[i];
            CHECK(stride > bytes && any == 0);
        }
    const mvm_stats s = stats_of(sp);
    CHECK(s.resident_pages == L * E * ppe && s.loading_pages == 0);
    CHECK_ST(mvm_make_resident(sp, 1, 1, MVM_ALL_PAGES), MVM_OK);
    CHECK(stats_of(sp).hits == s.hits + 1);
    CHECK_ST(mvm_evict(sp, 0, 1, 0), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "packed") && strstr(mvm_last_error(), "MOEVM_PACK=off"));
    const uint32_t few[] = {2};
    CHECK_ST(mvm_evict_many(sp, 1, few, 1), MVM_ERR_INVALID);
    CHECK_ST(mvm_evict(sp, 0, 1, MVM_ALL_PAGES), MVM_OK); /* keeps every page: nothing */
    uint64_t addr = 0;
    CHECK_ST(mvm_fill_reserve(sp, &addr), MVM_ERR_UNSUPPORTED);
    CHECK_ST(mvm_expert_residency(sp, 0, 1, &r), MVM_OK);
    CHECK(r.resident == ppe && reads_match(sp, 0, 1, bytes));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(!on_fake || fake_live_handles() == live0); /* its slab unmapped and released */

    for (int k = 1; on_fake && k <= 2; k++) { /* the pool view's map, then the base's */
        const int live = fake_live_handles();
        fake_set_fail(k == 1 ? "cuMemMap:1" : "cuMemMap:2");
        sp = NULL;
        CHECK_ST(mvm_space_create(&d, &sp), MVM_ERR_BACKEND);
        CHECK(!sp && strstr(mvm_last_error(), "cuMemMap") != NULL);
        fake_set_fail("");
        CHECK(fake_live_handles() == live);
    }

    /* pages: a share of the experts under all of them (it asks for a cache of that share),
     * pack 0, write-back */
    for (int k = 0; k < 3; k++) {
        mvm_space_desc e = d;
        e.device_budget = k == 0 ? 0 : e.device_budget;
        e.device_budget_frac = 0.9; /* 27 pages: the packed 21 would fit */
        e.pack = k != 1;
        e.write_back = k == 2;
        sp = NULL;
        CHECK_ST(mvm_space_create(&e, &sp), MVM_OK);
        CHECK(sp && mvm_space_get_info(sp, &info) == MVM_OK && !info.packed &&
              info.expert_stride == ppe * PAGE);
        mvm_space_destroy(sp);
    }
}

/* Whether the slot address `at` holds expert (l, e)'s weights (filled by fill()). */
static bool slot_reads(uint64_t at, uint32_t l, uint32_t e, uint64_t bytes)
{
    uint8_t *want = malloc(bytes);
    bool ok = want && at && (weights_of(l, e, want, bytes),
                             memcmp((const void *)(uintptr_t)at, want, bytes) == 0);
    free(want);
    return ok;
}

/* A slot space (mvm_space_desc.slots): the budget in whole experts; a move is its copy, with
 * no map, access grant or unmap, and the expert is read where it landed (mvm_expert_slot,
 * the pool's view), never at its own address; an eviction calls no driver and its slab takes
 * the next expert; parts of experts, readers of the own address, write-back and the host
 * backend are refused, naming why; a failed copy leaves the expert at home and its slab
 * free; loads by the reader land with no map. Any other space's mvm_expert_slot is the
 * expert's own address once resident. */
static void test_slots(void)
{
    const uint32_t L = 2, E = 3, ppe = 3;
    const uint64_t bytes = 2 * PAGE + 3000;
    mvm_space_desc d;
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    d.n_layers = L, d.n_experts = E, d.expert_bytes = bytes, d.page_size = PAGE;
    d.backend = backend, d.slots = 1;
    d.device_budget = 7 * PAGE; /* two experts and a page that holds none */
    mvm_space *sp = NULL;
    if (backend == MVM_BACKEND_HOST) {
        CHECK_ST(mvm_space_create(&d, &sp), MVM_ERR_UNSUPPORTED);
        CHECK(!sp && strstr(mvm_last_error(), "pool view"));
        return;
    }
    mvm_space_desc w = d;
    w.write_back = 1;
    CHECK_ST(mvm_space_create(&w, &sp), MVM_ERR_INVALID);
    CHECK(!sp && strstr(mvm_last_error(), "write_back"));
    w = d;
    w.device_budget = 2 * PAGE;
    CHECK_ST(mvm_space_create(&w, &sp), MVM_ERR_INVALID);
    CHECK(!sp && strstr(mvm_last_error(), "no whole expert"));

    const int live0 = fake_live_handles();
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    if (!sp)
        return;
    mvm_space_info info;
    CHECK_ST(mvm_space_get_info(sp, &info), MVM_OK);
    CHECK(info.slots && !info.home_mapped && info.pages_per_expert == ppe);
    CHECK(info.device_pages == 2 * ppe && stats_of(sp).free_pages == 2 * ppe);
    fill(sp, L, E, bytes);
    uint64_t at[3] = {0};
    CHECK_ST(mvm_expert_slot(sp, 0, 0, &at[0]), MVM_OK);
    CHECK(at[0] == 0); /* at home */
    CHECK_ST(mvm_expert_slot(sp, 0, 0, NULL), MVM_ERR_INVALID);
    CHECK_ST(mvm_expert_slot(sp, 0, E, &at[0]), MVM_ERR_RANGE);

    struct calls c = calls_now();
    CHECK_ST(mvm_make_resident(sp, 0, 0, MVM_ALL_PAGES), MVM_OK);
    CHECK_ST(mvm_make_resident(sp, 0, 1, MVM_ALL_PAGES), MVM_OK);
    c = calls_since(c);
    CHECK(c.map == 0 && c.access == 0 && c.unmap == 0 && c.create == 0 && c.copy >= 2);
    CHECK_ST(mvm_expert_slot(sp, 0, 0, &at[0]), MVM_OK);
    CHECK_ST(mvm_expert_slot(sp, 0, 1, &at[1]), MVM_OK);
    CHECK(at[0] && at[1] && at[0] != at[1] &&
          at[0] != (uint64_t)(uintptr_t)mvm_expert_addr(sp, 0, 0));
    CHECK(slot_reads(at[0], 0, 0, bytes) && slot_reads(at[1], 0, 1, bytes));
    CHECK_ST(mvm_make_resident(sp, 0, 2, MVM_ALL_PAGES), MVM_ERR_NOSPACE);

    /* whole experts only, said; nothing changes */
    CHECK_ST(mvm_make_resident(sp, 1, 0, 1), MVM_ERR_UNSUPPORTED);
    CHECK(strstr(mvm_last_error(), "slot space") && strstr(mvm_last_error(), "MOEVM_SLOTS"));
    CHECK_ST(mvm_prefetch(sp, 1, 0, 2, NULL), MVM_ERR_UNSUPPORTED);
    CHECK_ST(mvm_evict(sp, 0, 0, 1), MVM_ERR_UNSUPPORTED);
    CHECK(stats_of(sp).resident_pages == 2 * ppe && stats_of(sp).loading_pages == 0);
    CHECK_ST(mvm_pin(sp, 0, 0), MVM_OK);
    CHECK_ST(mvm_expert_wait_on(sp, 0, 0, NULL), MVM_ERR_UNSUPPORTED);
    CHECK(strstr(mvm_last_error(), "mvm_expert_wait_view"));
    uint64_t view = 0;
    CHECK_ST(mvm_expert_wait_view(sp, 0, 0, NULL, &view), MVM_OK);
    CHECK(view == at[0]);
    CHECK_ST(mvm_unpin(sp, 0, 0), MVM_OK);

    /* an eviction calls no driver; its slab takes the next expert, read there */
    c = calls_now();
    CHECK_ST(mvm_evict(sp, 0, 1, 0), MVM_OK);
    CHECK_ST(mvm_make_resident(sp, 0, 2, MVM_ALL_PAGES), MVM_OK);
    c = calls_since(c);
    CHECK(c.map == 0 && c.access == 0 && c.unmap == 0 && c.create == 0);
    CHECK_ST(mvm_expert_slot(sp, 0, 1, &at[2]), MVM_OK);
    CHECK(at[2] == 0);
    CHECK_ST(mvm_expert_slot(sp, 0, 2, &at[2]), MVM_OK);
    CHECK(at[2] == at[1] && slot_reads(at[2], 0, 2, bytes));
    CHECK(slot_reads(at[0], 0, 0, bytes)); /* the other slot untouched */

    /* a failed copy: at home, its slab free, the call named */
    const uint32_t one[] = {2};
    CHECK_ST(mvm_evict_many(sp, 0, one, 1), MVM_OK);
    fake_set_fail("cuMemcpyHtoDAsync:1");
    CHECK_ST(mvm_make_resident(sp, 1, 1, MVM_ALL_PAGES), MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "cuMemcpyHtoDAsync") != NULL);
    fake_set_fail("");
    mvm_residency r;
    CHECK_ST(mvm_expert_residency(sp, 1, 1, &r), MVM_OK);
    CHECK(r.resident == 0 && r.loading == 0 && stats_of(sp).free_pages == ppe);
    CHECK_ST(mvm_make_resident(sp, 1, 1, MVM_ALL_PAGES), MVM_OK);
    CHECK_ST(mvm_expert_slot(sp, 1, 1, &at[2]), MVM_OK);
    CHECK(slot_reads(at[2], 1, 1, bytes));

    /* a load by the reader: written at its slab, landed with no map, read there */
    CHECK_ST(mvm_evict(sp, 1, 1, 0), MVM_OK);
    uint64_t slab = 0;
    CHECK_ST(mvm_fill_reserve(sp, &slab), MVM_OK);
    if (slab)
        weights_of(1, 2, (uint8_t *)(uintptr_t)slab, bytes);
    c = calls_now();
    mvm_move *m = NULL;
    CHECK_ST(mvm_fill_land(sp, 1, 2, slab, &m), MVM_OK);
    CHECK_ST(m ? mvm_move_wait(m, -1) : MVM_ERR_INVALID, MVM_OK);
    mvm_move_release(m);
    c = calls_since(c);
    CHECK(c.map == 0 && c.access == 0 && c.copy == 0);
    CHECK_ST(mvm_expert_slot(sp, 1, 2, &at[2]), MVM_OK);
    CHECK(at[2] == slab && slot_reads(at[2], 1, 2, bytes));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(fake_live_handles() == live0);

    /* any other space: the expert's own address, once resident */
    d.slots = 0, d.device_budget = 6 * PAGE;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    if (!sp)
        return;
    fill(sp, L, E, bytes);
    CHECK_ST(mvm_make_resident(sp, 1, 2, MVM_ALL_PAGES), MVM_OK);
    CHECK_ST(mvm_expert_slot(sp, 1, 2, &at[0]), MVM_OK);
    CHECK(at[0] == (uint64_t)(uintptr_t)mvm_expert_addr(sp, 1, 2) && slot_reads(at[0], 1, 2, bytes));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
}

/* A slot space's pages under the device's granularity (the fake's is 64 KiB here, a
 * slot space's page 16 KiB): the pool is one allocation of whole granules within the budget,
 * shared out as whole experts of their own pages (an expert of 40,000 bytes takes 48 KiB,
 * not a granule); every expert that fits is resident at once, each at its own slot, none
 * overlapping; the default page is 64 KiB, doubled while an expert takes more than 64; a
 * page that neither divides the granularity nor is a multiple of it is refused. */
static void test_slot_pages(void)
{
    enum { SUB = 16u << 10 };
    const uint32_t L = 2, E = 8;
    const uint64_t bytes = 40000;
    mvm_space_desc d;
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    d.n_layers = L, d.n_experts = E, d.expert_bytes = bytes, d.page_size = SUB;
    d.backend = backend, d.slots = 1;
    d.device_budget = 300000; /* four granules: 16 pages, five experts */
    mvm_space *sp = NULL;
    mvm_space_desc w = d;
    w.page_size = 12u << 10;
    CHECK_ST(mvm_space_create(&w, &sp), MVM_ERR_INVALID);
    CHECK(!sp && strstr(mvm_last_error(), "granularity"));
    const int live0 = fake_live_handles();
    const unsigned long creates = fake_calls("cuMemCreate");
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    CHECK(fake_calls("cuMemCreate") - creates == 1); /* the pool, whole */
    if (!sp)
        return;
    mvm_space_info info;
    CHECK_ST(mvm_space_get_info(sp, &info), MVM_OK);
    CHECK(info.slots && info.page_size == SUB && info.pages_per_expert == 3);
    CHECK(info.device_pages == 15 && info.device_bytes == 4 * 65536); /* whole granules */
    fill(sp, L, E, bytes);
    uint64_t at[5] = {0};
    struct calls c = calls_now();
    for (uint32_t i = 0; i < 5; i++) {
        CHECK_ST(mvm_make_resident(sp, i / E, i % E, MVM_ALL_PAGES), MVM_OK);
        CHECK_ST(mvm_expert_slot(sp, i / E, i % E, &at[i]), MVM_OK);
    }
    c = calls_since(c);
    CHECK(c.map == 0 && c.access == 0 && c.create == 0 && c.unmap == 0);
    for (uint32_t i = 0; i < 5; i++) { /* all read back once all are in: none overlaps */
        CHECK(slot_reads(at[i], i / E, i % E, bytes));
        for (uint32_t k = 0; k < i; k++)
            CHECK(at[i] != at[k] && (at[i] > at[k] ? at[i] - at[k] : at[k] - at[i]) >= 3 * SUB);
    }
    CHECK_ST(mvm_make_resident(sp, 0, 5, MVM_ALL_PAGES), MVM_ERR_NOSPACE);
    CHECK_ST(mvm_evict(sp, 0, 2, 0), MVM_OK);
    uint64_t again = 0;
    CHECK_ST(mvm_make_resident(sp, 1, 7, MVM_ALL_PAGES), MVM_OK);
    CHECK_ST(mvm_expert_slot(sp, 1, 7, &again), MVM_OK);
    CHECK(again == at[2] && slot_reads(again, 1, 7, bytes));
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    CHECK(fake_live_handles() == live0);

    /* the default: 64 KiB pages, doubled while an expert takes more than 64 (Qwen3-30B-A3B's
     * Q8_0 expert: 39 of 128 KiB, 95 KiB of them empty, where 2 MiB pages left 1.2 MiB) */
    d.page_size = 0, d.expert_bytes = 5013504, d.device_budget = 0, d.device_budget_frac = 0.25;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    CHECK(sp && mvm_space_get_info(sp, &info) == MVM_OK && info.page_size == (128u << 10) &&
          info.pages_per_expert == 39 && info.device_pages % 39 == 0);
    mvm_space_destroy(sp);
}

/* Pages of several granules that are no power of two (MOEVM_PAGE_SIZE=6M on a GPU: three
 * of 2 MiB): the driver reserves address ranges at power-of-two alignments only, so the
 * space, its views and a slot space's pool are aligned to the largest one dividing the page.
 * Experts move and read back in such pages, in a slot space too. */
static void test_page_of_granules(void)
{
    const uint64_t page = 3 * PAGE, bytes = 5 * PAGE; /* two pages an expert, the last part */
    const uint32_t L = 2, E = 3;
    for (int slots = 0; slots <= (backend == MVM_BACKEND_CUDA); slots++) {
        mvm_space_desc d;
        CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
        d.n_layers = L, d.n_experts = E, d.expert_bytes = bytes, d.page_size = page;
        d.device_budget = 4 * page, d.backend = backend, d.slots = slots;
        mvm_space *sp = NULL;
        CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
        if (!sp)
            return;
        mvm_space_info info;
        CHECK_ST(mvm_space_get_info(sp, &info), MVM_OK);
        CHECK(info.page_size == page && info.pages_per_expert == 2 && info.slots == slots);
        fill(sp, L, E, bytes);
        for (uint32_t i = 0; i < L * E; i++) { /* two resident at a time, the budget's */
            const uint32_t l = i / E, e = i % E;
            CHECK_ST(mvm_make_resident(sp, l, e, MVM_ALL_PAGES), MVM_OK);
            uint64_t at = 0;
            CHECK_ST(mvm_expert_slot(sp, l, e, &at), MVM_OK);
            CHECK(at && (slots ? slot_reads(at, l, e, bytes) : reads_match(sp, l, e, bytes)));
            if (i > 0)
                CHECK_ST(mvm_evict(sp, (i - 1) / E, (i - 1) % E, 0), MVM_OK);
        }
        CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "host") && strcmp(argv[1], "cuda"))) {
        fprintf(stderr, "usage: test_space host|cuda\n");
        return 2;
    }
    backend = strcmp(argv[1], "host") == 0 ? MVM_BACKEND_HOST : MVM_BACKEND_CUDA;
    if (backend == MVM_BACKEND_CUDA) {
        const char *lib = getenv("MOEVM_CUDA_LIBRARY");
        void *fake = dlopen(lib ? lib : "libcuda.so.1", RTLD_NOW);
        fake_set_fail = fake ? (void (*)(const char *))dlsym(fake, "fakecuda_set_fail") : NULL;
        fake_live_handles = fake ? (int (*)(void))dlsym(fake, "fakecuda_live_handles") : NULL;
        fake_stream_hold = fake ? (void (*)(void *, int))dlsym(fake, "fakecuda_stream_hold") : NULL;
        fake_set_copy_delay_us =
            fake ? (void (*)(unsigned long long))dlsym(fake, "fakecuda_set_copy_delay_us") : NULL;
        fake_calls = fake ? (unsigned long (*)(const char *))dlsym(fake, "fakecuda_calls") : NULL;
        fake_copies_begun =
            fake ? (unsigned long (*)(void))dlsym(fake, "fakecuda_copies_begun") : NULL;
        fake_set_event_sync_delay_us = fake ? (void (*)(unsigned long long))dlsym(
                                                  fake, "fakecuda_set_event_sync_delay_us")
                                            : NULL;
        fake_hold_maps = fake ? (void (*)(int))dlsym(fake, "fakecuda_hold_maps") : NULL;
        fake_wait_map_held =
            fake ? (int (*)(unsigned))dlsym(fake, "fakecuda_wait_map_held") : NULL;
        fake_hold_copies = fake ? (void (*)(int))dlsym(fake, "fakecuda_hold_copies") : NULL;
        fake_wait_copy_held =
            fake ? (int (*)(unsigned))dlsym(fake, "fakecuda_wait_copy_held") : NULL;
        fake_pass_copies =
            fake ? (void (*)(unsigned))dlsym(fake, "fakecuda_pass_copies") : NULL;
        on_fake = fake_set_fail && fake_live_handles && fake_stream_hold &&
                  fake_set_copy_delay_us && fake_copies_begun && fake_set_event_sync_delay_us &&
                  fake_hold_maps && fake_wait_map_held && fake_hold_copies &&
                  fake_wait_copy_held && fake_pass_copies;
        if (!on_fake) {
            fprintf(stderr, "test_space cuda: needs tests/fakecuda as MOEVM_CUDA_LIBRARY\n");
            return 2;
        }
    }
    RUN(test_bad_inputs);
    RUN(test_layout);
    RUN(test_reads_follow_backing);
    RUN(test_write_back);
    RUN(test_clean_evict);
    RUN(test_partial_residency);
    RUN(test_capacity);
    RUN(test_pins);
    RUN(test_moves_and_stats);
    RUN(test_homes_beyond_memory);
    RUN(test_packed);
    RUN(test_slots);
    if (on_fake)
        RUN(test_slot_pages);
    if (on_fake || backend == MVM_BACKEND_HOST)
        RUN(test_page_of_granules);
    if (backend == MVM_BACKEND_HOST)
        RUN(test_fill);
    if (backend == MVM_BACKEND_HOST)
        RUN(test_home_tails_take_no_memory);
    if (on_fake) {
        RUN(test_auto_budget_reserve);
        RUN(test_priority_and_promotion);
        RUN(test_prefetch_cancel);
        RUN(test_prefetch_overtaken);
        RUN(test_prefetch_hurried);
        RUN(test_cancel_and_destroy_in_flight);
        RUN(test_wait_on_stream);
        RUN(test_map_off_the_lock);
        RUN(test_wait_view);
        RUN(test_fill);
        RUN(test_reload_overtakes_cancelled_prefetch);
        RUN(test_load_waits_for_cancelled_copy);
        RUN(test_reload_while_mapped_load_cancelled);
        RUN(test_unpin_lands_deferred_load);
        RUN(test_evict_deferred_landing_then_repin);
        RUN(test_unpin_after_stream);
        RUN(test_copies_queued_in_flight);
        RUN(test_driver_failures);
        RUN(test_calls_per_move);
        RUN(test_evict_failures);
        RUN(test_cuda_probe);
    }
    TEST_END();
}
