/*
 * The engine's residency manager (engine/forward/residency.h) on the host backend: the evict
 * module it is given decides what makes room, a step's own experts are never evicted for
 * each other, a step that cannot fit runs what does not from its home or, for a reader
 * that cannot read the homes, in rounds that fit, and leaves nothing pinned, modules that
 * ask for experts get them, a config module's held table loads at create and is never
 * evicted, bad modules and parameters are clear errors; and the engine's
 * decisions are the simulator's: a trace recorded by the engine, replayed by tools/sim with
 * the same module, budget and page size, counts the same accesses and hits.
 * `test_residency cuda` (over tests/fakecuda): a step asks for all its copies before it
 * waits for any, and a round returns before its copies land.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine/forward/forward.h"
#include "engine/forward/residency.h"
#include "engine/forward/residency_impl.h"
#include "engine/model/model.h"
#include "engine/plan/plan.h"
#include "engine/synth/mkmodel.h"
#include "policy/choose.h"
#include "policy/cost.h"
#include "tools/sim.h"
#include "tools/sim_inputs.h"
#include "tools/trace.h"
#include "tools/trace_out.h"
#include "vmm/error.h"

#define PAGE 4096u

/* A host space of PAGE pages with a budget of `frac` of the experts' pages. */
static mvm_space_desc host_desc(double frac)
{
    mvm_space_desc d;
    mvm_space_desc_init(&d);
    d.backend = MVM_BACKEND_HOST;
    d.page_size = PAGE;
    d.device_budget = 0;
    d.device_budget_frac = frac;
    return d;
}

/* 2 layers x 4 experts of two pages, a budget of `experts` of them. */
static mvm_space *space_of(uint32_t experts)
{
    mvm_space_desc d = host_desc(0);
    d.n_layers = 2;
    d.n_experts = 4;
    d.expert_bytes = 2 * PAGE;
    d.device_budget = experts * 2 * PAGE;
    mvm_space *sp = NULL;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    return sp;
}

/* A budget of three experts. */
static mvm_space *small_space(void)
{
    return space_of(3);
}

static mvm_resid *resid_for(mvm_space *sp, const char *evict, const char *args)
{
    mvm_resid_params p = {.evict = evict, .evict_args = args, .top_k = 2};
    mvm_resid *r = NULL;
    CHECK_ST(mvm_resid_create(sp, &p, &r), MVM_OK);
    return r;
}

static uint32_t resident_pages(mvm_space *sp, uint32_t l, uint32_t e)
{
    mvm_residency res = {0};
    mvm_expert_residency(sp, l, e, &res);
    return res.resident;
}

/* One layer step of one token over experts[0..n), as the engine runs it. */
static mvm_status step(mvm_resid *r, uint32_t l, const int32_t *experts, uint32_t n, int wait)
{
    mvm_status st = mvm_resid_begin(r, l, experts, n, wait);
    if (st != MVM_OK)
        return st;
    uint32_t counts[4] = {0};
    for (uint32_t i = 0; i < n; i++)
        counts[experts[i]] = 1;
    mvm_pstep s = {.layer = l, .n_tok = 1, .experts = (int32_t *)experts, .counts = counts};
    return mvm_resid_end(r, &s, experts, n, l == 1);
}

static mvm_status use1(mvm_resid *r, uint32_t l, int32_t e)
{
    return step(r, l, &e, 1, 1);
}

/* The module decides: after uses 0,0,0,1,2 of layer 0, loading (0,3) evicts the least
 * recently used (0,0) under lru and the least frequently used (0,1) under lfu. */
static void test_module_decides(void)
{
    static const char *const mods[] = {"lru", "lfu"};
    for (int m = 0; m < 2; m++) {
        mvm_space *sp = small_space();
        mvm_resid *r = resid_for(sp, mods[m], "");
        CHECK(strcmp(mvm_resid_evict_name(r), mods[m]) == 0);
        static const int32_t uses[] = {0, 0, 0, 1, 2, 3};
        for (size_t i = 0; i < sizeof uses / sizeof *uses; i++)
            CHECK_ST(use1(r, 0, uses[i]), MVM_OK);
        CHECK(resident_pages(sp, 0, 0) == (m == 0 ? 0u : 2u));
        CHECK(resident_pages(sp, 0, 1) == (m == 0 ? 2u : 0u));
        CHECK(resident_pages(sp, 0, 2) == 2 && resident_pages(sp, 0, 3) == 2);
        mvm_resid_stats rs;
        mvm_resid_get_stats(r, &rs);
        CHECK(rs.accesses == 6 && rs.hits == 2 && rs.evictions == 1 && rs.bypassed == 0);
        mvm_resid_destroy(r);
        mvm_space_destroy(sp);
    }
}

/* The measured CPU time corrects the model's (mvm_resid_note_cpu): the reported scale
 * starts at 1, follows steady ratios (4: within 2% after 40 steps of weight 1/8), counts a
 * wild step as a ratio of 16 at most, and fades back toward the model, 1/256 of its log a
 * step, while no step runs experts on the CPU; 0 or negative times change nothing but the
 * fading. */
static void test_cpu_scale(void)
{
    mvm_space *sp = small_space();
    mvm_resid *r = resid_for(sp, "lru", "");
    mvm_resid_stats rs;
    mvm_resid_get_stats(r, &rs);
    CHECK(rs.cpu_scale == 1);
    for (int i = 0; i < 40; i++)
        mvm_resid_note_cpu(r, 1e-3, 4e-3);
    mvm_resid_get_stats(r, &rs);
    CHECK(fabs(rs.cpu_scale - 4) < 0.08);
    const double before = log(rs.cpu_scale);
    mvm_resid_note_cpu(r, 1e-6, 10.0); /* a ratio of 1e7, counted as 16 */
    mvm_resid_get_stats(r, &rs);
    CHECK(fabs(log(rs.cpu_scale) - (before + (log(16) - before) / 8)) < 1e-12);
    const double high = log(rs.cpu_scale);
    mvm_resid_note_cpu(r, 0, 0);
    mvm_resid_note_cpu(r, 1e-3, 0);
    mvm_resid_get_stats(r, &rs);
    CHECK(fabs(log(rs.cpu_scale) - high * (255.0 / 256) * (255.0 / 256)) < 1e-12);
    for (int i = 0; i < 40; i++)
        mvm_resid_note_cpu(r, 4e-3, 1e-3); /* a CPU faster than modelled */
    mvm_resid_get_stats(r, &rs);
    CHECK(rs.cpu_scale < 0.27 && rs.cpu_scale > 0.23);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
}

/* A step observed ahead of its end (mvm_resid_observe, as forward_cuda.c does while the
 * device computes) is counted once: lfu after uses 0 (observed early), 1, 1, 2 evicts the
 * older of the two used once, (0,0), for (0,3); counted twice, (0,0) would stay and (0,2)
 * go. */
static void test_observe_once(void)
{
    mvm_space *sp = small_space();
    mvm_resid *r = resid_for(sp, "lfu", "");
    const int32_t zero = 0;
    uint32_t counts[4] = {1, 0, 0, 0};
    mvm_pstep s = {.layer = 0, .n_tok = 1, .experts = (int32_t *)&zero, .counts = counts};
    CHECK_ST(mvm_resid_begin(r, 0, &zero, 1, 1), MVM_OK);
    mvm_resid_observe(r, &s);
    mvm_resid_observe(r, &s); /* a second call before the end changes nothing */
    CHECK_ST(mvm_resid_end(r, &s, &zero, 1, 0), MVM_OK);
    static const int32_t uses[] = {1, 1, 2, 3};
    for (size_t i = 0; i < sizeof uses / sizeof *uses; i++)
        CHECK_ST(use1(r, 0, uses[i]), MVM_OK);
    CHECK(resident_pages(sp, 0, 0) == 0 && resident_pages(sp, 0, 2) == 2);
    CHECK(resident_pages(sp, 0, 1) == 2 && resident_pages(sp, 0, 3) == 2);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
}

/* A step's experts are shielded from eviction while the step loads the others: with
 * (0,0) the least recently used, a step over {3, 0} must evict (0,1), not (0,0). */
static void test_step_shield(void)
{
    mvm_space *sp = small_space();
    mvm_resid *r = resid_for(sp, "lru", "");
    for (int32_t e = 0; e < 3; e++)
        CHECK_ST(use1(r, 0, e), MVM_OK);
    static const int32_t both[] = {3, 0};
    CHECK_ST(step(r, 0, both, 2, 1), MVM_OK);
    CHECK(resident_pages(sp, 0, 0) == 2 && resident_pages(sp, 0, 3) == 2);
    CHECK(resident_pages(sp, 0, 1) == 0 && resident_pages(sp, 0, 2) == 2);
    mvm_resid_stats rs;
    mvm_resid_get_stats(r, &rs);
    CHECK(rs.accesses == 5 && rs.hits == 1);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
}

/* The route module's view: the routing layer's experts whose copies have landed, nothing
 * of another layer, and no expert still loading (its copy is held back by a pin here: an
 * asynchronous load of a pinned expert completes after the last unpin). */
