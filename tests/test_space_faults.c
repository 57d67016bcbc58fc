/*
 * The expert space under driver faults: the space's rows of the fault matrix
 * (docs/faults.md). Each operation (a load, a batch of loads in the migration worker, an
 * eviction with write-back, a batched eviction, a cut, a discard) is run once without faults
 * to count the driver calls it makes, then once for every one of those calls with exactly
 * that call failing (tests/fakecuda's fault rules). After each run:
 *
 *   - every page is resident and its address reads what the device last held, or is at home
 *     and its home holds what it should (the device's writes after an eviction, the loaded
 *     bytes after a discard), read through the address too where homes are mapped. Both are
 *     compared with copies the test keeps, never with the library's own home;
 *   - a failed operation's error names the call that failed;
 *   - no chunk is lost (free + resident pages = the budget), and the operation run again
 *     without the fault succeeds and leaves every page readable;
 *   - once the space is destroyed, no allocation, mapping or reservation is left.
 *
 * Calls that only release (cuMemRelease, cuMemFree, cu*Destroy, cuModuleUnload,
 * cuMemAddressFree, cuMemHostUnregister) are not failed: there is nothing to keep intact
 * when the driver will not take memory back, and the backend logs them.
 *
 *   test_space_faults     (MOEVM_CUDA_LIBRARY = tests/fakecuda)
 */
#include <dlfcn.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "moevm/moevm.h"

#define PAGE (64u << 10)
#define EXPERTS 4u
#define BYTES (2u * PAGE - 24) /* two pages, the last one short */
#define BUDGET_PAGES 6u        /* three experts */

static int (*fake_set_fail)(const char *);
static int (*fake_live_handles)(void);
static int (*fake_live_reservations)(void);
static size_t (*fake_mapped_bytes)(void);
static unsigned long (*fake_calls)(const char *);
static void (*fake_set_copy_delay_us)(unsigned long long);
static unsigned long (*fake_copies_begun)(void);

/* Every driver call the space makes that can fail without leaking by its failure. */
static const char *const fallible[] = {
    "cuCtxSetCurrent", "cuMemCreate",       "cuMemMap",          "cuMemSetAccess",
    "cuMemUnmap",      "cuMemcpyHtoDAsync", "cuMemcpyDtoH",      "cuMemcpyDtoHAsync",
    "cuMemsetD8Async", "cuMemAlloc",        "cuEventCreate",     "cuEventRecord",
    "cuEventQuery",    "cuEventSynchronize", "cuStreamSynchronize", "cuLaunchKernel",
    "cuStreamWaitEvent",
};
enum { N_FALLIBLE = sizeof fallible / sizeof fallible[0] };

/* A space and what its pages must read: `loaded` is what each expert's pages held when
 * loaded (its home before any write), `device` what the device holds after its writes. */
struct rig {
    mvm_space *sp;
    bool write_back, homes_mapped;
    bool writes_kept; /* the operation evicts with write-back (not a discard) */
    uint8_t loaded[EXPERTS][BYTES], device[EXPERTS][BYTES];
};

/* A fresh space of random weights; NULL (a failed check) if it cannot be made. */
static struct rig *rig_open(bool write_back)
{
    mvm_space_desc d;
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    d.n_layers = 1, d.n_experts = EXPERTS, d.expert_bytes = BYTES, d.page_size = PAGE;
    d.device_budget = BUDGET_PAGES * PAGE, d.backend = MVM_BACKEND_CUDA;
    d.write_back = write_back;
    struct rig *r = calloc(1, sizeof *r);
    CHECK(r != NULL);
    if (!r)
        return NULL;
    CHECK_ST(mvm_space_create(&d, &r->sp), MVM_OK);
    if (!r->sp) {
        free(r);
        return NULL;
    }
    mvm_space_info info;
    CHECK_ST(mvm_space_get_info(r->sp, &info), MVM_OK);
    r->write_back = write_back;
    r->homes_mapped = info.home_mapped;
    r->writes_kept = true;
    uint64_t s = 12345;
    for (uint32_t e = 0; e < EXPERTS; e++) {
        for (uint32_t i = 0; i < BYTES; i++)
            r->loaded[e][i] = (uint8_t)check_rng_next(&s);
        memcpy(mvm_expert_home(r->sp, 0, e), r->loaded[e], BYTES);
        memcpy(r->device[e], r->loaded[e], BYTES);
    }
    return r;
}

