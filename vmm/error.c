/* Thread-local error messages and the stderr logger (see error.h). */
#include "vmm/error.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "vmm/options.h"

static _Thread_local char last_error[512];

mvm_status mvm_failv(mvm_status s, const char *where, const char *fmt, va_list ap)
{
    int n = where ? snprintf(last_error, sizeof last_error, "%s: ", where) : 0;
    if (n < 0 || (size_t)n >= sizeof last_error)
        n = 0; /* a prefix that fills the buffer leaves room for nothing: drop it */
    vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
    mvm_log(MVM_LOG_DEBUG, "%s: %s", mvm_status_name(s), last_error);
    return s;
}

mvm_status mvm_fail(mvm_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mvm_failv(s, NULL, fmt, ap);
    va_end(ap);
    return s;
}

mvm_status mvm_fail_prefix(mvm_status s, const char *fmt, ...)
{
    char was[sizeof last_error], prefix[256];
    snprintf(was, sizeof was, "%s", last_error); /* formatting into last_error reads it */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    return mvm_fail(s, "%s: %s", prefix, was);
}

const char *mvm_last_error(void) { return last_error; }

const char *mvm_status_name(mvm_status s)
{
    switch (s) {
    case MVM_OK: return "MVM_OK";
    case MVM_ERR_INVALID: return "MVM_ERR_INVALID";
    case MVM_ERR_RANGE: return "MVM_ERR_RANGE";
    case MVM_ERR_NOMEM: return "MVM_ERR_NOMEM";
    case MVM_ERR_NOSPACE: return "MVM_ERR_NOSPACE";
    case MVM_ERR_PINNED: return "MVM_ERR_PINNED";
    case MVM_ERR_BUSY: return "MVM_ERR_BUSY";
    case MVM_ERR_CANCELLED: return "MVM_ERR_CANCELLED";
    case MVM_ERR_TIMEOUT: return "MVM_ERR_TIMEOUT";
    case MVM_ERR_BACKEND: return "MVM_ERR_BACKEND";
    case MVM_ERR_UNSUPPORTED: return "MVM_ERR_UNSUPPORTED";
    case MVM_ERR_OPTION: return "MVM_ERR_OPTION";
    }
    return "MVM_ERR_UNKNOWN";
}

const char *mvm_version(void) { return "0.1.0"; }

/* The level is read once: logging sits on paths where re-parsing the environment would
 * cost more than the message. A malformed MOEVM_LOG is reported by whoever validates the
 * options (mvm_options_check); here it falls back to the default. */
static int log_level = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void read_log_level(void)
{
    mvm_option_value v;
    char msg[512];
    log_level = mvm_option_get(&mvm_opt_log, &v, msg, sizeof msg) == MVM_OK ? (int)v.i
                                                                               : MVM_LOG_WARN;
}

int mvm_log_enabled(mvm_log_level level)
{
    pthread_once(&log_once, read_log_level);
    return (int)level <= log_level;
}

void mvm_log(mvm_log_level level, const char *fmt, ...)
{
    if (!mvm_log_enabled(level))
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "moevm: %s\n", line);
}
