/*
 * The interposer's life cycle: nothing happens until the program's first successful cuInit (no
 * constructor work, as vgpu-manager enforces at build time). Then the MOEVM_* options are read
 * once. A malformed value, or an evict module that does not exist, is reported in one line and
 * the program runs unmanaged: every hook passes through. The managed space itself is created
 * at the first allocation large enough to manage (heap.c).
 *
 * Fork: a CUDA context does not survive fork, so the child runs unmanaged with fresh locks
 * (its copies of the parent's tables are dropped, not freed: they describe driver state
 * the child does not have).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "interpose/options.h"
#include "interpose/preload.h"
#include "policy/choose.h"
#include "policy/policy_options.h"
#include "vmm/error.h"
#include "vmm/options.h"

mvm_preload mvm_interposer = {.lock = PTHREAD_RWLOCK_INITIALIZER};

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static bool init_done;
static atomic_bool on;

bool mvm_interposer_on(void)
{
    return atomic_load_explicit(&on, memory_order_acquire);
}

static void fork_prepare(void)
{
    pthread_rwlock_wrlock(&mvm_interposer.lock);
}

static void fork_parent(void)
{
    pthread_rwlock_unlock(&mvm_interposer.lock);
}

static void fork_child(void)
{
    atomic_store(&on, false);
    atomic_store(&mvm_interposer.captures, 0);
    pthread_rwlock_init(&mvm_interposer.lock, NULL);
    mvm_interposer.space = NULL;
    mvm_interposer.n_allocs = 0;
    mvm_prefetch_forget();
}

static bool copy_string(char *dst, size_t cap, const char *src, const char *what)
{
    if (strlen(src) >= cap) {
        fprintf(stderr, "moevm: preload: %s is longer than %zu characters; the program runs "
                "unmanaged\n", what, cap - 1);
        return false;
    }
    strcpy(dst, src);
    return true;
}

/* The report is written at exit as PATH.tmp, then renamed: say now, not after the run, when
 * its folder will not take it. The program still runs managed. */
