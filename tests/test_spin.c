/*
 * vmm/spin.c: spinning until a count moves on or a deadline passes, then sleeping on a
 * condition variable; and MOEVM_MOVE_SPIN's values, read when a space is made.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "moevm/moevm.h"
#include "vmm/spin.h"

struct shared {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint seq;
    unsigned delay_us;  /* the bumper's wait before it bumps */
    bool bumped;        /* set under mu with the bump */
};

/* Bumps seq after delay_us, under mu, and signals cv: the way the space's writers do. */
static void *bumper(void *arg)
{
    struct shared *s = arg;
    usleep(s->delay_us);
    pthread_mutex_lock(&s->mu);
    atomic_fetch_add(&s->seq, 1);
    s->bumped = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void shared_init(struct shared *s, unsigned delay_us)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    /* an error-checking mutex: unlocking one not held fails, so a test sees that it was */
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&s->mu, &a);
    pthread_mutexattr_destroy(&a);
    pthread_cond_init(&s->cv, NULL);
    atomic_init(&s->seq, 7);
    s->delay_us = delay_us;
    s->bumped = false;
}

static void shared_destroy(struct shared *s)
{
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
}

static void test_spin_until(void)
{
    /* nothing moves: false, and not before the deadline */
    atomic_uint seq;
    atomic_init(&seq, 3);
    uint64_t t0 = mvm_clock_ns();
    CHECK(!mvm_spin_until(&seq, 3, t0 + 2000000));
    CHECK(mvm_clock_ns() >= t0 + 2000000);
    /* moved already: true at once, whatever the deadline */
    CHECK(mvm_spin_until(&seq, 2, 0));
    /* moved by another thread while it spins (the deadline a minute away) */
    struct shared s;
    shared_init(&s, 3000);
    pthread_t t;
    pthread_create(&t, NULL, bumper, &s);
    CHECK(mvm_spin_until(&s.seq, 7, mvm_clock_ns() + 60000000000ull));
    CHECK(atomic_load(&s.seq) == 8);
    pthread_join(t, NULL);
    shared_destroy(&s);
}

/* Waits the way the space does: the condition (bumped) checked under mu around each wait. */
static void wait_until_bumped(struct shared *s, uint64_t until_ns)
{
    pthread_mutex_lock(&s->mu);
    while (!s->bumped)
        CHECK(mvm_spin_then_wait(&s->mu, &s->cv, &s->seq, until_ns, NULL) == 0);
    CHECK(pthread_mutex_unlock(&s->mu) == 0); /* it returned holding mu */
}

static void test_spin_then_wait(void)
{
    /* the change comes while it spins */
    struct shared s;
    shared_init(&s, 2000);
    pthread_t t;
    pthread_create(&t, NULL, bumper, &s);
    wait_until_bumped(&s, mvm_clock_ns() + 60000000000ull);
    pthread_join(t, NULL);
    shared_destroy(&s);

    /* the spin is over (a deadline passed, or none): it sleeps, and the signal wakes it */
    for (int past = 0; past < 2; past++) {
        shared_init(&s, 20000);
        /* t0 before the bumper starts: its sleep may be under way before pthread_create returns */
        uint64_t t0 = mvm_clock_ns();
        pthread_create(&t, NULL, bumper, &s);
        wait_until_bumped(&s, past ? t0 - 1 : t0 + 1000000);
        CHECK(mvm_clock_ns() - t0 >= 20000000); /* woken by the bump, not before it */
        pthread_join(t, NULL);
        shared_destroy(&s);
    }

    /* nothing moves: a deadline ends the sleep, said as ETIMEDOUT (a CLOCK_MONOTONIC cv) */
    shared_init(&s, 0);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_destroy(&s.cv);
    pthread_cond_init(&s.cv, &ca);
    pthread_condattr_destroy(&ca);
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_nsec += 5000000;
    if (deadline.tv_nsec >= 1000000000)
        deadline.tv_sec++, deadline.tv_nsec -= 1000000000;
    pthread_mutex_lock(&s.mu);
    int rc = 0;
    while (rc != ETIMEDOUT && !s.bumped)
        rc = mvm_spin_then_wait(&s.mu, &s.cv, &s.seq, mvm_clock_ns() + 1000000, &deadline);
    CHECK(rc == ETIMEDOUT && !s.bumped);
    pthread_mutex_unlock(&s.mu);
    shared_destroy(&s);
}

/* A space on the host backend made with MOEVM_MOVE_SPIN=value: its status. */
static mvm_status space_with_spin(const char *value)
{
    setenv("MOEVM_MOVE_SPIN", value, 1);
    mvm_space_desc d;
    CHECK_ST(mvm_space_desc_init(&d), MVM_OK);
    d.backend = MVM_BACKEND_HOST;
    d.n_layers = 1, d.n_experts = 2, d.expert_bytes = 64 << 10, d.page_size = 64 << 10;
    d.device_budget = 64 << 10;
    mvm_space *sp = NULL;
    mvm_status st = mvm_space_create(&d, &sp);
    if (st == MVM_OK) { /* and its moves work, spinning or not */
        for (uint32_t e = 0; e < 4; e++) {
            CHECK_ST(mvm_make_resident(sp, 0, e % 2, MVM_ALL_PAGES), MVM_OK);
            CHECK_ST(mvm_evict(sp, 0, e % 2, 0), MVM_OK);
        }
        CHECK_ST(mvm_space_destroy(sp), MVM_OK);
    }
    unsetenv("MOEVM_MOVE_SPIN");
    return st;
}

static void test_option(void)
{
    const char *good[] = {"auto", "0", "250", "100000"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        CHECK(space_with_spin(good[i]) == MVM_OK);
    const char *bad[] = {"", "-1", "+5", "100001", "12us", "on", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(space_with_spin(bad[i]) == MVM_ERR_OPTION);
        CHECK(strstr(mvm_last_error(), "MOEVM_MOVE_SPIN=") != NULL);
    }
}

int main(void)
{
    RUN(test_spin_until);
    RUN(test_spin_then_wait);
    RUN(test_option);
    TEST_END();
}