static void test_landed_view(void)
{
    mvm_space *sp = small_space();
    mvm_resid *r = resid_for(sp, "lru", "");
    CHECK_ST(use1(r, 0, 0), MVM_OK);
    CHECK_ST(use1(r, 1, 2), MVM_OK);
    CHECK_ST(mvm_pin(sp, 0, 1), MVM_OK);
    static const int32_t one[] = {1};
    CHECK_ST(mvm_resid_begin(r, 0, one, 1, 0), MVM_OK);
    const mvm_pview *v = mvm_resid_landed_view(r, 0);
    CHECK(v->resident[0] == 2 && v->resident[1] == 0 && v->resident[2] == 0);
    CHECK(v->resident[4 + 2] == 0 && v->capacity_pages == 6);
    v = mvm_resid_landed_view(r, 1);
    CHECK(v->resident[0] == 0 && v->resident[4 + 2] == 2);
    CHECK_ST(mvm_unpin(sp, 0, 1), MVM_OK);
    uint32_t counts[4] = {0, 1, 0, 0};
    mvm_pstep st = {.layer = 0, .n_tok = 1, .experts = (int32_t *)one, .counts = counts};
    CHECK_ST(mvm_resid_end(r, &st, one, 1, 0), MVM_OK);
    for (int i = 0; i < 10000 && resident_pages(sp, 0, 1) < 2; i++)
        usleep(100);
    v = mvm_resid_landed_view(r, 0);
    CHECK(v->resident[0] == 2 && v->resident[1] == 2 && v->resident[4 + 2] == 0);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
}

/* Four experts in a budget of three: the fourth runs from its home, whether the step waits
 * for the other three's copies or not, and the step leaves nothing pinned or shielded (the
 * next steps evict freely). */
static void test_no_room(void)
{
    mvm_space *sp = small_space();
    mvm_resid *r = resid_for(sp, "lru", "");
    static const int32_t four[] = {0, 1, 2, 3};
    CHECK_ST(step(r, 1, four, 4, 1), MVM_OK);
    CHECK(resident_pages(sp, 1, 0) == 2 && resident_pages(sp, 1, 2) == 2);
    CHECK(resident_pages(sp, 1, 3) == 0);
    for (uint32_t e = 0; e < 4; e++) {
        mvm_residency res = {0};
        mvm_expert_residency(sp, 1, e, &res);
        CHECK(res.pins == 0);
    }
    for (int32_t e = 0; e < 4; e++) /* each evicts one of the step's experts */
        CHECK_ST(use1(r, 0, e), MVM_OK);
    CHECK(resident_pages(sp, 0, 3) == 2 && resident_pages(sp, 0, 0) == 0);
    CHECK_ST(step(r, 1, four, 4, 0), MVM_OK);
    mvm_resid_stats rs;
    mvm_resid_get_stats(r, &rs);
    CHECK(rs.bypassed == 2 && rs.extra_rounds == 0); /* the fourth of each step */
    static const int32_t bad[] = {4};
    CHECK_ST(step(r, 0, bad, 1, 1), MVM_ERR_RANGE);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
}

/* mvm_resid_set_shield: while set, no shielded expert is a victim (read-through's late
 * replay keeps what the queued token reads; its pool's refill what the token before used).
 * After uses of 0, 1 and 2 under lru, loading 3 evicts 1, not the least recent 0, which is
 * shielded; with every resident expert shielded nothing can go and 1 runs from its home;
 * the shield cleared, the least recent (0) goes. */
static void test_shield(void)
{
    mvm_space *sp = small_space();
    mvm_resid *r = resid_for(sp, "lru", "");
    for (int32_t e = 0; e < 3; e++)
        CHECK_ST(use1(r, 0, e), MVM_OK);
    uint8_t shield[8] = {1, 0, 0, 0, 0, 0, 0, 0}; /* [layer * 4 + expert] */
    mvm_resid_set_shield(r, shield);
    CHECK_ST(use1(r, 0, 3), MVM_OK);
    CHECK(resident_pages(sp, 0, 0) == 2 && resident_pages(sp, 0, 1) == 0);
    CHECK(resident_pages(sp, 0, 3) == 2);
    shield[2] = shield[3] = 1;
    CHECK_ST(use1(r, 0, 1), MVM_OK);
    CHECK(resident_pages(sp, 0, 1) == 0 && resident_pages(sp, 0, 0) == 2);
    mvm_resid_stats rs;
    mvm_resid_get_stats(r, &rs);
    CHECK(rs.bypassed == 1);
    mvm_resid_set_shield(r, NULL);
    CHECK_ST(use1(r, 0, 1), MVM_OK);
    CHECK(resident_pages(sp, 0, 1) == 2 && resident_pages(sp, 0, 0) == 0);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
}

static uint32_t pins_of(mvm_space *sp, uint32_t l, uint32_t e)
{
    mvm_residency res = {0};
    mvm_expert_residency(sp, l, e, &res);
    return res.pins;
}

/* A round begun and its copies waited for, as the engine's device pass does between its
 * landed experts and the rest (no CHECK here: test_step_asks_all_first calls it from a
 * thread of its own). */
static mvm_status whole_round(mvm_resid *r, uint32_t l, int32_t *experts, uint32_t n,
                              uint32_t *k)
{
    uint32_t ready = 0;
    mvm_status st = mvm_resid_begin_round(r, l, experts, n, k, &ready);
    return st == MVM_OK ? mvm_resid_hold_round(r, l, experts, ready, *k) : st;
}

/* A reader that cannot read the homes runs a step of four experts in a budget of three in
 * rounds: the resident one first with two loaded beside it, then the fourth in the room
 * the released round leaves; every expert is counted once, the step's end reports all four
 * and unpins the last round. */
static void test_rounds(void)
{
    mvm_space *sp = small_space();
    mvm_resid *r = resid_for(sp, "lru", "");
    CHECK_ST(use1(r, 1, 2), MVM_OK);
    int32_t todo[] = {0, 1, 2, 3};
    uint32_t k = 0, ready = 0;
    CHECK_ST(mvm_resid_begin_round(r, 1, todo, 4, &k, &ready), MVM_OK);
    CHECK(k == 3 && todo[0] == 2 && todo[3] == 3 && ready >= 1);
    CHECK((todo[1] == 0 && todo[2] == 1) || (todo[1] == 1 && todo[2] == 0));
    for (uint32_t i = 0; i < ready; i++) /* landed: pinned at once */
        CHECK(pins_of(sp, 1, (uint32_t)todo[i]) == 1);
    CHECK_ST(mvm_resid_hold_round(r, 1, todo, ready, k), MVM_OK);
    for (uint32_t i = 0; i < 4; i++)
        CHECK(pins_of(sp, 1, (uint32_t)todo[i]) == (i < 3));
    CHECK(resident_pages(sp, 1, 3) == 0);
    mvm_resid_release(r, 1, todo, k);
    CHECK_ST(whole_round(r, 1, todo + 3, 1, &k), MVM_OK);
    CHECK(k == 1 && resident_pages(sp, 1, 3) == 2 && pins_of(sp, 1, 3) == 1);
    /* lru: the step's experts are reported used at its end; before it, (1,0) and (1,1)
     * count as never used, older than (1,2), and the first of them offered goes. */
    CHECK(resident_pages(sp, 1, 0) == 0 && resident_pages(sp, 1, 2) == 2);
    static const int32_t four[] = {0, 1, 2, 3};
    uint32_t counts[4] = {1, 1, 1, 1};
    mvm_pstep s = {.layer = 1, .n_tok = 2, .experts = (int32_t *)four, .counts = counts};
    CHECK_ST(mvm_resid_end(r, &s, four, 4, 1), MVM_OK);
    for (uint32_t e = 0; e < 4; e++)
        CHECK(pins_of(sp, 1, e) == 0);
    mvm_resid_stats rs;
    mvm_resid_get_stats(r, &rs);
    CHECK(rs.accesses == 5 && rs.hits == 1 && rs.bypassed == 0 && rs.extra_rounds == 1);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
}

struct late_unpin {
    mvm_space *sp;
    int32_t experts[3];
};

static void *unpin_later(void *arg)
{
    struct late_unpin *u = arg;
    usleep(50000);
    for (int i = 0; i < 3; i++)
        mvm_unpin(u->sp, 0, (uint32_t)u->experts[i]);
    return NULL;
}

/* A second table over a space the first left full (bench's repetitions, a server's
 * requests each make one): it sees those experts as resident, so a round evicts one of them
 * for its own instead of finding no victim on a full device (2026-11-24, the H100:
 * "no room on the device for one expert" at a 10% budget with the homes unmapped). */
static void test_second_table_sees_resident(void)
{
    mvm_space *sp = small_space();
    mvm_resid *r = resid_for(sp, "lru", "");
    for (int32_t e = 0; e < 3; e++)
        CHECK_ST(use1(r, 0, e), MVM_OK);
    mvm_resid_destroy(r);
    for (int32_t e = 0; e < 3; e++)
        CHECK(resident_pages(sp, 0, (uint32_t)e) == 2);
    r = resid_for(sp, "lru", "");
    int32_t todo[] = {3};
    uint32_t k = 0;
    CHECK_ST(whole_round(r, 1, todo, 1, &k), MVM_OK);
    CHECK(k == 1 && resident_pages(sp, 1, 3) == 2 && pins_of(sp, 1, 3) == 1);
    uint32_t left = 0;
    for (uint32_t e = 0; e < 3; e++)
        left += resident_pages(sp, 0, e) == 2;
    CHECK(left == 2);
    mvm_resid_release(r, 1, todo, k);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
}

/* A round finds the whole budget held by another reader: by copies in flight, it waits for
 * one to land and proceeds (how many land before each round is timing: every round takes
 * at least one expert, resident and pinned, until the step has run); by pinned experts, it
 * fails with one line that names them, pinning nothing. */
