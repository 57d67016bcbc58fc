/*
 * `moevm calibrate`'s measurements (docs/cost-format.md): the cost model's rates
 * (policy/cost.h) as this engine achieves them on this machine, with a given model.
 *
 * What is measured, and how it becomes a machine's rates:
 *  - CPU experts: one expert of `tokens` rows, computed by the engine's own CPU expert code
 *    (experts_cpu.c) from its host home on the engine's threads, for 1, 2, 4, ... tokens;
 *    each repetition takes another (layer, expert), so a model larger than the caches is
 *    read from DRAM as in a run. A least-squares line through the medians gives
 *    t_cpu(n) = c0 + c1·n (c0 no less than the fork/join). cpu_flops = flops_per_token
 *    / c1; cpu_setup = the pool's fork/join (at most c0/2); cpu_mem_bw = expert_bytes /
 *    (c0 − cpu_setup). So the cost model gives back the measured line exactly, for this
 *    model's weight type: the rates are effective ones (a kernel compute-bound at one
 *    token has a small c0, hence a cpu_mem_bw above the DRAM's).
 *  - Copies (a device backend): the time to make a one-page prefix and a whole expert
 *    resident from nothing, through the space (claim, copy, map), medians over experts.
 *    The two points give load_setup + bytes / pcie_bw.
 *  - GPU experts (a context computing on the device): what one more resident expert of
 *    `tokens` rows adds to a step's launch through the engine's own kernels
 *    (mvm_ctx_time_experts: the input's quantization, the gate/up and down kernels,
 *    launched and finished), for 1, 2, 4, ... tokens: k experts (the model's top-k, at
 *    most MVM_CALIB_GPU_GROUP) in one launch less the first alone, over k − 1, each
 *    repetition the next k of every layer's experts in turn; t_gpu(n) = g0 + g1·n by least
 *    squares, or, where the times do not rise (on an H200 one more Qwen3-30B-A3B expert
 *    took 2.5 µs at 1 token and 1.5 at 32: the expert's bytes bound the kernels at these
 *    token counts, and the work per token is below what the points resolve), the flat line
 *    g0 = their median, g1 = 0 (mvm_calib_fit_flat). The engine launches a step's experts
 *    together (in decode, inside one graph), so a lone expert's time, its launches and
 *    sync included, would charge each expert what the step pays once (an estimate, not
 *    measured: at ~16 µs or more a lone expert, a Qwen3 token's 96 experts would take
 *    more than the H200's whole 1.49 ms token). The
 *    step's own launch is left to attn_time. gpu_flops = flops_per_token / g1; gpu_launch
 *    = the base's, at most g0/2 (launch and reading the expert are not told apart by one
 *    line); gpu_mem_bw = expert_bytes / (g0 − gpu_launch); a flat line keeps the base's
 *    gpu_flops.
 *  - A decode token (a context computing on the device, the budget holding every expert):
 *    one token at a fixed position after a prompt, every expert resident, its logits read
 *    back. attn_time = what the cost model's experts leave of it (n_layer · top-k ·
 *    t_gpu(1), with the rates above), a MoE layer's share: attention and everything else
 *    that is not the experts (the step's launch, the dense blocks, the output), as the
 *    simulator charges it per layer. A budget below every expert leaves it unmeasured.
 *  - Not measured (they keep the base preset's values): zero-copy reads, the host's time
 *    (host_step, host_queue, host_token) and the network.
 */
#ifndef MVM_TOOLS_CALIBRATE_H
#define MVM_TOOLS_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/compute/pool.h"
#include "engine/model/model.h"
#include "policy/cost.h"

/* y = a + b·x by least squares over n >= 2 points with distinct x; max_rel: the largest
 * |residual| / y. -1 (out untouched) for fewer than two distinct x. */
typedef struct mvm_line {
    double a, b, max_rel;
} mvm_line;
int mvm_fit_line(const double *x, const double *y, size_t n, mvm_line *out);
/* The median of v[0..n), n >= 1 (v is sorted in place). */
double mvm_median(double *v, size_t n);

#define MVM_CALIB_MAX_POINTS 12
/* The most experts a GPU point launches together (the model's top-k if fewer). */
#define MVM_CALIB_GPU_GROUP 8

/* One expert's time against its tokens, on the CPU or the GPU. */
typedef struct mvm_calib_experts {
    uint32_t n_points;
    double tokens[MVM_CALIB_MAX_POINTS];  /* 1, 2, 4, ... */
    double seconds[MVM_CALIB_MAX_POINTS]; /* median time of one expert at that many tokens */
    uint32_t reps[MVM_CALIB_MAX_POINTS];  /* repetitions behind each median */
    mvm_line fit;                         /* seconds = a + b·tokens (mvm_calib_fit) */
    double floor_s; /* the least an expert costs: the CPU pool's fork/join (median), the
                       GPU's launch */
} mvm_calib_experts;

/* c->fit from c's points: the least-squares line, its intercept held at floor_s (at least
 * 1 ns) where it would fall below, an expert task costing at least that. -1 when the slope
 * is not positive (the times did not grow with the tokens) or the points are fewer than
 * two. */
int mvm_calib_fit(mvm_calib_experts *c);
/* c->fit as the flat line through c's points: a their median (at least floor_s, and 1 ns),
 * b 0, for a side whose experts are bound by their bytes at every point measured (the
 * GPU's). -1 for no points. */
