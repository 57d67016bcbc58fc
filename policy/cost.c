/*
 * The shared cost model (cost.h): per-expert linear costs from a machine's rates, the
 * papers' machines as presets, and cost files (JSON, docs/cost-format.md).
 *
 * Preset numbers and where each comes from (the same table, with links, is in
 * docs/cost-format.md; "est." marks an engineering estimate that `moevm calibrate` replaces
 * with a measurement on the real machine):
 *
 *  pcie_bw      PCIe 4.0 x16 = 31.5 GB/s per direction (16 GT/s x 16 lanes, 128b/130b) and
 *               PCIe 5.0 x16 = 63.0 GB/s, times the 79% utilisation PreScope (§2.3)
 *               reached with pinned memory and async copies: 25 and 50 GB/s. 25 GB/s is
 *               also the effective PCIe 4 x16 rate commonly measured (it reproduces
 *               PreScope's 14 ms Mixtral expert prefetch on the A100) and nvbandwidth's A100
 *               host-to-device figure.
 *  load_setup   10 µs per copy: issue plus completion event of an async copy (est.).
 *  zerocopy_bw  H100: 35 GB/s, nvbandwidth's SM-driven host-to-device read
 *               (NVIDIA/nvbandwidth#24). PCIe 4 machines: the same ratio of SM reads to
 *               copy-engine copies (35.2 / 57 = 0.62) times 25 GB/s = 15.4 GB/s (derived).
 *  gpu_mem_bw   datasheets: RTX 3090 936 GB/s, RTX A6000 768 GB/s, A100 80 GB SXM 2039
 *               GB/s, H100 SXM5 3350 GB/s.
 *  gpu_flops    half the datasheet's dense BF16 tensor peak (RTX 3090 71 TFLOP/s with FP32
 *               accumulate, GA102 whitepaper; RTX A6000 154.8; A100 312; H100 SXM5 989):
 *               small-batch expert GEMMs do not reach the peak (est.).
 *  gpu_launch   15 µs per expert: about three kernels (gate+up, activation, down) of ~5 µs
 *               launch-to-completion at decode sizes (est.).
 *  cpu_*        the host of each paper's setup, 16 cores given to experts (DALI's count,
 *               DALI §6.1; the device machine of this project has 16 too):
 *                 rtx3090  DALI's AMD EPYC 7532 (Zen 2, 2.4 GHz, 8 x DDR4-3200 = 204.8 GB/s)
 *                 a6000    MoEpic's Intel Xeon Platinum 8358P (Ice Lake, 2.6 GHz, 8 x DDR4-3200)
 *                 a100     PreScope's Intel Xeon Gold 6230R (Cascade Lake, 2.1 GHz,
 *                          6 x DDR4-2933 = 140.8 GB/s)
 *                 h100     a DGX H100-class Intel Xeon Platinum 8480+ (Sapphire Rapids,
 *                          2.0 GHz, 8 x DDR5-4800 = 307.2 GB/s)
 *               cpu_mem_bw = min(60% of the socket's DRAM peak (est.), 16 x 10.7 GB/s — the
 *               single-thread read rate measured on a Xeon in docs/perf/cpu.md).
 *               cpu_flops = 16 cores x base clock x FP32 FLOP/cycle (32 for Zen 2's two
 *               256-bit FMAs, 64 for two 512-bit FMAs) x 25%. The 25% is fitted to PreScope's
 *               measurement (PreScope, Fig. 13) that the CPU beats load-then-GPU below about
 *               16 tokens per Qwen3-30B-A3B expert on its A100 + 6230R host: the a100 preset
 *               gives 16.3 (tests/test_cost.c checks it).
 *  cpu_setup    10 µs per CPU expert task: a 16-thread fork/join plus the engine's per-expert
 *               bookkeeping (a few µs, docs/perf/cpu.md) (est.).
 *  attn_time    one layer of a Qwen3-30B-A3B-sized attention at decode: its 37.75 MB of BF16
 *               weights read at gpu_mem_bw plus ~10 kernels of 5 µs (est.).
 *  net_*        no network (0) except a100: Prism's testbed was A100s with a 500 Mbit/s
 *               tc-limited network = 0.0625 GB/s; Prism reports no RTT, so 32 µs, the upper
 *               end of a small-message round trip (13-32 µs) measured with Open MPI over
 *               tc-shaped loopback TCP, a one-machine imitation of that setup.
 *  gpu_memory   24, 48, 80, 80 GiB.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "policy/cost.h"
#include "vmm/error.h"

/* File units (docs/cost-format.md); the presets are written in them too, so a preset and
 * its JSON file convert with the same arithmetic. */
