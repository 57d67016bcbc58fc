/*
 * The device kernels' PTX made ready for programmatic dependent launch (ptx_pdl.h).
 *
 * In a decode graph each kernel waits for the one before it to finish, and the device then
 * takes a few microseconds to start the next: its blocks placed, its prologue run. A token
 * of Qwen3-30B-A3B's 12 blocks is ~130 kernels, so those gaps are a large part of a token
 * that takes 1.5 ms (docs/perf/engine.md). With a programmatic edge between two kernel
 * nodes (gpu_graph.c), a compute capability 9.0 device may start the second while the first
 * finishes, once every block of the first has executed griddepcontrol.launch_dependents;
 * the second's griddepcontrol.wait then holds it until the first has completed and its
 * writes are visible. Both are put at the start of every kernel: no kernel reads or
 * writes anything before the one before it is done, as without the edge, so no kernel
 * needs to know which of its inputs its predecessor wrote, and only the launch overlaps.
 * A kernel launched without such an edge passes the wait at once.
 *
 * The kernels are compiled once, for compute_75 (compute_80 for the tensor-core modules),
 * which has no griddepcontrol; compiling every module a second time for compute_90 would
 * double the PTX build (CMakeLists.txt, docs/perf/tests.md). The instructions are instead
 * added to the text here, where the module is loaded for a device that has them: nvcc
 * writes each kernel as `.entry name(params)`, its body's `{` on a line of its own, then
 * its declarations, then its first instruction, before which they go.
 */
#include "engine/compute/ptx_pdl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PDL_TEXT "\tgriddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;\n"
#define PDL_SM 90

/* The line after the one at p (the text's end after its last line). */
static const char *next_line(const char *p)
{
    const char *e = strchr(p, '\n');
    return e ? e + 1 : p + strlen(p);
}

static const char *skip_blanks(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static int starts(const char *p, const char *word)
{
    return strncmp(p, word, strlen(word)) == 0;
}

/* Whether the line at p starts a function: a kernel (`.entry`, maybe `.visible` or `.weak`)
 * into *kernel, or a device function (`.func`). */
static int is_function(const char *p, int *kernel)
{
    p = skip_blanks(p);
    if (starts(p, ".visible") || starts(p, ".weak") || starts(p, ".extern"))
        p = skip_blanks(p + strcspn(p, " \t\n"));
    *kernel = starts(p, ".entry") && (p[6] == ' ' || p[6] == '\t');
    return *kernel || (starts(p, ".func") && (p[5] == ' ' || p[5] == '\t'));
}

/* Whether the line at p belongs to a body's head: a declaration, a comment, a blank line. */
static int is_head(const char *p)
{
    p = skip_blanks(p);
    return *p == '\n' || starts(p, ".reg") || starts(p, ".local") || starts(p, ".shared") ||
           starts(p, ".param") || starts(p, "//");
}

/* Where in the kernel whose `.entry` line is at p the instructions go (the start of its
 * first line that is not the body's head), or NULL where it has no body before the next
 * function or the text's end. */
static const char *first_instruction(const char *p)
{
    int kernel;
    for (p = next_line(p); *p; p = next_line(p)) {
        if (is_function(p, &kernel))
            return NULL;
        const char *q = skip_blanks(p);
        if (q[0] == '{' && *skip_blanks(q + 1) == '\n')
            break;
    }
    if (!*p)
        return NULL;
    for (p = next_line(p); *p && is_head(p); p = next_line(p))
        ;
    return *p ? p : NULL;
}

/* The text's PTX ISA version (`.version M.N`) as 10 M + N, or -1. */
static int isa_version(const char *ptx)
{
    const char *v = strstr(ptx, ".version");
    int major, minor;
    if (!v || sscanf(v, ".version %d.%d", &major, &minor) != 2)
        return -1;
    return 10 * major + minor;
}

mvm_status mvm_ptx_pdl(const char *ptx, char **out, size_t *entries)
{
    *out = NULL, *entries = 0;
    const int isa = isa_version(ptx);
    if (isa < 78)
        return mvm_fail(MVM_ERR_INVALID, "PTX for MOEVM_PDL: %s (griddepcontrol needs 7.8)",
                        isa < 0 ? "no .version" : "a PTX ISA older than 7.8");
    const char *target = strstr(ptx, ".target sm_");
    if (!target)
        return mvm_fail(MVM_ERR_INVALID, "PTX for MOEVM_PDL: no .target sm_NN");
    const char *arch = target + strlen(".target sm_");
    char *arch_end;
    const long sm = strtol(arch, &arch_end, 10);
    if (arch_end == arch)
        return mvm_fail(MVM_ERR_INVALID, "PTX for MOEVM_PDL: no .target sm_NN");
    size_t n = 0;
    int kernel;
    for (const char *p = ptx; *p; p = next_line(p))
        n += is_function(p, &kernel) && kernel;
    const size_t len = strlen(ptx), size = len + n * strlen(PDL_TEXT) + 16;
    char *o = malloc(size);
    if (!o)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a PTX module's copy (MOEVM_PDL)");
    /* the text up to the target's number, sm_90 where it was lower, then kernel by kernel */
    size_t at = (size_t)(arch - ptx);
    const char *from = arch;
    memcpy(o, ptx, at);
    if (sm < PDL_SM) {
        at += (size_t)snprintf(o + at, size - at, "%d", PDL_SM);
        from = arch_end;
    }
    for (const char *p = from; *p; p = next_line(p)) {
        if (!is_function(p, &kernel) || !kernel)
            continue;
        const char *ins = first_instruction(p);
        if (!ins) {
            free(o);
            const char *name = skip_blanks(p);
            return mvm_fail(MVM_ERR_INVALID, "PTX for MOEVM_PDL: a kernel without a body "
                            "(%.*s)", (int)strcspn(name, "(\n"), name);
        }
        memcpy(o + at, from, (size_t)(ins - from));
        at += (size_t)(ins - from);
        memcpy(o + at, PDL_TEXT, strlen(PDL_TEXT));
        at += strlen(PDL_TEXT);
        from = p = ins;
        (*entries)++;
    }
    memcpy(o + at, from, strlen(from) + 1);
    *out = o;
    return MVM_OK;
}