int mvm_calib_fit_flat(mvm_calib_experts *c);

/* Times the model's experts on the CPU threads at 1, 2, 4, ... up to max_tokens (a power
 * of two or not: the last point is max_tokens), repeating each point for at least
 * seconds_per_point and 3 times, and fits them (mvm_calib_fit). MVM_ERR_INVALID when
 * the fit fails (a machine too busy to calibrate). */
mvm_status mvm_calib_cpu_experts(mvm_model *m, mvm_pool *pool, uint32_t max_tokens,
                                 double seconds_per_point, mvm_calib_experts *out);

/* The same on the device (the time one more expert adds to a step's launch, the header
 * says how), through a context of at most max_tokens per batch on m (whose space must be a
 * cuda one; the experts are made resident, timed and evicted, so the space should be
 * empty, as mvm_calib_copies leaves it). launch: the least a lone expert costs there (the
 * base's gpu_launch), the fit's floor_s where the model routes a token to one expert; one
 * more expert of a step's launch has no floor but 1 ns. Times that do not rise with the
 * tokens, measured twice, give the flat line (mvm_calib_fit_flat). MVM_ERR_UNSUPPORTED in
 * a build without the device kernels. */
mvm_status mvm_calib_gpu_experts(mvm_model *m, mvm_pool *pool, uint32_t max_tokens,
                                 double seconds_per_point, double launch,
                                 mvm_calib_experts *out);

/* The median time of one decode token on the device (a context on m, whose space must be a
 * cuda one), every expert made resident first: at position 32, after a prompt, its logits
 * read back. MVM_ERR_NOSPACE when the budget cannot hold every expert or experts moved
 * while it was timed; MVM_ERR_UNSUPPORTED in a build without the device kernels. */
mvm_status mvm_calib_gpu_token(mvm_model *m, mvm_pool *pool, double seconds_per_point,
                               double *seconds);
/* m's attn_time from a decode token's time (the header says how); -1 (m untouched) when
 * the cost model's experts take the whole token or more. */
int mvm_calib_apply_token(mvm_machine *m, double t_token, const mvm_hparams *hp,
                          uint64_t expert_bytes);

typedef struct mvm_calib_copy {
    uint32_t pages_small, pages_full;  /* 1 page; the whole expert (may equal) */
    uint64_t bytes_small, bytes_full;
    double t_small, t_full;            /* median seconds to make that prefix resident */
} mvm_calib_copy;

/* Times making expert prefixes resident in the model's space from nothing, evicting after
 * each; evicts every expert first. MVM_ERR_NOSPACE when the budget holds less than one
 * expert. */
mvm_status mvm_calib_copies(mvm_space *space, double seconds_per_point, mvm_calib_copy *out);

/* m's cpu_setup, cpu_mem_bw and cpu_flops from a CPU measurement, for experts of
 * expert_bytes and the shape n_embd × n_ff: mvm_cost_init then gives c0 and c1 of the fit.
 * -1 (m untouched) when the fit has c0 <= 0 or c1 <= 0. */
int mvm_calib_apply_cpu(mvm_machine *m, const mvm_calib_experts *c, uint64_t expert_bytes,
                        uint32_t n_embd, uint32_t n_ff);
/* m's gpu_launch, gpu_mem_bw and gpu_flops from a GPU measurement (the header says how):
 * mvm_cost_init then gives the fit's g0 and g1; a flat fit (g1 0) keeps gpu_flops, and
 * g0 plus the base's work per token comes back. -1 (m untouched) when g0 <= 0 or g1 < 0. */
int mvm_calib_apply_gpu(mvm_machine *m, const mvm_calib_experts *c, uint64_t expert_bytes,
                        uint32_t n_embd, uint32_t n_ff);
/* m's load_setup and pcie_bw from a copy measurement: mvm_cost_load_bytes then gives both
 * measured times when the line through them has a positive intercept (else a setup of 1%
 * of the page's time and the whole expert's time); with one point (a one-page expert),
 * the base's load_setup if under half of it, and the expert's time. -1 (m untouched) when
 * the times do not grow with the bytes. */
int mvm_calib_apply_copy(mvm_machine *m, const mvm_calib_copy *c);

/* The figures calibrate reports, in a cost file's units (docs/cost-format.md), each with
 * the range real machines span (per thread where per_thread: the threads' sum). A figure
 * outside it is a measurement gone wrong — a busy machine, experts small enough to stay in
 * the CPU caches (one calibration reported 125,337 GB/s of CPU memory bandwidth) — and a
 * cost file holding it would mislead the policies that plan with it. */
typedef struct mvm_calib_figure {
    const char *key, *unit;
    size_t off;         /* the mvm_machine field, a double */
    double scale;       /* field -> unit */
    double lo, hi;      /* plausible, in unit */
    int per_thread;
} mvm_calib_figure;
extern const mvm_calib_figure mvm_calib_figures[];
extern const size_t mvm_calib_n_figures;

/* One line on `out` for each of m's figures outside its range, for `threads` CPU threads:
 * "moevm calibrate: warning: cpu_mem_bw is 1.253e+05 GB/s, outside the plausible 0.1 to
 * 2000 GB/s: ..."; how many. */
uint32_t mvm_calib_warn_implausible(const mvm_machine *m, uint32_t threads, FILE *out);

#endif