static void test_round_without_room(void)
{
    mvm_space *sp = small_space();
    mvm_resid *r = resid_for(sp, "lru", "");
    struct late_unpin u = {sp, {0, 1, 2}};
    for (int i = 0; i < 3; i++) { /* loads of pinned experts land after the last unpin */
        CHECK_ST(mvm_pin(sp, 0, (uint32_t)u.experts[i]), MVM_OK);
        CHECK_ST(mvm_resid_prefetch(r, 0, (uint32_t)u.experts[i]), MVM_OK);
    }
    pthread_t t;
    CHECK(pthread_create(&t, NULL, unpin_later, &u) == 0);
    int32_t todo[] = {1, 3};
    uint32_t k = 0, done = 0;
    while (done < 2) {
        CHECK_ST(whole_round(r, 1, todo + done, 2 - done, &k), MVM_OK);
        if (k == 0)
            break;
        for (uint32_t i = done; i < done + k; i++)
            CHECK(resident_pages(sp, 1, (uint32_t)todo[i]) == 2 &&
                  pins_of(sp, 1, (uint32_t)todo[i]) == 1);
        mvm_resid_release(r, 1, todo + done, k);
        done += k;
    }
    pthread_join(t, NULL);
    CHECK(done == 2 && pins_of(sp, 1, 1) == 0 && pins_of(sp, 1, 3) == 0);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);

    sp = small_space();
    r = resid_for(sp, "lru", "");
    for (int32_t e = 0; e < 3; e++) { /* the budget resident and pinned by another reader */
        CHECK_ST(use1(r, 0, e), MVM_OK);
        CHECK_ST(mvm_pin(sp, 0, (uint32_t)e), MVM_OK);
    }
    int32_t one[] = {0};
    CHECK_ST(whole_round(r, 1, one, 1, &k), MVM_ERR_NOSPACE);
    CHECK(k == 0 && strstr(mvm_last_error(), "no room on the device for one expert") != NULL);
    CHECK(strstr(mvm_last_error(), "3 experts pinned (6 pages)") != NULL);
    CHECK(pins_of(sp, 1, 0) == 0 && pins_of(sp, 0, 0) == 1);
    for (uint32_t e = 0; e < 3; e++)
        CHECK_ST(mvm_unpin(sp, 0, e), MVM_OK);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
}

/* The evict module of test_round_after_landing: offers the expert in flight, (0, 0), first
 * (the eviction passes it by, loading), and lets its copy land before it offers the next. */
static mvm_space *landing_space;
static uint32_t landing_calls;

static uint32_t victim_then_land(void *self, const mvm_pview *v, uint32_t for_layer,
                                 const uint32_t *cand, uint32_t n)
{
    (void)self, (void)v, (void)for_layer;
    if (landing_calls++ == 1) {
        CHECK_ST(mvm_unpin(landing_space, 0, 0), MVM_OK); /* the copy lands as the pin goes */
        CHECK_ST(mvm_make_resident(landing_space, 0, 0, MVM_ALL_PAGES), MVM_OK);
    }
    for (uint32_t i = 0; i < n; i++)
        if (cand[i] == 0)
            return i;
    return 0;
}

/* A round's first expert finds the budget held by a copy in flight (0, 0) and an expert
 * another reader pins (0, 1). The eviction passes the copy by as loading; it lands before
 * the round looks for a copy to wait for, so there is none; the round must then ask once
 * more, and evict what has landed, rather than say that nothing can go (a rare failure of
 * test_cli's rounds in the ASan build, where the worker is slow). */
static void test_round_after_landing(void)
{
    mvm_space *sp = space_of(2);
    mvm_resid *r = resid_for(sp, "lru", "");
    CHECK_ST(use1(r, 0, 1), MVM_OK);
    CHECK_ST(mvm_pin(sp, 0, 1), MVM_OK);
    CHECK_ST(mvm_pin(sp, 0, 0), MVM_OK); /* its copy lands once this pin goes */
    CHECK_ST(mvm_resid_prefetch(r, 0, 0), MVM_OK);
    mvm_evict_ops ops = *r->victims.ops;
    ops.victim = victim_then_land;
    r->victims.ops = &ops;
    landing_space = sp, landing_calls = 0;
    int32_t one[] = {2};
    uint32_t k = 0;
    CHECK_ST(whole_round(r, 1, one, 1, &k), MVM_OK);
    CHECK(k == 1 && landing_calls >= 3 && resident_pages(sp, 1, 2) == 2);
    CHECK(resident_pages(sp, 0, 0) == 0 && resident_pages(sp, 0, 1) == 2);
    mvm_resid_release(r, 1, one, k);
    CHECK_ST(mvm_unpin(sp, 0, 1), MVM_OK);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
}

/* DALI's workload module asks for the busiest experts at the end of each window. Window of
 * two steps, one swap: layer 0 runs {0,1,2}, filling the budget of three, then {0,1,2,3},
 * where 3 finds no room and runs from its home. The window closes with 3 the busiest
 * expert not resident and 0 the idlest resident one (a tie, to the lower id): 3 is
 * prefetched in place of 0. */
static void test_wanted_prefetched(void)
{
    mvm_space *sp = small_space();
    mvm_resid *r = resid_for(sp, "workload", "w_size=2,u_size=1");
    static const int32_t four[] = {0, 1, 2, 3};
    CHECK_ST(step(r, 0, four, 3, 1), MVM_OK);
    CHECK_ST(step(r, 0, four, 4, 0), MVM_OK);
    mvm_resid_stats rs;
    mvm_resid_get_stats(r, &rs);
    CHECK(rs.bypassed == 1 && rs.prefetches == 1 && rs.evictions == 1 && rs.hits == 3);
    mvm_residency res = {0};
    mvm_expert_residency(sp, 0, 3, &res);
    CHECK(res.resident + res.loading == 2);
    CHECK(resident_pages(sp, 0, 0) == 0);
    CHECK(resident_pages(sp, 0, 1) == 2 && resident_pages(sp, 0, 2) == 2);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
}

/* MoEpic's window copies (mvm_resid_prefetch_window) take free pages only, and the ones
 * their layer's step does not use leave when it ends: layer 0's expert 0 holds 2 of the 6
 * pages; layer 1's experts 1 and 2 fill the other 4; expert 3 finds none, and evicts
 * nothing for it; the step of layer 1 uses expert 1, so expert 2 goes. */
static void test_window_copies(void)
{
    mvm_space *sp = small_space();
    mvm_resid *r = resid_for(sp, "lru", NULL);
    CHECK_ST(use1(r, 0, 0), MVM_OK);
    CHECK_ST(mvm_resid_prefetch_window(r, 1, 1), MVM_OK);
    CHECK_ST(mvm_resid_prefetch_window(r, 1, 2), MVM_OK);
    CHECK_ST(mvm_resid_prefetch_window(r, 1, 3), MVM_ERR_NOSPACE);
    CHECK(resident_pages(sp, 0, 0) == 2);
    CHECK(mvm_resid_missing(r, 1, 3) == 2 && mvm_resid_missing(r, 1, 1) == 0);
    CHECK_ST(use1(r, 1, 1), MVM_OK);
    mvm_residency res = {0};
    mvm_expert_residency(sp, 1, 2, &res);
    CHECK(res.resident == 0 && res.loading == 0);
    CHECK(resident_pages(sp, 1, 1) == 2 && resident_pages(sp, 0, 0) == 2);
    mvm_resid_stats rs;
    mvm_resid_get_stats(r, &rs);
    CHECK(rs.prefetches == 2 && rs.prefetch_used == 1 && rs.evictions == 0);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
}

/* A step that runs expert e of layer l from its home (on the CPU), as the assign role
 * places a miss there. */
static mvm_status home_step(mvm_resid *r, uint32_t l, int32_t e)
{
    mvm_status st = mvm_resid_begin_home(r, l, &e, 1, 0, 0);
    if (st != MVM_OK)
        return st;
    uint32_t counts[4] = {0};
    counts[e] = 1;
    mvm_pstep s = {.layer = l, .n_tok = 1, .experts = &e, .counts = counts};
    return mvm_resid_end(r, &s, &e, 1, l == 1);
}

/* Admission (policy/admit.h): a miss run from its home is loaded afterwards in the
 * background when the evict module would keep it over its victim: lru admits it (its use
 * is the newest) and evicts the least recent; lfu does not while every resident expert was
 * used more often; MOEVM_ADMIT=off never; with room, always. */
static void test_admission(void)
{
    static const int32_t three[] = {0, 1, 2};
    const char *modules[] = {"lru", "lfu", "lru"};
    for (int k = 0; k < 3; k++) {
        if (k == 2)
            setenv("MOEVM_ADMIT", "off", 1);
        mvm_space *sp = small_space();
        mvm_resid *r = resid_for(sp, modules[k], NULL);
        for (int rep = 0; rep < 2; rep++)
            CHECK_ST(step(r, 0, three, 3, 1), MVM_OK); /* the budget is full */
        CHECK_ST(home_step(r, 0, 3), MVM_OK);
        mvm_resid_stats rs;
        mvm_resid_get_stats(r, &rs);
        mvm_residency res = {0};
        mvm_expert_residency(sp, 0, 3, &res);
        if (k == 0) {
            CHECK(rs.admitted == 1 && rs.cpu_runs == 1 && rs.evictions == 1);
            CHECK(res.resident + res.loading == 2 && resident_pages(sp, 0, 0) == 0);
        } else {
            CHECK(rs.admitted == 0 && rs.evictions == 0 && res.resident + res.loading == 0);
        }
        /* With room, any module admits: layer 1's expert after evicting one of layer 0,
         * once the space is idle (an admission waits for no copy in flight). */
        for (int spin = 0; spin < 2000; spin++) {
            mvm_stats ss;
            mvm_space_get_stats(sp, &ss);
            if (!ss.moves_queued && !ss.moves_in_flight)
                break;
            usleep(1000);
        }
        CHECK_ST(mvm_evict(sp, 0, 1, 0), MVM_OK);
        mvm_resid_destroy(r);
        r = resid_for(sp, modules[k], NULL);
        CHECK_ST(home_step(r, 1, 2), MVM_OK);
        mvm_resid_get_stats(r, &rs);
        CHECK(rs.admitted == (k == 2 ? 0u : 1u));
        mvm_resid_destroy(r);
        mvm_space_destroy(sp);
    }
    unsetenv("MOEVM_ADMIT");
}

