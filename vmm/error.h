/*
 * Errors and logging inside libmoevm. A failing function sets the calling thread's message
 * with mvm_fail() and returns the status it was given, so error paths read
 *     return mvm_fail(MVM_ERR_RANGE, "layer %u out of range (model has %u)", l, n);
 * Messages are one line naming the input and the problem. The library never exits and
 * never prints, except through mvm_log (stderr, gated by MOEVM_LOG).
 */
#ifndef MVM_VMM_ERROR_H
#define MVM_VMM_ERROR_H

#include <stdarg.h>

#include "moevm/moevm.h"

#if defined(__GNUC__)
#define MVM_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define MVM_PRINTF(f, a)
#endif

mvm_status mvm_fail(mvm_status s, const char *fmt, ...) MVM_PRINTF(2, 3);
/* The same from a va_list, the message prefixed by "where: " (where may be NULL): for
 * parsers' own fail functions, which name the file and place. */
mvm_status mvm_failv(mvm_status s, const char *where, const char *fmt, va_list ap)
    MVM_PRINTF(3, 0);

/* Puts "<prefix>: " (printf-formatted) before the calling thread's message and returns s:
 * a caller adding where a callee failed, e.g. mvm_fail_prefix(st, "tensor '%s'", name). */
mvm_status mvm_fail_prefix(mvm_status s, const char *fmt, ...) MVM_PRINTF(2, 3);

typedef enum mvm_log_level {
    MVM_LOG_OFF = 0,
    MVM_LOG_WARN,
    MVM_LOG_INFO,
    MVM_LOG_DEBUG,
} mvm_log_level;

/* Prints "moevm: <message>" to stderr when level <= the MOEVM_LOG level. */
void mvm_log(mvm_log_level level, const char *fmt, ...) MVM_PRINTF(2, 3);
int mvm_log_enabled(mvm_log_level level);

#endif