static void rig_close(struct rig *r)
{
    CHECK_ST(mvm_space_destroy(r->sp), MVM_OK);
    free(r);
}

/* "The device writes" expert e through its fixed address (write_back spaces only: a
 * read-only space's contract is that nothing writes). Every page changes. */
static void device_writes(struct rig *r, uint32_t e)
{
    if (!r->write_back)
        return;
    uint8_t *addr = mvm_expert_addr(r->sp, 0, e);
    for (uint32_t i = 7; i < BYTES; i += 4001) {
        addr[i] ^= 0xa5;
        r->device[e][i] ^= 0xa5;
    }
}

static void load(struct rig *r, uint32_t e)
{
    CHECK_ST(mvm_make_resident(r->sp, 0, e, MVM_ALL_PAGES), MVM_OK);
}

/* What every page reads, against the rig's copies; what the space's counters say. */
static bool pages_intact(struct rig *r, const char *when)
{
    bool ok = true;
    for (uint32_t e = 0; e < EXPERTS; e++) {
        const uint8_t *addr = mvm_expert_addr(r->sp, 0, e), *home = mvm_expert_home(r->sp, 0, e);
        const uint8_t *at_home = r->writes_kept ? r->device[e] : r->loaded[e];
        for (uint32_t p = 0; p * PAGE < BYTES; p++) {
            uint32_t off = p * PAGE, len = BYTES - off < PAGE ? BYTES - off : PAGE;
            mvm_page_state s = MVM_PAGE_LOADING;
            mvm_page_get_state(r->sp, 0, e, p, &s);
            bool page_ok;
            if (s == MVM_PAGE_RESIDENT)
                page_ok = memcmp(addr + off, r->device[e] + off, len) == 0;
            else if (s == MVM_PAGE_HOME)
                page_ok = memcmp(home + off, at_home + off, len) == 0 &&
                          (!r->homes_mapped || memcmp(addr + off, at_home + off, len) == 0);
            else
                page_ok = false; /* nothing may be left loading */
            if (!page_ok) {
                fprintf(stderr, "  %s: expert %u page %u (%s) does not read its bytes\n", when,
                        e, p, s == MVM_PAGE_RESIDENT ? "resident" : s == MVM_PAGE_HOME ? "home"
                                                                                    : "loading");
                ok = false;
            }
        }
    }
    mvm_stats st;
    CHECK_ST(mvm_space_get_stats(r->sp, &st), MVM_OK);
    if (st.free_pages + st.resident_pages + st.loading_pages != BUDGET_PAGES ||
        st.loading_pages != 0) {
        fprintf(stderr, "  %s: %u free + %u resident + %u loading pages of %u\n", when,
                st.free_pages, st.resident_pages, st.loading_pages, BUDGET_PAGES);
        ok = false;
    }
    return ok;
}

/* The operations. `setup` runs before the fault is armed, `act` under it (and again after,
 * to recover); act returns the first failure it saw. */
struct op {
    const char *name;
    void (*setup)(struct rig *r);
    mvm_status (*act)(struct rig *r);
};

static void setup_none(struct rig *r) { (void)r; }
static void setup_one_written(struct rig *r)
{
    load(r, 0);
    device_writes(r, 0);
}
static void setup_two_written(struct rig *r)
{
    setup_one_written(r);
    load(r, 1);
    device_writes(r, 1);
}
static void setup_discard(struct rig *r)
{
    setup_one_written(r);
    r->writes_kept = false;
}

static mvm_status act_load(struct rig *r) { return mvm_make_resident(r->sp, 0, 0, MVM_ALL_PAGES); }

/* Three loads in the migration worker, the last two as one batch: expert 2's copy holds
 * the worker while 0 and 1 queue behind it. */