/* Waits (up to 2 s) until no copy is queued or in flight. */
static void wait_idle(mvm_space *sp)
{
    for (int spin = 0; spin < 2000; spin++) {
        mvm_stats ss;
        mvm_space_get_stats(sp, &ss);
        if (!ss.moves_queued && !ss.moves_in_flight)
            return;
        usleep(1000);
    }
}

/* The loads of a token's replayed steps held back (mvm_resid_defer_loads): a prefetch and
 * a home run's admission are noted, not asked, so nothing moves; undeferred, the prefetch
 * is asked first (the planned one counted as such) and then the admission, one a layer;
 * a prefetch asked twice is asked once. */
static void test_defer_loads(void)
{
    setenv("MOEVM_ADMIT", "steps", 1);
    mvm_space *sp = small_space();
    mvm_resid *r = resid_for(sp, "lru", NULL);
    CHECK_ST(mvm_resid_defer_loads(r, 1), MVM_OK);
    CHECK_ST(mvm_resid_prefetch(r, 1, 2), MVM_OK);
    CHECK_ST(mvm_resid_prefetch_planned(r, 1, 2), MVM_OK);
    CHECK_ST(home_step(r, 0, 3), MVM_OK);
    mvm_stats ss;
    mvm_resid_stats rs;
    mvm_space_get_stats(sp, &ss);
    mvm_resid_get_stats(r, &rs);
    CHECK(ss.moves_queued + ss.moves_in_flight == 0 && ss.pages_loaded == 0);
    CHECK(rs.prefetches == 0 && rs.admitted == 0 && rs.cpu_runs == 1);
    CHECK_ST(mvm_resid_defer_loads(r, 0), MVM_OK);
    wait_idle(sp);
    mvm_resid_get_stats(r, &rs);
    CHECK(rs.prefetches == 2 && rs.planned == 1 && rs.admitted == 1);
    CHECK(resident_pages(sp, 1, 2) == 2 && resident_pages(sp, 0, 3) == 2);
    CHECK_ST(mvm_resid_defer_loads(r, 0), MVM_OK); /* nothing noted: nothing asked */
    mvm_resid_get_stats(r, &rs);
    CHECK(rs.prefetches == 2);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
    unsetenv("MOEVM_ADMIT");
}

/* PreScope's table from an offline profile (config hot): with a buffer of one expert, the
 * budget of three holds the profile's top two, (0,0) and (1,3), loaded at create. A stream
 * over every other expert of both layers then evicts only in the buffer: the two stay, and
 * hit when used. A profile for a module that does not read one is an error. */
static void test_hot_table(void)
{
    const uint64_t counts[8] = {10, 1, 0, 0, 0, 2, 0, 9};
    const mvm_pprofile prof = {.n_layers = 2, .n_experts = 4, .n_tokens = 10, .counts = counts};
    mvm_space *sp = small_space();
    mvm_resid_params p = {.evict = "lru", .config = "hot", .config_args = "buffer=1",
                          .top_k = 2, .profile = &prof};
    mvm_resid *r = NULL;
    CHECK_ST(mvm_resid_create(sp, &p, &r), MVM_OK);
    wait_idle(sp);
    CHECK(resident_pages(sp, 0, 0) == 2 && resident_pages(sp, 1, 3) == 2);
    for (int rep = 0; rep < 3; rep++)
        for (int32_t e = 0; e < 3; e++) {
            CHECK_ST(use1(r, 0, e + 1), MVM_OK);
            CHECK_ST(use1(r, 1, e), MVM_OK);
            CHECK(resident_pages(sp, 0, 0) == 2 && resident_pages(sp, 1, 3) == 2);
        }
    CHECK_ST(use1(r, 0, 0), MVM_OK);
    CHECK_ST(use1(r, 1, 3), MVM_OK);
    mvm_resid_stats rs;
    mvm_resid_get_stats(r, &rs);
    CHECK(rs.held == 2 && rs.evictions >= 17 && rs.accesses == 20 && rs.hits == 2);
    mvm_resid_destroy(r);
    p.config = "uniform";
    CHECK_ST(mvm_resid_create(sp, &p, &r), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "config uniform does not read one") != NULL);
    mvm_space_destroy(sp);
}

/* At home the same steps move nothing: every access runs from the home (cpu_runs), and
 * neither the evict module's wishes nor a prefetch load; the module still observes. */
static void test_at_home_moves_nothing(void)
{
    mvm_space *sp = small_space();
    mvm_resid_params p = {.evict = "workload", .evict_args = "w_size=2,u_size=1", .top_k = 2,
                          .at_home = 1};
    mvm_resid *r = NULL;
    CHECK_ST(mvm_resid_create(sp, &p, &r), MVM_OK);
    if (!r)
        return;
    static const int32_t four[] = {0, 1, 2, 3};
    CHECK_ST(step(r, 0, four, 3, 1), MVM_OK);
    CHECK_ST(step(r, 0, four, 4, 0), MVM_OK);
    CHECK_ST(mvm_resid_prefetch(r, 1, 2), MVM_OK);
    mvm_resid_stats rs;
    mvm_resid_get_stats(r, &rs);
    CHECK(rs.accesses == 7 && rs.cpu_runs == 7 && rs.hits == 0 && rs.bypassed == 0);
    CHECK(rs.prefetches == 0 && rs.evictions == 0);
    mvm_stats vs;
    mvm_space_get_stats(sp, &vs);
    CHECK(vs.pages_loaded == 0 && vs.bytes_moved == 0);
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t e = 0; e < 4; e++)
            CHECK(resident_pages(sp, l, e) == 0);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
}

/* The module comes from MOEVM_EVICT[_ARGS] unless given; mistakes are one-line errors. */
static void test_choice_and_errors(void)
{
    mvm_space *sp = small_space();
    mvm_resid_params p = {.top_k = 2};
    mvm_resid *r = NULL;
    setenv("MOEVM_EVICT", "lfu", 1);
    CHECK_ST(mvm_resid_create(sp, &p, &r), MVM_OK);
    CHECK(r && strcmp(mvm_resid_evict_name(r), "lfu") == 0);
    mvm_resid_destroy(r);
    setenv("MOEVM_EVICT", "clairvoyant", 1);
    CHECK_ST(mvm_resid_create(sp, &p, &r), MVM_ERR_INVALID);
    CHECK(r == NULL && strstr(mvm_last_error(), "MOEVM_EVICT=clairvoyant") &&
          strstr(mvm_last_error(), "lru"));
    setenv("MOEVM_EVICT", "belady", 1); /* the offline bound: no future here */
    CHECK_ST(mvm_resid_create(sp, &p, &r), MVM_ERR_INVALID);
    CHECK(r == NULL && strstr(mvm_last_error(), "evict belady: an offline bound"));
    setenv("MOEVM_EVICT", "clairvoyant", 1);
    const void *ops;
    const char *args;
    CHECK_ST(mvm_engine_choose(MVM_ROLE_EVICT, NULL, NULL, &ops, &args), MVM_ERR_INVALID);
    /* "none" is no module for the roles that may run none, a module for route; the engine
     * runs no place module, and an assign module only on a device */
    CHECK_ST(mvm_engine_choose(MVM_ROLE_CONFIG, "none", NULL, &ops, &args), MVM_OK);
    CHECK(ops == NULL);
    CHECK_ST(mvm_engine_choose(MVM_ROLE_ROUTE, "none", NULL, &ops, &args), MVM_OK);
    CHECK(ops == mvm_policy_find(MVM_ROLE_ROUTE, "none"));
    CHECK_ST(mvm_engine_choose(MVM_ROLE_EVICT, "none", NULL, &ops, &args), MVM_ERR_INVALID);
    CHECK_ST(mvm_engine_choose(MVM_ROLE_PLACE, "uniform", NULL, &ops, &args), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "runs no place") != NULL);
    CHECK_ST(mvm_engine_choose(MVM_ROLE_ASSIGN, "gpu", NULL, &ops, &args), MVM_OK);
    CHECK(ops == mvm_policy_find(MVM_ROLE_ASSIGN, "gpu"));
    p.evict = "lru";
    p.assign = "greedy"; /* on the CPU backend: an error, not a choice ignored */
    CHECK_ST(mvm_resid_create(sp, &p, &r), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "assign greedy: the assign role") != NULL);
    p.on_device = 1;
    CHECK_ST(mvm_resid_create(sp, &p, &r), MVM_OK);
    CHECK(r && strcmp(mvm_resid_assign_name(r), "greedy") == 0);
    mvm_resid_destroy(r);
    p.assign_args = "depth=2";
    CHECK_ST(mvm_resid_create(sp, &p, &r), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "depth") != NULL);
    p = (mvm_resid_params){.top_k = 2};
    setenv("MOEVM_EVICT", "lcp", 1);
    setenv("MOEVM_EVICT_ARGS", "rho=2", 1);
    CHECK_ST(mvm_resid_create(sp, &p, &r), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "rho") != NULL);
    p.evict = "lru"; /* given: the options' parameters belong to another module */
    p.evict_args = "";
    CHECK_ST(mvm_resid_create(sp, &p, &r), MVM_OK);
    mvm_resid_destroy(r);
    p.evict_args = "window=3";
    CHECK_ST(mvm_resid_create(sp, &p, &r), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "window") != NULL);
    unsetenv("MOEVM_EVICT");
    unsetenv("MOEVM_EVICT_ARGS");
    mvm_space_destroy(sp);
}