static void check_report_path(const char *path)
{
    if (!path[0])
        return;
    char dir[sizeof mvm_interposer.report_path];
    const char *slash = strrchr(path, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == path)
        strcpy(dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    struct stat st;
    const char *why = NULL;
    if (stat(dir, &st) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(st.st_mode))
        why = "not a folder";
    else if (access(dir, W_OK | X_OK) != 0)
        why = "a folder this process cannot write in";
    else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        why = "the report's name is a folder's";
    if (why)
        fprintf(stderr, "moevm: preload: MOEVM_REPORT=%s: %s: %s; no report will be written\n",
                path, dir, why);
}

/* Every option the interposer uses, validated up front. */
static bool read_options(void)
{
    char msg[512];
    mvm_options_register(&mvm_policy_options);
    mvm_options_register(&mvm_interpose_options);
    if (mvm_options_check() != MVM_OK) {
        fprintf(stderr, "moevm: preload: %s; the program runs unmanaged\n", mvm_last_error());
        return false;
    }
    mvm_option_value min, budget, over, page, ev, args, report, skip, clean, slices, prefetch,
        routing;
    if (mvm_option_get(&mvm_opt_preload_min, &min, msg, sizeof msg) ||
        mvm_option_get(&mvm_opt_gpu_budget, &budget, msg, sizeof msg) ||
        mvm_option_get(&mvm_opt_oversubscribe, &over, msg, sizeof msg) ||
        mvm_option_get(&mvm_opt_page_size, &page, msg, sizeof msg) ||
        mvm_option_get(&mvm_opt_evict, &ev, msg, sizeof msg) ||
        mvm_option_get(&mvm_opt_evict_args, &args, msg, sizeof msg) ||
        mvm_option_get(&mvm_opt_report, &report, msg, sizeof msg) ||
        mvm_option_get(&mvm_opt_report_skip, &skip, msg, sizeof msg) ||
        mvm_option_get(&mvm_opt_clean_evict, &clean, msg, sizeof msg) ||
        mvm_option_get(&mvm_opt_preload_slices, &slices, msg, sizeof msg) ||
        mvm_option_get(&mvm_opt_preload_prefetch, &prefetch, msg, sizeof msg) ||
        mvm_option_get(&mvm_opt_preload_routing, &routing, msg, sizeof msg)) {
        fprintf(stderr, "moevm: preload: %s; the program runs unmanaged\n", msg);
        return false;
    }
    if (strcmp(ev.s, "auto") == 0)
        ev.s = MVM_INTERPOSE_EVICT_DEFAULT;
    if (!mvm_policy_find(MVM_ROLE_EVICT, ev.s)) {
        char names[256];
        mvm_policy_names(MVM_ROLE_EVICT, names, sizeof names);
        fprintf(stderr, "moevm: preload: MOEVM_EVICT=%s is not an evict module (have: %s); "
                "the program runs unmanaged\n", ev.s, names);
        return false;
    }
    mvm_preload *p = &mvm_interposer;
    if (!copy_string(p->evict_name, sizeof p->evict_name, ev.s, "MOEVM_EVICT") ||
        !copy_string(p->evict_args, sizeof p->evict_args, args.s, "MOEVM_EVICT_ARGS") ||
        !copy_string(p->report_path, sizeof p->report_path, report.s, "MOEVM_REPORT") ||
        !copy_string(p->report_skip, sizeof p->report_skip,
                     strcmp(skip.s, "none") == 0 ? "" : skip.s, "MOEVM_REPORT_SKIP"))
        return false;
    check_report_path(p->report_path);
    mvm_interposer.min_bytes = min.i > 0 ? (uint64_t)min.i : 1;
    mvm_interposer.budget_bytes = budget.i == (int64_t)MVM_BUDGET_AUTO ? 0 : (uint64_t)budget.i;
    mvm_interposer.budget_frac = budget.frac;
    mvm_interposer.oversub_bytes = (uint64_t)over.i;
    mvm_interposer.clean_evict = clean.i == 1; /* "off|on" */
    mvm_interposer.slices = slices.i == 1;
    mvm_interposer.prefetch = prefetch.i == 1;
    mvm_interposer.routing = routing.i == 1;
    mvm_interposer.page_size = page.i ? (uint64_t)page.i : 2u << 20;
    return true;
}

void mvm_interposer_init_after_cuinit(void)
{
    pthread_mutex_lock(&init_mu);
    if (!init_done) {
        init_done = true;
        mvm_in_interposer++;
        if (read_options()) {
            pthread_atfork(fork_prepare, fork_parent, fork_child);
            mvm_report_prime();
            atexit(mvm_report_at_exit);
            atomic_store_explicit(&on, true, memory_order_release);
        }
        mvm_in_interposer--;
    }
    pthread_mutex_unlock(&init_mu);
}

/* A process that never initialised CUDA (a shell or a worker under the same LD_PRELOAD, a
 * program whose CUDA never reached the driver) managed nothing. With MOEVM_LOG=info it says
 * so as it ends, with the verdict on its MOEVM_* values, so that a typo or a program the
 * interposer never saw shows without a GPU run. No driver call: the driver may be gone. */
__attribute__((destructor)) static void report_if_never_initialised(void)
{
    pthread_mutex_lock(&init_mu);
    if (!init_done && mvm_log_enabled(MVM_LOG_INFO)) {
        init_done = true;
        mvm_in_interposer++;
        if (read_options())
            MVM_PL_LOG(MVM_LOG_INFO, "CUDA was never initialised in this process (pid %d): "
                       "nothing was managed; the MOEVM_* options are valid", (int)getpid());
        mvm_in_interposer--;
    }
    pthread_mutex_unlock(&init_mu);
}

CUresult hk_cuInit(unsigned int flags)
{
    if (!mvm_real_load() || !mvm_real_fn.cuInit)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = mvm_real_fn.cuInit(flags);
    if (r == CUDA_SUCCESS)
        mvm_interposer_init_after_cuinit();
    return r;
}