static mvm_status act_load_batch(struct rig *r)
{
    const uint32_t order[3] = {2, 0, 1};
    mvm_move *mv[3] = {NULL, NULL, NULL};
    mvm_status first = MVM_OK, st;
    fake_set_copy_delay_us(20000);
    unsigned long begun = fake_copies_begun();
    for (int i = 0; i < 3; i++) {
        st = mvm_make_resident_async(r->sp, 0, order[i], MVM_ALL_PAGES, &mv[i]);
        if (st != MVM_OK && first == MVM_OK)
            first = st;
        if (i == 0 && st == MVM_OK) /* until 2's copy is on the bus, or its move failed */
            while (fake_copies_begun() == begun && mvm_move_wait(mv[0], 0) == MVM_ERR_TIMEOUT)
                sched_yield();
    }
    fake_set_copy_delay_us(0);
    for (int i = 0; i < 3; i++) {
        if (!mv[i])
            continue;
        st = mvm_move_wait(mv[i], -1);
        if (st != MVM_OK && first == MVM_OK)
            first = st;
        mvm_move_release(mv[i]);
    }
    return first;
}

/* A prefetch in pieces (MOEVM_COPY_PIECE, a page: main sets it) overtaken by an on-demand
 * load asked once its first piece is on the bus: each piece's copy, fence and wait, and the
 * load's between them. */
static mvm_status act_prefetch_overtaken(struct rig *r)
{
    mvm_move *pf = NULL, *d = NULL;
    fake_set_copy_delay_us(20000);
    unsigned long begun = fake_copies_begun();
    mvm_status first = mvm_prefetch(r->sp, 0, 2, MVM_ALL_PAGES, &pf), st;
    if (first == MVM_OK) /* until its first piece is on the bus, or its move failed */
        while (fake_copies_begun() == begun && mvm_move_wait(pf, 0) == MVM_ERR_TIMEOUT)
            sched_yield();
    if ((st = mvm_make_resident_async(r->sp, 0, 0, MVM_ALL_PAGES, &d)) != MVM_OK &&
        first == MVM_OK)
        first = st;
    fake_set_copy_delay_us(0);
    mvm_move *both[2] = {pf, d};
    for (int i = 0; i < 2; i++) {
        if (!both[i])
            continue;
        if ((st = mvm_move_wait(both[i], -1)) != MVM_OK && first == MVM_OK)
            first = st;
        mvm_move_release(both[i]);
    }
    return first;
}

static mvm_status act_evict(struct rig *r) { return mvm_evict(r->sp, 0, 0, 0); }
static mvm_status act_evict_many(struct rig *r)
{
    const uint32_t both[2] = {0, 1};
    return mvm_evict_many(r->sp, 0, both, 2);
}
static mvm_status act_cut(struct rig *r) { return mvm_evict(r->sp, 0, 0, 1); }
static mvm_status act_discard(struct rig *r) { return mvm_discard(r->sp, 0, 0, 0); }

static const struct op ops[] = {
    {"load", setup_none, act_load},
    {"load_batch", setup_none, act_load_batch},
    {"prefetch_overtaken", setup_none, act_prefetch_overtaken},
    {"evict", setup_one_written, act_evict},
    {"evict_many", setup_two_written, act_evict_many},
    {"cut", setup_one_written, act_cut},
    {"discard", setup_discard, act_discard},
};

/* One run of `op` with the k-th call of `call` failing; returns whether the armed fault
 * fired. A failure is reported with its cell. */
static bool run_cell(const struct op *op, bool write_back, const char *call, unsigned long k)
{
    int handles = fake_live_handles(), reservations = fake_live_reservations();
    size_t mapped = fake_mapped_bytes();
    struct rig *r = rig_open(write_back);
    if (!r)
        return false;
    op->setup(r);
    char label[96], spec[64];
    snprintf(label, sizeof label, "%s%s, %s #%lu fails", op->name,
             write_back ? " (write_back)" : "", call, k);
    unsigned long before = fake_calls(call);
    snprintf(spec, sizeof spec, "%s:%lu", call, k);
    fake_set_fail(spec);
    mvm_status st = op->act(r);
    fake_set_fail("");
    bool fired = fake_calls(call) - before >= k;
    bool ok = true;
    if (st != MVM_OK && !strstr(mvm_last_error(), call)) {
        fprintf(stderr, "  %s: %s, and the error does not name the call: %s\n", label,
                mvm_status_name(st), mvm_last_error());
        ok = false;
    }
    ok &= pages_intact(r, label);
    mvm_status again = op->act(r); /* the driver works again: so does the operation */
    if (again != MVM_OK) {
        fprintf(stderr, "  %s: run again without the fault: %s (%s)\n", label,
                mvm_status_name(again), mvm_last_error());
        ok = false;
    }
    ok &= pages_intact(r, label);
    rig_close(r);
    if (fake_live_handles() != handles || fake_live_reservations() != reservations ||
        fake_mapped_bytes() != mapped) {
        fprintf(stderr, "  %s: after destroy %d allocations, %d reservations, %zu bytes mapped "
                "more than before\n", label, fake_live_handles() - handles,
                fake_live_reservations() - reservations, fake_mapped_bytes() - mapped);
        ok = false;
    }
    if (!ok)
        fprintf(stderr, "FAIL cell: %s\n", label);
    CHECK(ok);
    return fired;
}