/* ---- the engine against the simulator ---------------------------------------------------- */

static char dir[64];

/* A qwen3moe model of 4 layers x 16 experts, top-4, experts of 12 pages. */
static const char *make_model(mvm_pool *pool)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    mvm_model_spec s = mvm_preset_find("tiny", "qwen3moe")->spec;
    s.n_layer = 4;
    s.n_expert = 16;
    s.n_expert_used = 4;
    s.type = MVM_W_F32;
    s.seed = 11;
    CHECK_ST(mvm_mkmodel_write(&s, path, pool, NULL, NULL), MVM_OK);
    return path;
}

/* The routers `moevm sim` reads (sim_inputs.c) are the engine's (moe_step.c gives its
 * predictors the same mvm_model_router): gpt-oss's with their logit biases; DeepSeek-V3's
 * (tiny-v3: a dense block first, so MoE layer l is blk.{l+1}) with their choose biases,
 * sigmoid and groups; a plain model's with neither. A trace of another shape is refused. */
static void test_sim_routers(void)
{
    mvm_pool *pool = NULL;
    CHECK_ST(mvm_pool_create(1, NULL, &pool), MVM_OK);
    char oss[128], v3[128];
    snprintf(oss, sizeof oss, "%s/oss.gguf", dir);
    snprintf(v3, sizeof v3, "%s/v3.gguf", dir);
    mvm_model_spec s = mvm_preset_find("tiny", "gpt-oss")->spec;
    s.type = MVM_W_F32;
    s.seed = 5;
    CHECK_ST(mvm_mkmodel_write(&s, oss, pool, NULL, NULL), MVM_OK);
    s = mvm_preset_find("tiny-v3", "deepseek2")->spec;
    s.type = MVM_W_F32;
    CHECK_ST(mvm_mkmodel_write(&s, v3, pool, NULL, NULL), MVM_OK);
    const char *paths[] = {oss, v3, make_model(pool)};
    for (int i = 0; i < 3; i++) {
        mvm_model *m = NULL;
        CHECK_ST(mvm_model_probe(paths[i], &m), MVM_OK);
        if (!m)
            continue;
        const mvm_hparams *hp = &m->hp;
        const size_t row = hp->n_expert * sizeof(float);
        mvm_trace t = {.hdr = {.n_layers = hp->n_layer, .n_experts = hp->n_expert,
                               .top_k = hp->n_expert_used, .n_embd = hp->n_embd}};
        mvm_sim_inputs in = {0};
        CHECK_ST(mvm_sim_load_routers(paths[i], &t, &in), MVM_OK);
        const mvm_router *r = &in.router.r;
        CHECK(r->weights && (r->logit_bias != NULL) == (i == 0) &&
              (r->choose_bias != NULL) == (i == 1));
        CHECK(r->sigmoid == (i == 1) && r->n_group == (i == 1 ? 4u : 0u) &&
              r->n_group_used == (i == 1 ? 2u : 0u));
        for (uint32_t l = 0; r->weights && l < hp->n_layer; l++) {
            CHECK(m->layers[l].router.type == MVM_W_F32 &&
                  memcmp(r->weights[l], m->layers[l].router.data, row * hp->n_embd) == 0);
            if (r->logit_bias)
                CHECK(memcmp(r->logit_bias[l], m->layers[l].router_bias, row) == 0);
            if (r->choose_bias)
                CHECK(memcmp(r->choose_bias[l], m->layers[l].expert_bias, row) == 0);
        }
        mvm_sim_inputs_free(&in);
        t.hdr.n_layers++;
        CHECK_ST(mvm_sim_load_routers(paths[i], &t, &in), MVM_ERR_INVALID);
        CHECK(strstr(mvm_last_error(), "is this the model that recorded it?") != NULL);
        mvm_sim_inputs_free(&in);
        mvm_model_free(m);
    }
    mvm_pool_destroy(pool);
}

/* The model on the host backend with `frac` of its expert bytes as budget, and a context
 * of 64 positions evaluating `batch` tokens per step. */
static void open_ctx_batch(const char *model, mvm_pool *pool, double frac, uint32_t batch,
                           const mvm_ctx_policies *p, mvm_model **m, mvm_ctx **c)
{
    mvm_space_desc d = host_desc(frac);
    *m = NULL;
    *c = NULL;
    CHECK_ST(mvm_model_load(model, &(mvm_load_args){.desc = &d, .pool = pool}, m), MVM_OK);
    if (*m)
        CHECK_ST(mvm_ctx_create(*m, pool, 64, batch, p, c), MVM_OK);
}

/* The same, a token per step. */
static void open_ctx(const char *model, mvm_pool *pool, double frac, const mvm_ctx_policies *p,
                     mvm_model **m, mvm_ctx **c)
{
    open_ctx_batch(model, pool, frac, 1, p, m, c);
}

/* Runs 40 positions one at a time under policies p at `frac` of the experts' pages,
 * recording the routing; every step waits for its copies, so the next step routes on the
 * residency the simulator models (a GPU waits for its loads). Returns the residency's
 * statistics, the substitutions and the device pages. */
static void run_engine(const char *model, mvm_pool *pool, mvm_ctx_policies *p, double frac,
                       const char *trace, mvm_resid_stats *rs, uint64_t *subs,
                       uint64_t *device_pages)
{
    *rs = (mvm_resid_stats){0};
    *subs = *device_pages = 0;
    mvm_model *m;
    mvm_ctx *c;
    mvm_trace_out *t = NULL;
    p->wait_loads = 1;
    /* and the config module's prefetches of its held experts too, as the simulator has them */
    setenv("MOEVM_DETERMINISTIC", "on", 1);
    open_ctx(model, pool, frac, p, &m, &c);
    unsetenv("MOEVM_DETERMINISTIC");
    if (!c) {
        mvm_model_free(m);
        return;
    }
    CHECK_ST(mvm_trace_open(trace, m, 1, &t), MVM_OK); /* hidden: fixedpoint predicts */
    mvm_ctx_set_route_observer(c, mvm_trace_route, t);
    int32_t tok[40];
    uint64_t rng = 99;
    for (int i = 0; i < 40; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((rng >> 33) % m->hp.n_vocab);
    }
    CHECK_ST(mvm_ctx_eval(c, tok, 40, NULL, 0), MVM_OK);
    CHECK_ST(mvm_trace_close(t), MVM_OK);
    mvm_resid_get_stats(mvm_ctx_residency(c), rs);
    *subs = mvm_substitutor_count(mvm_ctx_substitutor(c));
    mvm_space_info info;
    mvm_space_get_info(m->space, &info);
    *device_pages = info.device_pages;
    mvm_ctx_free(c);
    mvm_model_free(m);
}

/* The engine's hits (and substitutions) on its own trace equal the simulator's replaying
 * it with the same modules and budget: every evict module alone, and lru under SMoE's
 * substitution (which must rewrite some rows, or the comparison proves nothing). */
