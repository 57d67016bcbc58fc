/*
 * Move handles and jobs (space_impl.h): a handle is what a caller holds of a request, one
 * reference per holder and per job it waits on; a job settles its handles when it finishes.
 * The lists jobs wait on. Requests and the worker that runs the jobs are migrate.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "vmm/error.h"
#include "vmm/registry.h"
#include "vmm/space_impl.h"

void mvm_shared_release(struct space_shared *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1)
        free(s);
}

/* ---- move handles ---------------------------------------------------------------------- */

mvm_move *mvm_move_new(mvm_space *sp)
{
    mvm_move *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    if (!mvm_registry_add(m)) {
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    cond_init_monotonic(&m->cv);
    m->refs = 1;
    m->spin_ns = sp->spin_ns;
    m->shared = sp->shared;
    atomic_fetch_add(&sp->shared->refs, 1);
    return m;
}

/* Drops one reference; m->mu held on entry, released (or destroyed) on return. */
void mvm_move_unref_locked(mvm_move *m)
{
    bool last = --m->refs == 0;
    pthread_mutex_unlock(&m->mu);
    if (last) {
        mvm_shared_release(m->shared);
        pthread_cond_destroy(&m->cv);
        pthread_mutex_destroy(&m->mu);
        free(m);
    }
}

/* A job the move waited on finished with `st`, for the reason `why` when it failed. */
static void move_settle(mvm_move *m, mvm_status st, const char *why)
{
    pthread_mutex_lock(&m->mu);
    if (st != MVM_OK && m->result == MVM_OK) {
        m->result = st;
        snprintf(m->why, sizeof m->why, "%s", why);
    }
    atomic_fetch_add_explicit(&m->settled, 1, memory_order_release);
    if (--m->pending == 0)
        pthread_cond_broadcast(&m->cv);
    mvm_move_unref_locked(m);
}

bool mvm_job_add_waiter(struct job *j, mvm_move *m)
{
    if (j->n_waiters == j->cap_waiters) {
        uint32_t cap = j->cap_waiters ? j->cap_waiters * 2 : 2;
        mvm_move **w = realloc(j->waiters, cap * sizeof *w);
        if (!w)
            return false;
        j->waiters = w;
        j->cap_waiters = cap;
    }
    j->waiters[j->n_waiters++] = m;
    pthread_mutex_lock(&m->mu);
    m->refs++;
    m->pending++;
    pthread_mutex_unlock(&m->mu);
    return true;
}

mvm_status mvm_move_wait(mvm_move *m, int64_t timeout_ns)
{
    if (!m || !mvm_registry_contains(m))
        return mvm_fail(MVM_ERR_INVALID, "%p is not a live move", (void *)m);
    uint64_t start = mvm_clock_ns();
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (timeout_ns >= 0) {
        uint64_t ns = (uint64_t)deadline.tv_nsec + (uint64_t)timeout_ns;
        deadline.tv_sec += (time_t)(ns / 1000000000ull);
        deadline.tv_nsec = (long)(ns % 1000000000ull);
    }
    /* spun first (vmm/spin.h), within the timeout */
    uint64_t spin_until = start + m->spin_ns;
    if (timeout_ns >= 0 && spin_until > start + (uint64_t)timeout_ns)
        spin_until = start + (uint64_t)timeout_ns;
    pthread_mutex_lock(&m->mu);
    int rc = 0;
    while (m->pending > 0 && rc != ETIMEDOUT)
        rc = mvm_spin_then_wait(&m->mu, &m->cv, &m->settled, spin_until,
                                timeout_ns < 0 ? NULL : &deadline);
    mvm_status st = m->pending > 0 ? MVM_ERR_TIMEOUT : m->result;
    pthread_mutex_unlock(&m->mu);
    atomic_fetch_add(&m->shared->wait_ns, mvm_clock_ns() - start);
    if (st == MVM_ERR_TIMEOUT)
        return mvm_fail(st, "move not finished within %lld ns", (long long)timeout_ns);
    if (st != MVM_OK)
        return mvm_fail(st, "the move failed: %s", m->why);
    return MVM_OK;
}

mvm_status mvm_move_test(mvm_move *m)
{
    if (!m || !mvm_registry_contains(m))
        return mvm_fail(MVM_ERR_INVALID, "%p is not a live move", (void *)m);
    pthread_mutex_lock(&m->mu);
    mvm_status st = m->pending > 0 ? MVM_ERR_BUSY : m->result;
    pthread_mutex_unlock(&m->mu);
    return st;
}

mvm_status mvm_move_release(mvm_move *m)
{
    if (!m || !mvm_registry_remove(m))
        return mvm_fail(MVM_ERR_INVALID, "mvm_move_release: %p is not a live move (released "
                        "twice?)", (void *)m);
    pthread_mutex_lock(&m->mu);
    mvm_move_unref_locked(m);
    return MVM_OK;
}

/* ---- job lists --------------------------------------------------------------------------- */

void mvm_job_list_push(struct job_list *l, struct job *j)
{
    j->next = NULL;
    j->prev = l->tail;
    if (l->tail)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
    l->n++;
}

void mvm_job_list_remove(struct job_list *l, struct job *j)
{
    if (j->prev)
        j->prev->next = j->next;
    else
        l->head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else
        l->tail = j->prev;
    j->prev = j->next = NULL;
    l->n--;
}

struct job *mvm_job_new(uint32_t expert, uint32_t n, int prio)
{
    struct job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->pages = malloc(n * sizeof *j->pages);
    j->runs = malloc(n * sizeof *j->runs);
    if (!j->pages || !j->runs) {
        mvm_job_free(j);
        return NULL;
    }
    j->expert = expert;
    j->prio = prio;
    return j;
}

void mvm_job_free(struct job *j)
{
    free(j->pages);
    free(j->runs);
    free(j->waiters);
    free(j);
}

/* Settles the job's moves and frees it; the job is on no list. */
void mvm_job_finish(struct job *j, mvm_status st)
{
    const char *why = j->why[0]                 ? j->why
                      : st == MVM_ERR_CANCELLED ? "cancelled: its pages were evicted, or the "
                                                  "space destroyed, before they landed"
                                                : mvm_status_name(st);
    for (uint32_t i = 0; i < j->n_waiters; i++)
        move_settle(j->waiters[i], st, why);
    mvm_job_free(j);
}

/* Keeps the calling thread's last error as the job's reason, unless it has one. */
void mvm_job_note_error(struct job *j)
{
    if (!j->why[0])
        snprintf(j->why, sizeof j->why, "%s", mvm_last_error());
}