#define GBPS 1e9    /* GB/s -> bytes/s */
#define GFLOPS 1e9  /* GFLOP/s -> FLOP/s */
#define USEC 1e-6   /* µs -> s */
#define GIB 1073741824.0

void mvm_cost_init(mvm_cost *c, const mvm_machine *m, uint64_t expert_bytes, uint32_t n_embd,
                   uint32_t n_ff)
{
    const double bytes = (double)expert_bytes;
    const double flops_per_token = 2.0 * 3.0 * n_embd * n_ff; /* SwiGLU: gate, up, down */
    c->m = *m;
    c->expert_bytes = expert_bytes;
    c->n_embd = n_embd;
    c->n_ff = n_ff;
    c->t_load = mvm_cost_load_bytes(c, expert_bytes);
    c->g0 = m->gpu_launch + bytes / m->gpu_mem_bw;
    c->g1 = flops_per_token / m->gpu_flops;
    c->c0 = m->cpu_setup + bytes / m->cpu_mem_bw;
    c->c1 = flops_per_token / m->cpu_flops;
    c->zc0 = m->gpu_launch + bytes / m->zerocopy_bw;
}

double mvm_cost_gpu(const mvm_cost *c, uint32_t n_tokens) { return c->g0 + c->g1 * n_tokens; }
double mvm_cost_cpu(const mvm_cost *c, uint32_t n_tokens) { return c->c0 + c->c1 * n_tokens; }

double mvm_cost_zerocopy(const mvm_cost *c, uint32_t n_tokens)
{
    return c->zc0 + c->g1 * n_tokens;
}

double mvm_cost_load_bytes(const mvm_cost *c, uint64_t bytes)
{
    return bytes ? c->m.load_setup + (double)bytes / c->m.pcie_bw : 0.0;
}

double mvm_cost_net(const mvm_cost *c, uint32_t n_tokens, uint32_t act_bytes)
{
    if (c->m.net_bw <= 0)
        return INFINITY;
    return c->m.net_rtt + 2.0 * n_tokens * c->n_embd * act_bytes / c->m.net_bw;
}

static const mvm_machine presets[] = {
    {.name = "rtx3090", .pcie_bw = 25 * GBPS, .load_setup = 10 * USEC,
     .zerocopy_bw = 15.4 * GBPS, .gpu_mem_bw = 936 * GBPS, .gpu_flops = 35500 * GFLOPS,
     .gpu_launch = 15 * USEC, .cpu_mem_bw = 123 * GBPS, .cpu_flops = 307.2 * GFLOPS,
     .cpu_setup = 10 * USEC, .attn_time = 90 * USEC, .net_rtt = 0, .net_bw = 0,
     .gpu_memory = 24ull << 30},
    {.name = "a6000", .pcie_bw = 25 * GBPS, .load_setup = 10 * USEC,
     .zerocopy_bw = 15.4 * GBPS, .gpu_mem_bw = 768 * GBPS, .gpu_flops = 77400 * GFLOPS,
     .gpu_launch = 15 * USEC, .cpu_mem_bw = 123 * GBPS, .cpu_flops = 665.6 * GFLOPS,
     .cpu_setup = 10 * USEC, .attn_time = 99 * USEC, .net_rtt = 0, .net_bw = 0,
     .gpu_memory = 48ull << 30},
    {.name = "a100", .pcie_bw = 25 * GBPS, .load_setup = 10 * USEC,
     .zerocopy_bw = 15.4 * GBPS, .gpu_mem_bw = 2039 * GBPS, .gpu_flops = 156000 * GFLOPS,
     .gpu_launch = 15 * USEC, .cpu_mem_bw = 84.5 * GBPS, .cpu_flops = 537.6 * GFLOPS,
     .cpu_setup = 10 * USEC, .attn_time = 69 * USEC, .net_rtt = 32 * USEC,
     .net_bw = 0.0625 * GBPS, .gpu_memory = 80ull << 30},
    {.name = "h100", .pcie_bw = 50 * GBPS, .load_setup = 10 * USEC,
     .zerocopy_bw = 35 * GBPS, .gpu_mem_bw = 3350 * GBPS, .gpu_flops = 494500 * GFLOPS,
     .gpu_launch = 15 * USEC, .cpu_mem_bw = 171 * GBPS, .cpu_flops = 512 * GFLOPS,
     .cpu_setup = 10 * USEC, .attn_time = 61 * USEC, .net_rtt = 0, .net_bw = 0,
     .gpu_memory = 80ull << 30},
};