static void test_engine_matches_sim(void)
{
    mvm_pool *pool = NULL;
    CHECK_ST(mvm_pool_create(2, NULL, &pool), MVM_OK);
    const char *model = make_model(pool);
    char trace[128];
    snprintf(trace, sizeof trace, "%s/t.jsonl", dir);
    static const struct { const char *evict, *route, *route_args, *config, *config_args; }
    runs[] = {{"lru", "none", NULL, "none", NULL}, {"lfu", "none", NULL, "none", NULL},
              {"reuse", "none", NULL, "none", NULL}, {"score", "none", NULL, "none", NULL},
              {"lcp", "none", NULL, "none", NULL},
              {"lru", "importance", "alpha=0.5", "none", NULL},
              {"lfu", "importance", "alpha=1", "none", NULL},
              {"lru", "none", NULL, "uniform", NULL},
              {"lfu", "none", NULL, "hot", "profile=8,buffer=4"},
              {"lcp", "none", NULL, "fixedpoint", "tau=8"},
              {"lcp", "importance", "alpha=0.5", "fixedpoint", "tau=4"}};
    static const double fracs[] = {0.3, 0.6};
    for (size_t m = 0; m < sizeof runs / sizeof *runs; m++)
        for (int f = 0; f < 2; f++) {
            mvm_resid_stats rs;
            uint64_t pages = 0, subs = 0;
            mvm_ctx_policies p = {.residency = {.evict = runs[m].evict,
                                                .config = runs[m].config,
                                                .config_args = runs[m].config_args},
                                  .prefetch = {.predict = "none"},
                                  .routing = {runs[m].route, runs[m].route_args}};
            run_engine(model, pool, &p, fracs[f], trace, &rs, &subs, &pages);
            mvm_trace *t = NULL;
            CHECK_ST(mvm_trace_load(trace, &t), MVM_OK);
            mvm_sim_inputs in = {0}; /* the routers, which the engine gives fixedpoint */
            if (t)
                CHECK_ST(mvm_sim_load_routers(model, t, &in), MVM_OK);
            if (!t || !in.model) {
                mvm_trace_free(t);
                mvm_sim_inputs_free(&in);
                continue;
            }
            mvm_sim_config cfg;
            mvm_sim_config_init(&cfg);
            cfg.policy[MVM_ROLE_EVICT] = runs[m].evict;
            cfg.policy[MVM_ROLE_ROUTE] = runs[m].route;
            cfg.params[MVM_ROLE_ROUTE] = runs[m].route_args;
            cfg.policy[MVM_ROLE_CONFIG] = strcmp(runs[m].config, "none") ? runs[m].config : NULL;
            cfg.params[MVM_ROLE_CONFIG] = runs[m].config_args;
            cfg.router = &in.router.r;
            cfg.budget_pages = pages;
            cfg.page_bytes = PAGE;
            mvm_cost cost;
            mvm_cost_init(&cost, mvm_machine_preset("h100"), t->hdr.expert_bytes, t->hdr.n_embd,
                          t->hdr.n_ff_exp);
            mvm_sim_result r;
            CHECK_ST(mvm_sim_run(t, &cost, &cfg, &r), MVM_OK);
            CHECK(r.accesses == rs.accesses && rs.accesses == 40 * 4 * 4);
            CHECK(r.hits == rs.hits && r.substitutions == subs);
            CHECK(r.partial_hits == rs.partial_hits);
            CHECK(rs.hits > 0 && rs.hits < rs.accesses && rs.evictions > 0);
            CHECK((subs > 0) == (strcmp(runs[m].route, "none") != 0));
            /* MoEpic's configurator splits experts: partly resident ones are met again */
            if (!strcmp(runs[m].config, "fixedpoint"))
                CHECK(rs.splits > 0 && rs.partial_hits > 0 && rs.reconfigs > 0);
            if (r.hits != rs.hits || r.substitutions != subs || r.partial_hits != rs.partial_hits)
                fprintf(stderr, "  evict %s, route %s, config %s at %.0f%%: engine %llu hits, "
                        "%llu partial, %llu substitutions; sim %llu, %llu, %llu\n",
                        runs[m].evict, runs[m].route, runs[m].config, fracs[f] * 100,
                        (unsigned long long)rs.hits, (unsigned long long)rs.partial_hits,
                        (unsigned long long)subs, (unsigned long long)r.hits,
                        (unsigned long long)r.partial_hits, (unsigned long long)r.substitutions);
            mvm_trace_free(t);
            mvm_sim_inputs_free(&in);
        }
    mvm_pool_destroy(pool);
}

/* ---- predictions prefetched --------------------------------------------------------------- */

struct foresee {
    const mvm_model *m;
    float hidden[256];   /* the last layer's MoE input */
    uint32_t missed;     /* predicted experts neither resident nor loading when their layer routes */
    uint32_t predicted;
};

/* At each layer after the first: the experts layer l+1's router picks from layer l's MoE
 * input (computed here, not by policy/) must already be resident or on their way. */
static void check_foreseen(void *ctx, const mvm_route_record *r)
{
    struct foresee *f = ctx;
    uint32_t layer = r->layer, n_expert = r->n_expert, k = r->k, n_embd = r->n_embd;
    const float *hidden = r->hidden;
    if (layer > 0) {
        const mvm_weight *w = &f->m->layers[layer].router;
        float logit[64];
        for (uint32_t e = 0; e < n_expert; e++) {
            const float *row = (const float *)((const uint8_t *)w->data + e * w->row_bytes);
            logit[e] = 0;
            for (uint32_t d = 0; d < n_embd; d++)
                logit[e] += row[d] * f->hidden[d];
        }
        for (uint32_t j = 0; j < k; j++) {
            uint32_t best = 0;
            for (uint32_t e = 1; e < n_expert; e++)
                if (logit[e] > logit[best])
                    best = e;
            logit[best] = -1e30f;
            mvm_residency res = {0};
            mvm_expert_residency(f->m->space, layer, best, &res);
            f->missed += res.resident + res.loading < res.n_pages;
            f->predicted++;
        }
    }
    memcpy(f->hidden, hidden, n_embd * sizeof *hidden);
}

/* With every expert fitting, `gate` leaves no expert it predicts unrequested; without a
 * predictor the same run misses some (the check can fail). */
static void test_gate_prefetches(void)
{
    mvm_pool *pool = NULL;
    CHECK_ST(mvm_pool_create(2, NULL, &pool), MVM_OK);
    const char *model = make_model(pool);
    static const char *const preds[] = {"gate", "none"};
    for (int i = 0; i < 2; i++) {
        mvm_model *m;
        mvm_ctx *c;
        mvm_ctx_policies p = {.residency = {.evict = "lru"}, .prefetch = {.predict = preds[i]}};
        open_ctx(model, pool, 1.0, &p, &m, &c);
        if (!c) {
            mvm_model_free(m);
            continue;
        }
        CHECK(m->hp.n_embd <= 256 && m->hp.n_expert <= 64);
        struct foresee f = {.m = m};
        mvm_ctx_set_route_observer(c, check_foreseen, &f);
        int32_t tok[24];
        for (int t = 0; t < 24; t++)
            tok[t] = (int32_t)((t * 37 + 5) % m->hp.n_vocab);
        CHECK_ST(mvm_ctx_eval(c, tok, 24, NULL, 0), MVM_OK);
        mvm_resid_stats rs;
        mvm_resid_get_stats(mvm_ctx_residency(c), &rs);
        CHECK(f.predicted == 24 * 3 * 4);
        if (i == 0) {
            CHECK(f.missed == 0);
            CHECK(rs.prefetches > 0 && rs.prefetch_used > 0 && rs.prefetch_used <= rs.prefetches);
            CHECK(strcmp(mvm_prefetcher_name(mvm_ctx_prefetcher(c)), "gate") == 0);
        } else {
            CHECK(f.missed > 0 && rs.prefetches == 0);
            CHECK(mvm_ctx_prefetcher(c) == NULL);
        }
        mvm_ctx_free(c);
        mvm_model_free(m);
    }
    mvm_pool_destroy(pool);
}

/* With `var`=`value` in the environment, the context (policies p) is refused with an
 * MVM_ERR_OPTION that names the variable. */
static void check_refused(const char *model, mvm_pool *pool, const char *var, const char *value,
                          const mvm_ctx_policies *p)
{
    setenv(var, value, 1);
    mvm_model *m;
    mvm_space_desc d = host_desc(0.3);
    CHECK_ST(mvm_model_load(model, &(mvm_load_args){.desc = &d, .pool = pool}, &m), MVM_OK);
    mvm_ctx *c = NULL;
    if (m)
        CHECK_ST(mvm_ctx_create(m, pool, 64, 1, p, &c), MVM_ERR_OPTION);
    CHECK(strstr(mvm_last_error(), var));
    mvm_ctx_free(c);
    mvm_model_free(m);
    unsetenv(var);
}

/* ---- repeatable runs (MOEVM_DETERMINISTIC) ------------------------------------------------ */

/* The statistics of 32 positions evaluated at 30% of the experts' pages, steps not waiting
 * for their copies (the CPU's default), copies in order when MOEVM_DETERMINISTIC is on; the
 * forecasts' too (ps, may be NULL). Returns whether the space's pages add up (resident,
 * loading and free: the budget). */
static int run_unwaited(const char *model, mvm_pool *pool, const mvm_ctx_policies *p,
                        mvm_resid_stats *rs, mvm_stats *vs, mvm_prefetch_stats *ps)
{
    *rs = (mvm_resid_stats){0};
    *vs = (mvm_stats){0};
    mvm_model *m;
    mvm_ctx *c;
    open_ctx(model, pool, 0.3, p, &m, &c);
    int adds_up = 0;
    if (c) {
        int32_t tok[32];
        for (int t = 0; t < 32; t++)
            tok[t] = (int32_t)((t * 53 + 11) % m->hp.n_vocab);
        CHECK_ST(mvm_ctx_eval(c, tok, 32, NULL, 0), MVM_OK);
        mvm_resid_get_stats(mvm_ctx_residency(c), rs);
        if (ps)
            mvm_prefetcher_get_stats(mvm_ctx_prefetcher(c), ps);
        /* A copy taken back while running holds its chunks until it lands: the pages add
         * up once the worker is idle (at most 10 s). */
        for (int i = 0; i < 10000; i++) {
            mvm_space_get_stats(m->space, vs);
            if (!vs->moves_queued && !vs->moves_in_flight)
                break;
            usleep(1000);
        }
        mvm_space_info info;
        mvm_space_get_info(m->space, &info);
        adds_up = vs->resident_pages + vs->loading_pages + vs->free_pages == info.device_pages;
    }
    mvm_ctx_free(c);
    mvm_model_free(m);
    return adds_up;
}

/* With MOEVM_DETERMINISTIC=on the same run repeats exactly (hits, evictions, prefetches,
 * admissions, bytes moved), whatever the migration worker's speed, and every prediction
 * that came true had landed in time; for modules that prefetch by prediction (gate), by
 * their own wishes (DALI's workload) and with admission. The timing-driven default is not
 * checked for variation: on an idle machine it may repeat too. */
