/*
 * The cost model every policy and the simulator share (docs/policies.md, docs/cost-format.md).
 * A machine is described by a few rates; per expert of a model shape they give the papers'
 * linear models:
 *
 *   t_load        = load_setup + expert_bytes / pcie_bw            (flat in tokens)
 *   t_gpu(n)      = g0 + g1·n,  g0 = gpu_launch + expert_bytes / gpu_mem_bw,
 *                               g1 = flops_per_token / gpu_flops
 *   t_zerocopy(n) = gpu_launch + expert_bytes / zerocopy_bw + g1·n
 *   t_cpu(n)      = c0 + c1·n,  c0 = cpu_setup + expert_bytes / cpu_mem_bw,
 *                               c1 = flops_per_token / cpu_flops
 *   t_net(n)      = net_rtt + 2·n·n_embd·act_bytes / net_bw        (Prism's remote call)
 *
 * with flops_per_token = 2·3·n_embd·n_ff (SwiGLU: gate, up, down). Attention and the rest
 * of a layer are `attn_time` per token on the GPU (a constant of the machine and model size,
 * given per 1e9 parameters of attention... kept simple: seconds per token per layer).
 *
 * Cost files are JSON objects with these field names (rates in GB/s, GFLOP/s; times in µs)
 * — see docs/cost-format.md; presets exist for the papers' machines.
 */
#ifndef MVM_POLICY_COST_H
#define MVM_POLICY_COST_H

#include <stddef.h>
#include <stdint.h>

#include "moevm/moevm.h"

typedef struct mvm_machine {
    char name[64];
    double pcie_bw;          /* host-to-device copy bandwidth achieved, bytes/s */
    double load_setup;       /* per copy, s */
    double zerocopy_bw;      /* GPU reading host memory in place, bytes/s */
    double gpu_mem_bw;       /* bytes/s */
    double gpu_flops;        /* sustained for small-batch expert GEMMs, FLOP/s */
    double gpu_launch;       /* per expert kernel sequence, s */
    double cpu_mem_bw;       /* of the CPU threads given to experts, bytes/s */
    double cpu_flops;        /* FLOP/s of those threads */
    double cpu_setup;        /* per CPU expert task, s */
    double attn_time;        /* per token per layer: attention and everything not experts, s */
    double host_step;        /* per MoE layer step the host routes: the router's output down,
                                routing, the policies, the step's requests and launches, s,
                                while the device waits and the copy engine may work (0: none,
                                the presets': the papers model no host) */
    double host_queue;       /* of host_step, its last part: the step's launches, queued after
                                its loads were asked, s; the copy engine and the device begin
                                on them meanwhile (0: none, the presets') */
    double host_token;       /* per decode token routed on the device at a budget: between
                                tokens, the host's replay of the token before, its loads and
                                (read-through) landings and pool, s, while the device waits
                                (0: none, the presets') */
    double net_rtt;          /* between servers (distributed), s */
    double net_bw;           /* bytes/s */
    uint64_t gpu_memory;     /* bytes, informational */
} mvm_machine;

/* Per-expert costs of one model shape on one machine. */
typedef struct mvm_cost {
    mvm_machine m;
    uint64_t expert_bytes;
    uint32_t n_embd, n_ff;
    double t_load, g0, g1, c0, c1, zc0;
} mvm_cost;

/* Fills c from a machine and a model shape. */
void mvm_cost_init(mvm_cost *c, const mvm_machine *m, uint64_t expert_bytes, uint32_t n_embd,
                   uint32_t n_ff);
double mvm_cost_gpu(const mvm_cost *c, uint32_t n_tokens);
double mvm_cost_cpu(const mvm_cost *c, uint32_t n_tokens);
double mvm_cost_zerocopy(const mvm_cost *c, uint32_t n_tokens);
/* Seconds to load `bytes` of an expert (a page prefix or the rest); 0 for 0 bytes (no copy
 * is issued). */
double mvm_cost_load_bytes(const mvm_cost *c, uint64_t bytes);
/* t_net above; +INFINITY when the machine has no network (net_bw == 0). */
double mvm_cost_net(const mvm_cost *c, uint32_t n_tokens, uint32_t act_bytes);

/* Presets: "rtx3090", "a6000", "a100", "h100" (the papers' machines; docs/cost-format.md
 * gives the sources). NULL for an unknown name. */
const mvm_machine *mvm_machine_preset(const char *name);
/* "rtx3090, a6000, a100, h100" */
const char *mvm_machine_preset_names(void);

/* Parses a cost file's JSON text (fields as mvm_machine, in the units of
 * docs/cost-format.md; missing fields take the `base` preset's values, "base": "h100" by
 * default, the name included). MVM_ERR_INVALID naming the field for a malformed or
 * non-positive value, an unknown or repeated field; `what` (the file name) starts every
 * message; *out is written only on success. This is I/O-free: the caller reads the file. */
mvm_status mvm_machine_parse_json(const char *text, const char *what, mvm_machine *out);
/* The inverse: m as a cost file naming preset `base` (NULL: "h100"), every field spelled
 * out, into buf (snprintf's rules: returns the length it needs; -1 on an encoding error or
 * out of memory). */
int mvm_machine_format_json(const mvm_machine *m, const char *base, char *buf, size_t cap);

#endif