/* Every operation × every call it makes × each of that call's occurrences. */
static void test_fault_sweep(void)
{
    unsigned cells = 0, fired = 0;
    for (int wb = 0; wb < 2; wb++)
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            unsigned long made[N_FALLIBLE];
            /* The clean run counts what the operation calls (setup excluded). */
            struct rig *r = rig_open(wb);
            if (!r)
                return;
            ops[o].setup(r);
            for (int c = 0; c < N_FALLIBLE; c++)
                made[c] = fake_calls(fallible[c]);
            CHECK_ST(ops[o].act(r), MVM_OK);
            for (int c = 0; c < N_FALLIBLE; c++)
                made[c] = fake_calls(fallible[c]) - made[c];
            CHECK(pages_intact(r, ops[o].name));
            const bool homes_mapped = r->homes_mapped;
            rig_close(r);
            char made_line[512] = "";
            for (int c = 0, at = 0; c < N_FALLIBLE && at < (int)sizeof made_line; c++)
                if (made[c])
                    at += snprintf(made_line + at, sizeof made_line - at, " %s x%lu",
                                   fallible[c], made[c]);
            fprintf(stderr, "  %s%s:%s\n", ops[o].name, wb ? " (write_back)" : "", made_line);
            unsigned long total = 0;
            for (int c = 0; c < N_FALLIBLE; c++)
                for (unsigned long k = 1; k <= made[c]; k++, total++, cells++)
                    fired += run_cell(&ops[o], wb, fallible[c], k);
            /* every operation calls the driver, but an eviction where homes are unmapped,
             * whose unmap is the worker's, later (vmm/slab.c; test_space's
             * test_evict_failures fails it) */
            CHECK(total > 0 || !homes_mapped);
        }
    fprintf(stderr, "  %u cells, %u with the fault fired\n", cells, fired);
    /* A batch's call counts can differ run to run (how the worker groups jobs); most cells
     * must still have hit their call, or the sweep tests nothing. */
    CHECK(fired * 10 >= cells * 9);
}

#define LOOKUP(fn, name)                                                                       \
    (*(void **)&(fn) = fake ? dlsym(fake, name) : NULL, ok &= (fn) != NULL)

int main(void)
{
    const char *lib = getenv("MOEVM_CUDA_LIBRARY");
    void *fake = lib ? dlopen(lib, RTLD_NOW) : NULL;
    bool ok = true;
    LOOKUP(fake_set_fail, "fakecuda_set_fail");
    LOOKUP(fake_live_handles, "fakecuda_live_handles");
    LOOKUP(fake_live_reservations, "fakecuda_live_reservations");
    LOOKUP(fake_mapped_bytes, "fakecuda_mapped_bytes");
    LOOKUP(fake_calls, "fakecuda_calls");
    LOOKUP(fake_set_copy_delay_us, "fakecuda_set_copy_delay_us");
    LOOKUP(fake_copies_begun, "fakecuda_copies_begun");
    if (!ok) {
        fprintf(stderr, "test_space_faults: needs tests/fakecuda as MOEVM_CUDA_LIBRARY\n");
        return 2;
    }
    setenv("MOEVM_COPY_PIECE", "1", 1); /* prefetches copy a page at a time */
    RUN(test_fault_sweep);
    TEST_END();
}