static void test_deterministic(void)
{
    mvm_pool *pool = NULL;
    CHECK_ST(mvm_pool_create(2, NULL, &pool), MVM_OK);
    const char *model = make_model(pool);
    static const mvm_ctx_policies runs[] = {
        {.residency = {.evict = "lru"}, .prefetch = {.predict = "gate"}},
        {.residency = {.evict = "reuse"}, .prefetch = {.predict = "gate"}},
        {.residency = {.evict = "workload", .evict_args = "w_size=4"},
         .prefetch = {.predict = "none"}}};
    setenv("MOEVM_DETERMINISTIC", "on", 1);
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        mvm_resid_stats first, again;
        mvm_stats vs_first, vs_again;
        run_unwaited(model, pool, &runs[i], &first, &vs_first, NULL);
        CHECK(first.accesses == 32 * 4 * 4 && first.hits > 0 && first.evictions > 0 &&
              first.prefetches > 0);
        CHECK(first.prefetch_hits == first.prefetch_used);
        for (int r = 0; r < 3; r++) {
            run_unwaited(model, pool, &runs[i], &again, &vs_again, NULL);
            again.wait_s = first.wait_s; /* a time: the counts are what repeats */
            CHECK(memcmp(&first, &again, sizeof first) == 0);
            CHECK(vs_first.bytes_moved == vs_again.bytes_moved &&
                  vs_first.pages_loaded == vs_again.pages_loaded &&
                  vs_first.pages_evicted == vs_again.pages_evicted);
        }
    }
    check_refused(model, pool, "MOEVM_DETERMINISTIC", "maybe", NULL);
    mvm_pool_destroy(pool);
}

/* ---- MoEpic's prefetch window (MOEVM_PREFETCH=window, engine/forward/prefetch.h) ------- */

/* run_unwaited with predict gate and config fixedpoint under MOEVM_PREFETCH=mode. */
static int run_window(const char *model, mvm_pool *pool, const char *mode, mvm_resid_stats *rs,
                      mvm_prefetch_stats *ps)
{
    setenv("MOEVM_PREFETCH", mode, 1);
    /* MoEpic's configurator leaves the window its buffer */
    mvm_ctx_policies p = {.residency = {.evict = "lcp", .config = "fixedpoint",
                                        .config_args = "tau=8"},
                          .prefetch = {.predict = "gate"}};
    mvm_stats vs;
    int adds_up = run_unwaited(model, pool, &p, rs, &vs, ps);
    unsetenv("MOEVM_PREFETCH");
    return adds_up;
}

/* In order (MOEVM_DETERMINISTIC) every copy lands before the next layer routes: nothing is
 * cut, the window copies into its buffer, and the forecasts are top-k's (the same experts
 * named, the same used: they do not depend on what is resident). Timing-driven, whatever the
 * router cuts, the space's pages add up. A value not in the list is an error naming the
 * variable. (tests/test_residency.c test_window_copies has the buffer's rules.) */
static void test_prefetch_window(void)
{
    mvm_pool *pool = NULL;
    CHECK_ST(mvm_pool_create(2, NULL, &pool), MVM_OK);
    const char *model = make_model(pool);
    mvm_resid_stats top, win;
    mvm_prefetch_stats ptop, pwin;
    setenv("MOEVM_DETERMINISTIC", "on", 1);
    CHECK(run_window(model, pool, "top-k", &top, &ptop));
    CHECK(run_window(model, pool, "window", &win, &pwin));
    CHECK(win.accesses == top.accesses && win.prefetches > 0 && top.prefetches > 0);
    CHECK(win.prefetches_cut == 0 && top.prefetches_cut == 0);
    CHECK(pwin.forecasts == ptop.forecasts && pwin.named == ptop.named &&
          pwin.named_used == ptop.named_used && ptop.named > 0);
    unsetenv("MOEVM_DETERMINISTIC");
    for (int i = 0; i < 3; i++) {
        CHECK(run_window(model, pool, "window", &win, &pwin));
        CHECK(win.prefetches_cut <= win.prefetches && win.prefetch_used <= win.prefetches);
    }
    mvm_ctx_policies p = {.residency = {.evict = "lru"}, .prefetch = {.predict = "gate"}};
    check_refused(model, pool, "MOEVM_PREFETCH", "all", &p);
    mvm_pool_destroy(pool);
}

/* ---- SMoE's speculative prefetch (policy/predict_speculative.c) ------------------------- */

/* A tiny model of `arch` (F32) in dir, by name. */
static const char *arch_model(mvm_pool *pool, const char *arch)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, arch);
    mvm_model_spec s = mvm_preset_find("tiny", arch)->spec;
    s.type = MVM_W_F32;
    s.seed = 3;
    CHECK_ST(mvm_mkmodel_write(&s, path, pool, NULL, NULL), MVM_OK);
    return path;
}

/* 24 tokens in batches of `batch` under `predict` at `frac` of the experts' pages, every
 * copy in order (MOEVM_DETERMINISTIC): every token's logits into logits (NULL: none), then,
 * with `again`, the same tokens once more from position 0; *ps: the prefetcher's statistics
 * over that second pass (over the first without it). */
static void run_speculative(const char *model, mvm_pool *pool, const char *predict, double frac,
                            uint32_t batch, float *logits, int again, mvm_prefetch_stats *ps)
{
    mvm_model *m = NULL;
    mvm_ctx *c = NULL;
    /* α 0.05: a forecast names most of the top-k (0.3 names a few), still by a margin that
     * no rounding of the router's product can cross */
    mvm_ctx_policies p = {.residency = {.evict = "lru"},
                          .prefetch = {.predict = predict,
                                       .predict_args = strcmp(predict, "none") ? "alpha=0.05" : NULL}};
    *ps = (mvm_prefetch_stats){0};
    open_ctx_batch(model, pool, frac, batch, &p, &m, &c);
    if (c) {
        int32_t tok[24];
        for (int t = 0; t < 24; t++)
            tok[t] = (int32_t)((t * 41 + 7) % m->hp.n_vocab);
        CHECK_ST(mvm_ctx_eval(c, tok, 24, logits, logits != NULL), MVM_OK);
        mvm_prefetch_stats first;
        mvm_prefetcher_get_stats(mvm_ctx_prefetcher(c), &first);
        *ps = first;
        if (again) {
            mvm_ctx_reset(c);
            CHECK_ST(mvm_ctx_eval(c, tok, 24, NULL, 0), MVM_OK);
            mvm_prefetcher_get_stats(mvm_ctx_prefetcher(c), ps);
            ps->forecasts -= first.forecasts;
            ps->named -= first.named;
            ps->named_used -= first.named_used;
        }
    }
    mvm_ctx_free(c);
    mvm_model_free(m);
}

/* The speculative pass (forward_cpu.c) changes nothing the model computes: every logit is
 * bitwise the run's without a predictor, with experts moving (30%), in batches of 4. And it
 * estimates what it should: with every expert resident and landed (the second pass over the
 * same tokens at 100%, a token a batch), the partial hidden state is the whole one, the pass
 * through the next layer's attention is that layer's real one, and every expert it
 * forecasts is then routed to.
 * Grouped attention without shared experts (qwen3moe), with gpt-oss's windows and sinks,
 * and deepseek2's latent attention, dense first block and shared experts. */
static void test_speculative(void)
{
    mvm_pool *pool = NULL;
    CHECK_ST(mvm_pool_create(2, NULL, &pool), MVM_OK);
    setenv("MOEVM_DETERMINISTIC", "on", 1);
    static const char *arches[] = {"qwen3moe", "gpt-oss", "deepseek2"};
    for (size_t i = 0; i < sizeof arches / sizeof *arches; i++) {
        const char *model = arch_model(pool, arches[i]);
        const size_t n = 24 * (size_t)mvm_preset_find("tiny", arches[i])->spec.n_vocab;
        float *plain = malloc(n * sizeof *plain), *spec = malloc(n * sizeof *spec);
        for (size_t k = 0; plain && spec && k < n; k++)
            plain[k] = spec[k] = NAN;
        mvm_prefetch_stats ps;
        run_speculative(model, pool, "none", 0.3, 4, plain, 0, &ps);
        run_speculative(model, pool, "speculative", 0.3, 4, spec, 0, &ps);
        CHECK(plain && spec && memcmp(plain, spec, n * sizeof *plain) == 0 && plain[0] == plain[0]);
        CHECK(ps.forecasts > 0 && ps.named > 0);
        run_speculative(model, pool, "speculative", 1.0, 1, NULL, 1, &ps);
        CHECK(ps.named > 0 && ps.named_used == ps.named);
        if (ps.named_used != ps.named)
            fprintf(stderr, "  %s: %llu of %llu forecast experts used\n", arches[i],
                    (unsigned long long)ps.named_used, (unsigned long long)ps.named);
        free(plain), free(spec);
    }
    unsetenv("MOEVM_DETERMINISTIC");
    mvm_pool_destroy(pool);
}

/* A step asks for all its copies before it waits for any, so the migration worker lands one
 * while the next is on the bus (docs/perf/vmm.md, section 5). With each fake copy taking
 * 300 ms, the three experts a step needs are all queued or in flight at once; waiting for
 * each before asking for the next never has more than one out. For a round (homes
 * unmapped) and for a step that waits for its copies (mvm_resid_begin with wait). */
struct asker {
    mvm_resid *r;
    int round;
    int32_t todo[3];
    uint32_t k;
    mvm_status st;
    atomic_int done;
};

static void *ask_step(void *p)
{
    struct asker *a = p;
    a->k = 3;
    a->st = a->round ? whole_round(a->r, 0, a->todo, 3, &a->k)
                     : mvm_resid_begin(a->r, 0, a->todo, 3, 1);
    atomic_store(&a->done, 1);
    return NULL;
}