const mvm_machine *mvm_machine_preset(const char *name)
{
    for (size_t i = 0; name && i < sizeof presets / sizeof *presets; i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

const char *mvm_machine_preset_names(void) { return "rtx3090, a6000, a100, h100"; }

/* ---- cost files ------------------------------------------------------------------------ */

/* The numeric fields of a cost file: where they go and the unit they are written in. */
static const struct field {
    const char *key;
    size_t offset;
    double unit;
    int zero_ok; /* the network fields: 0 = no network */
} fields[] = {
    {"pcie_bw", offsetof(mvm_machine, pcie_bw), GBPS, 0},
    {"load_setup", offsetof(mvm_machine, load_setup), USEC, 0},
    {"zerocopy_bw", offsetof(mvm_machine, zerocopy_bw), GBPS, 0},
    {"gpu_mem_bw", offsetof(mvm_machine, gpu_mem_bw), GBPS, 0},
    {"gpu_flops", offsetof(mvm_machine, gpu_flops), GFLOPS, 0},
    {"gpu_launch", offsetof(mvm_machine, gpu_launch), USEC, 0},
    {"cpu_mem_bw", offsetof(mvm_machine, cpu_mem_bw), GBPS, 0},
    {"cpu_flops", offsetof(mvm_machine, cpu_flops), GFLOPS, 0},
    {"cpu_setup", offsetof(mvm_machine, cpu_setup), USEC, 0},
    {"attn_time", offsetof(mvm_machine, attn_time), USEC, 0},
    {"host_step", offsetof(mvm_machine, host_step), USEC, 1},
    {"host_queue", offsetof(mvm_machine, host_queue), USEC, 1},
    {"host_token", offsetof(mvm_machine, host_token), USEC, 1},
    {"net_rtt", offsetof(mvm_machine, net_rtt), USEC, 1},
    {"net_bw", offsetof(mvm_machine, net_bw), GBPS, 1},
};
#define N_FIELDS (sizeof fields / sizeof *fields)
#define FIELD_NAMES "name, base, pcie_bw, load_setup, zerocopy_bw, gpu_mem_bw, gpu_flops, " \
                    "gpu_launch, cpu_mem_bw, cpu_flops, cpu_setup, attn_time, host_step, "   \
                    "host_queue, host_token, net_rtt, net_bw, gpu_memory"

static mvm_status syntax_error(const char *text, const char *at, const char *what)
{
    int line = 1;
    for (const char *p = text; at && p < at && *p; p++)
        line += *p == '\n';
    /* Up to 20 characters of context, never past the line: the message is one line. */
    int context = at ? (int)strcspn(at, "\r\n") : 0;
    return mvm_fail(MVM_ERR_INVALID, "%s: line %d: not valid JSON%s%.*s%s", what, line,
                    at && *at ? " near '" : " (it ends too early)", context < 20 ? context : 20,
                    at ? at : "", at && *at ? "'" : "");
}

/* The value of a numeric field in bytes/s, FLOP/s or s, checked. */
static mvm_status number(const cJSON *it, const char *what, int zero_ok, double *out)
{
    if (!cJSON_IsNumber(it))
        return mvm_fail(MVM_ERR_INVALID, "%s: field '%s' must be a number", what, it->string);
    double v = it->valuedouble;
    if (!isfinite(v) || v < 0 || (v == 0 && !zero_ok))
        return mvm_fail(MVM_ERR_INVALID, "%s: field '%s' is %g; it must be finite and %s", what,
                        it->string, v, zero_ok ? ">= 0 (0 = none)" : "> 0");
    *out = v;
    return MVM_OK;
}

static mvm_status apply_field(const cJSON *it, const char *what, mvm_machine *m)
{
    double v = 0; /* number() sets it before MVM_OK; -O3 cannot see that */
    mvm_status st;
    if (strcmp(it->string, "base") == 0)
        return MVM_OK; /* applied first, by the caller */
    if (strcmp(it->string, "name") == 0) {
        if (!cJSON_IsString(it) || !it->valuestring[0] ||
            strlen(it->valuestring) >= sizeof m->name)
            return mvm_fail(MVM_ERR_INVALID, "%s: field 'name' must be a string of 1 to %zu "
                            "characters", what, sizeof m->name - 1);
        strcpy(m->name, it->valuestring);
        return MVM_OK;
    }
    if (strcmp(it->string, "gpu_memory") == 0) {
        if ((st = number(it, what, 0, &v)) != MVM_OK)
            return st;
        if (v * GIB >= 18446744073709551616.0)
            return mvm_fail(MVM_ERR_INVALID, "%s: field 'gpu_memory' is %g GiB: too large", what,
                            v);
        m->gpu_memory = (uint64_t)llround(v * GIB);
        return MVM_OK;
    }
    for (size_t i = 0; i < N_FIELDS; i++) {
        if (strcmp(it->string, fields[i].key) != 0)
            continue;
        if ((st = number(it, what, fields[i].zero_ok, &v)) != MVM_OK)
            return st;
        *(double *)((char *)m + fields[i].offset) = v * fields[i].unit;
        return MVM_OK;
    }
    return mvm_fail(MVM_ERR_INVALID, "%s: unknown field '%s' (fields: %s)", what, it->string,
                    FIELD_NAMES);
}

static mvm_status parse_object(const cJSON *root, const char *what, mvm_machine *m)
{
    if (!cJSON_IsObject(root))
        return mvm_fail(MVM_ERR_INVALID, "%s: a cost file is one JSON object", what);
    /* A key given twice would silently lose one of its values. */
    for (const cJSON *a = root->child; a; a = a->next)
        for (const cJSON *b = root->child; b != a; b = b->next)
            if (strcmp(a->string, b->string) == 0)
                return mvm_fail(MVM_ERR_INVALID, "%s: field '%s' given twice", what, a->string);
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(root, "base");
    const char *base_name = "h100";
    if (base) {
        if (!cJSON_IsString(base))
            return mvm_fail(MVM_ERR_INVALID, "%s: field 'base' must be a preset name (%s)", what,
                            mvm_machine_preset_names());
        base_name = base->valuestring;
    }
    const mvm_machine *preset = mvm_machine_preset(base_name);
    if (!preset)
        return mvm_fail(MVM_ERR_INVALID, "%s: base '%s' is not a preset (presets: %s)", what,
                        base_name, mvm_machine_preset_names());
    *m = *preset;
    for (const cJSON *it = root->child; it; it = it->next) {
        mvm_status st = apply_field(it, what, m);
        if (st != MVM_OK)
            return st;
    }
    return MVM_OK;
}

mvm_status mvm_machine_parse_json(const char *text, const char *what, mvm_machine *out)
{
    if (!what)
        what = "cost file";
    if (!text)
        return mvm_fail(MVM_ERR_INVALID, "%s: no text", what);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root)
        return syntax_error(text, end, what);
    mvm_machine m;
    mvm_status st = parse_object(root, what, &m);
    cJSON_Delete(root);
    if (st == MVM_OK)
        *out = m;
    return st;
}

int mvm_machine_format_json(const mvm_machine *m, const char *base, char *buf, size_t cap)
{
    /* %.15g parses back to within 1e-15 relative and prints the presets' round numbers as
     * they are written (10, not 9.99999999999999). cJSON escapes the name. */
    cJSON *str = cJSON_CreateString(m->name);
    char *name = str ? cJSON_PrintUnformatted(str) : NULL;
    cJSON_Delete(str);
    if (!name)
        return -1;
    size_t n = 0;
    int w = snprintf(buf, cap, "{\n  \"name\": %s,\n  \"base\": \"%s\"", name,
                     base ? base : "h100");
    cJSON_free(name);
    for (size_t i = 0; w >= 0 && i < N_FIELDS; i++) {
        n += (size_t)w;
        double v = *(const double *)((const char *)m + fields[i].offset) / fields[i].unit;
        w = snprintf(n < cap ? buf + n : NULL, n < cap ? cap - n : 0, ",\n  \"%s\": %.15g",
                     fields[i].key, v);
    }
    if (w >= 0) {
        n += (size_t)w;
        w = snprintf(n < cap ? buf + n : NULL, n < cap ? cap - n : 0,
                     ",\n  \"gpu_memory\": %.15g\n}\n", (double)m->gpu_memory / GIB);
    }
    return w < 0 ? -1 : (int)(n + (size_t)w);
}