typedef void (*copy_delay_fn)(unsigned long long us);

/* The fake driver's fakecuda_set_copy_delay_us, through *lib (dlclose it after). */
static copy_delay_fn copy_delay(void **lib)
{
    const char *lib_path = getenv("MOEVM_CUDA_LIBRARY");
    *lib = lib_path ? dlopen(lib_path, RTLD_NOW) : NULL;
    copy_delay_fn delay = *lib ? (copy_delay_fn)dlsym(*lib, "fakecuda_set_copy_delay_us") : NULL;
    CHECK(delay != NULL);
    return delay;
}

/* A cuda space of one layer of four one-page experts, a budget of all four. */
static mvm_space *fake_device_space(void)
{
    const uint64_t page = 65536; /* the fake's granularity in this test's environment */
    mvm_space_desc d;
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    d.backend = MVM_BACKEND_CUDA;
    d.n_layers = 1;
    d.n_experts = 4;
    d.expert_bytes = page;
    d.page_size = page;
    d.device_budget = 4 * page;
    mvm_space *sp = NULL;
    CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    return sp;
}

static void test_step_asks_all_first(void)
{
    void *lib;
    copy_delay_fn delay = copy_delay(&lib);
    if (!delay)
        return;
    for (int round = 0; round < 2; round++) {
        mvm_space *sp = fake_device_space();
        if (!sp)
            return;
        mvm_resid *r = resid_for(sp, "lru", "");
        struct asker a = {.r = r, .round = round, .todo = {0, 1, 2}};
        delay(300000);
        pthread_t t;
        CHECK(pthread_create(&t, NULL, ask_step, &a) == 0);
        uint32_t most = 0;
        while (!atomic_load(&a.done)) {
            mvm_stats st;
            mvm_space_get_stats(sp, &st);
            if (st.moves_queued + st.moves_in_flight > most)
                most = st.moves_queued + st.moves_in_flight;
            sched_yield();
        }
        pthread_join(t, NULL);
        delay(0);
        CHECK_ST(a.st, MVM_OK);
        CHECK(a.k == 3 && most == 3);
        for (uint32_t e = 0; e < 3; e++)
            CHECK(resident_pages(sp, 0, e) == 1 && pins_of(sp, 0, e) == 1);
        mvm_resid_release(r, 0, a.todo, 3);
        mvm_resid_destroy(r);
        CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    }
    dlclose(lib);
}

/* A round returns once its copies are asked: its landed expert is pinned at once and the
 * others are still loading, so that the reader computes the landed one (and the CPU's
 * share) while they land; hold_round then waits for them, the wait counted. A round let go
 * before its hold lets its copies' handles go, and they land all the same. */
static void test_round_lands_behind(void)
{
    void *lib;
    copy_delay_fn delay = copy_delay(&lib);
    mvm_space *sp = delay ? fake_device_space() : NULL;
    if (!sp)
        return;
    mvm_resid *r = resid_for(sp, "lru", "");
    int32_t first[] = {0}, todo[] = {1, 0, 2}, last[] = {3};
    uint32_t k = 0, ready = 0;
    CHECK_ST(whole_round(r, 0, first, 1, &k), MVM_OK);
    mvm_resid_release(r, 0, first, 1);
    delay(300000);
    CHECK_ST(mvm_resid_begin_round(r, 0, todo, 3, &k, &ready), MVM_OK);
    mvm_residency res = {0};
    mvm_expert_residency(sp, 0, 1, &res);
    CHECK(res.loading && k == 3 && ready == 1 && todo[0] == 0);
    CHECK(pins_of(sp, 0, 0) == 1 && pins_of(sp, 0, 1) == 0 && pins_of(sp, 0, 2) == 0);
    CHECK_ST(mvm_resid_hold_round(r, 0, todo, ready, k), MVM_OK);
    for (uint32_t e = 0; e < 3; e++)
        CHECK(pins_of(sp, 0, e) == 1 && resident_pages(sp, 0, e) == 1);
    mvm_resid_stats rs;
    mvm_resid_get_stats(r, &rs);
    CHECK(rs.wait_s > 0.1 && rs.accesses == 4 && rs.hits == 1);
    mvm_resid_release(r, 0, todo, 3);
    CHECK_ST(mvm_resid_begin_round(r, 0, last, 1, &k, &ready), MVM_OK);
    CHECK(k == 1 && ready == 0 && pins_of(sp, 0, 3) == 0);
    mvm_resid_release(r, 0, last, 1);
    for (int i = 0; i < 200 && mvm_expert_residency(sp, 0, 3, &res) == MVM_OK && res.loading;
         i++)
        usleep(10000);
    CHECK(res.resident == 1 && !res.loading && res.pins == 0);
    delay(0);
    mvm_resid_destroy(r);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    dlclose(lib);
}

/* Which experts a reader may read at their own addresses (mvm_resid_landed_all): those
 * resident whole and landed, a loading one not until it lands; one evicted and asked again
 * while the flags said it was there is looked up again (loading: not there), not taken
 * from the last answer. A budget of two experts of four. In a slot space (`slots`) each
 * owned expert's slot comes with it, 0 for the others, and one reloaded into the other
 * slot reads there. */
static void test_landed_all(int slots)
{
    void *lib;
    copy_delay_fn delay = copy_delay(&lib);
    mvm_space *sp = NULL;
    if (delay) {
        mvm_space_desc d;
        CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
        d.backend = MVM_BACKEND_CUDA;
        d.n_layers = 1, d.n_experts = 4, d.expert_bytes = d.page_size = 65536;
        d.device_budget = 2 * 65536;
        d.slots = slots;
        CHECK_ST(mvm_space_create(&d, &sp), MVM_OK);
    }
    if (!sp)
        return;
    mvm_resid *r = resid_for(sp, "lru", "");
    uint8_t own[4] = {0};
    uint64_t slot[4] = {0}, *sl = slots ? slot : NULL, first = 0, at = 0;
    CHECK(mvm_resid_landed_all(r, own, sl) == 0);
    CHECK_ST(mvm_resid_prefetch(r, 0, 0), MVM_OK);
    wait_idle(sp);
    CHECK(mvm_resid_landed_all(r, own, sl) == (slots ? 2u : 1u) && own[0] == 1);
    first = slot[0];
    CHECK(!slots || (first && mvm_expert_slot(sp, 0, 0, &at) == MVM_OK && at == first &&
                     first != (uint64_t)(uintptr_t)mvm_expert_addr(sp, 0, 0)));
    delay(200000);
    CHECK_ST(mvm_resid_prefetch(r, 0, 1), MVM_OK);
    CHECK(mvm_resid_landed_all(r, own, sl) == 0 && own[0] == 1 && own[1] == 0 && slot[1] == 0);
    wait_idle(sp);
    CHECK(mvm_resid_landed_all(r, own, sl) >= 1 && own[0] == 1 && own[1] == 1);
    CHECK(!slots || (slot[1] && slot[1] != first));
    const uint64_t second = slot[1];
    /* 2 evicts 0 (the least recent), then 0 evicts 1: 2 and 0 load */
    CHECK_ST(mvm_resid_prefetch(r, 0, 2), MVM_OK);
    CHECK_ST(mvm_resid_prefetch(r, 0, 0), MVM_OK);
    mvm_residency res = {0};
    mvm_expert_residency(sp, 0, 0, &res);
    CHECK(res.loading == 1);
    CHECK(mvm_resid_landed_all(r, own, sl) == 2);
    CHECK(own[0] == 0 && own[1] == 0 && own[2] == 0 && own[3] == 0);
    CHECK(slot[0] == 0 && slot[1] == 0 && slot[2] == 0);
    wait_idle(sp);
    delay(0);
    CHECK(mvm_resid_landed_all(r, own, sl) >= 2 && own[0] == 1 && own[2] == 1);
    /* 2 took 0's slot, 0 took 1's */
    CHECK(!slots || (slot[2] == first && slot[0] == second && slot[1] == 0));
    mvm_resid_destroy(r);
    CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    dlclose(lib);
}

static void test_landed_all_pages(void) { test_landed_all(0); }
static void test_landed_all_slots(void) { test_landed_all(1); }

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "cuda") == 0) {
        RUN(test_step_asks_all_first);
        RUN(test_round_lands_behind);
        RUN(test_landed_all_pages);
        RUN(test_landed_all_slots);
        TEST_END();
    }
    snprintf(dir, sizeof dir, "/tmp/moevm-test-residency-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    unsetenv("MOEVM_EVICT");
    unsetenv("MOEVM_EVICT_ARGS");
    unsetenv("MOEVM_PREDICT");
    unsetenv("MOEVM_PREDICT_ARGS");
    RUN(test_module_decides);
    RUN(test_observe_once);
    RUN(test_cpu_scale);
    RUN(test_step_shield);
    RUN(test_no_room);
    RUN(test_shield);
    RUN(test_rounds);
    RUN(test_second_table_sees_resident);
    RUN(test_round_without_room);
    RUN(test_round_after_landing);
    RUN(test_landed_view);
    RUN(test_wanted_prefetched);
    RUN(test_window_copies);
    RUN(test_admission);
    RUN(test_defer_loads);
    RUN(test_at_home_moves_nothing);
    RUN(test_choice_and_errors);
    RUN(test_engine_matches_sim);
    RUN(test_sim_routers);
    RUN(test_gate_prefetches);
    RUN(test_deterministic);
    RUN(test_prefetch_window);
    RUN(test_speculative);
    RUN(test_hot_table);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 1;
    TEST_END();
}
