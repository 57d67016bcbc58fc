/*
 * `moevm calibrate`: measures the cost model's rates on this machine with a model
 * (tools/calibrate.h says what and how) and writes a cost file (docs/cost-format.md) for
 * `moevm run --cost`, `moevm sim --cost` or MOEVM_COST. What it cannot measure keeps the
 * --base preset's value; the table it prints says which is which.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/forward/forward.h"
#include "engine/plan/plan.h"
#include "policy/cost_load.h"
#include "tools/calibrate.h"
#include "tools/cli.h"

struct cal_args {
    const char *model, *out, *base, *name, *budget;
    uint32_t threads, tokens;
    float time;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moevm calibrate -m MODEL.gguf [-o FILE.json] [--base PRESET|FILE.json]\n"
            "                       [--name NAME] [-t THREADS] [--tokens N] [--time S]\n"
            "                       [--gpu-budget SIZE|PCT]\n"
            "  measures the cost model's rates as the engine achieves them here, with this\n"
            "  model (its weight type and shape): CPU experts on the engine's threads, and on\n"
            "  a device backend the expert copies and the experts on the GPU; the rest keep\n"
            "  --base's values\n"
            "  -m, --model   the model the runs will use\n"
            "  -o, --output  the cost file to write (default: standard output)\n"
            "  --base        preset or cost file for what is not measured (default MOEVM_COST)\n"
            "  --name        the machine's name in the file (default: the host name)\n"
            "  -t, --threads threads (default as `moevm run`: MOEVM_THREADS, else the cores\n"
            "                near the GPU): calibrate with those the runs will use\n"
            "  --tokens      the most tokens per expert timed (default 32)\n"
            "  --time        seconds per measured point (default 0.25)\n"
            "  --gpu-budget  device budget (default MOEVM_GPU_BUDGET); one expert must fit\n"
            "A figure outside what machines give (CPU memory above 2000 GB/s, say) is written\n"
            "but warned about on stderr: measure again before the policies plan with it.\n");
}

static int parse_args(int argc, char **argv, struct cal_args *a)
{
    enum { O_MODEL = 1, O_OUT, O_BASE, O_NAME, O_BUDGET, O_THREADS, O_TOKENS, O_TIME };
    static const mvm_cli_opt opts[] = {
        {"model", 'm', 1, O_MODEL},     {"output", 'o', 1, O_OUT},
        {"base", 0, 1, O_BASE},         {"name", 0, 1, O_NAME},
        {"gpu-budget", 0, 1, O_BUDGET}, {"threads", 't', 1, O_THREADS},
        {"tokens", 0, 1, O_TOKENS},     {"time", 0, 1, O_TIME},
        {0}};
    *a = (struct cal_args){.tokens = 32, .time = 0.25f};
    mvm_cli_iter it = {.cmd = "calibrate", .usage = usage, .opts = opts, .argc = argc,
                       .argv = argv};
    int next;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION) {
        const char *f = it.flag, *v = it.value;
        int bad = 0;
        switch (it.id) {
        case O_MODEL: a->model = v; break;
        case O_OUT: a->out = v; break;
        case O_BASE: a->base = v; break;
        case O_NAME: a->name = v; break;
        case O_BUDGET: a->budget = v; break;
        case O_THREADS: bad = mvm_cli_u32("calibrate", f, v, 1, 1024, &a->threads); break;
        case O_TOKENS: bad = mvm_cli_u32("calibrate", f, v, 2, 1024, &a->tokens); break;
        case O_TIME: bad = mvm_cli_float("calibrate", f, v, 0.001, 60, &a->time); break;
        }
        if (bad)
            return 2;
    }
    if (next != MVM_CLI_END)
        return next;
    if (mvm_cli_need_model("calibrate", a->model)) /* the model you will run */
        return 2;
    if (a->name && (!a->name[0] || strlen(a->name) >= sizeof((mvm_machine *)0)->name)) {
        fprintf(stderr, "moevm calibrate: --name: 1 to %zu characters\n",
                sizeof((mvm_machine *)0)->name - 1);
        return 2;
    }
    return -1;
}

/* The figures, in the file's units, and whether they were measured. */
static void print_table(const mvm_machine *m, const mvm_machine *base, const char *base_name)
{
    for (size_t i = 0; i < mvm_calib_n_figures; i++) {
        const mvm_calib_figure *f = &mvm_calib_figures[i];
        double v = *(const double *)((const char *)m + f->off);
        double b = *(const double *)((const char *)base + f->off);
        fprintf(stderr, "  %-11s %12.4g %-8s %s\n", f->key, v * f->scale, f->unit,
                v == b ? "(base)" : "measured");
    }
    fprintf(stderr, "  the zero-copy, host-time and network rates: %s's\n", base_name);
}

static int write_file(const struct cal_args *a, const mvm_machine *m, const char *base)
{
    char text[4096];
    int n = mvm_machine_format_json(m, base, text, sizeof text);
    if (n < 0 || (size_t)n >= sizeof text) {
        fprintf(stderr, "moevm calibrate: the cost file does not fit its buffer\n");
        return 1;
    }
    if (!a->out) {
        fputs(text, stdout);
        return 0;
    }
    FILE *f = fopen(a->out, "w");
    int bad = !f || fputs(text, f) == EOF;
    if (f)
        bad |= fclose(f) != 0;
    if (bad) {
        fprintf(stderr, "moevm calibrate: %s: %s\n", a->out, strerror(errno));
        return 1;
    }
    fprintf(stderr, "wrote %s: use it with `moevm run --cost %s` or MOEVM_COST=%s\n", a->out,
            a->out, a->out);
    return 0;
}

/* The points and the fit of one side ("cpu", "gpu"), the fit's line left open. */
static void print_points(const char *side, const char *what, const mvm_calib_experts *c)
{
    for (uint32_t i = 0; i < c->n_points; i++)
        fprintf(stderr, "%s: %s, %3.0f tokens: %10.1f us (median of %u)\n", side, what,
                c->tokens[i], c->seconds[i] * 1e6, c->reps[i]);
    fprintf(stderr, "%s: t(n) = %.1f us + %.2f us x n (within %.0f%%)", side, c->fit.a * 1e6,
            c->fit.b * 1e6, c->fit.max_rel * 100);
}

/* Measures into *m (which holds the base): 0 or 1 after a one-line error. */
static int measure(const struct cal_args *a, mvm_model *model, mvm_pool *pool, mvm_machine *m)
{
    const mvm_hparams *hp = &model->hp;
    mvm_space_info info;
    mvm_space_get_info(model->space, &info);
    double total = (double)model->expert_bytes * hp->n_layer * hp->n_expert;
    fprintf(stderr, "calibrating with %s: %u x %u experts of %.2f MiB, %d threads, %s backend\n",
            a->model, hp->n_layer, hp->n_expert, (double)model->expert_bytes / 1048576.0,
            mvm_pool_size(pool), info.backend);
    if (total < 256.0 * 1048576.0)
        fprintf(stderr, "moevm calibrate: note: the experts (%.0f MiB in all) may stay in the "
                "CPU caches: the CPU rates are those of warm caches (calibrate with the model "
                "you run)\n", total / 1048576.0);
    mvm_calib_experts cpu;
    if (mvm_calib_cpu_experts(model, pool, a->tokens, a->time, &cpu) != MVM_OK)
        return mvm_cli_error("calibrate", NULL);
    print_points("cpu", "one expert", &cpu);
    fprintf(stderr, "; fork/join %.1f us\n", cpu.floor_s * 1e6);
    mvm_calib_apply_cpu(m, &cpu, model->expert_bytes, hp->n_embd, hp->n_ff_exp);
    if (strcmp(info.backend, "host") == 0) {
        fprintf(stderr, "copies: not measured (the host backend has no device)\n");
        return 0;
    }
    mvm_calib_copy cp;
    if (mvm_calib_copies(model->space, a->time, &cp) != MVM_OK)
        return mvm_cli_error("calibrate", NULL);
    fprintf(stderr, "copies: %u page(s) %.1f us, %u pages %.1f us\n", cp.pages_small,
            cp.t_small * 1e6, cp.pages_full, cp.t_full * 1e6);
    if (mvm_calib_apply_copy(m, &cp)) {
        /* a small expert's copy is mostly its fixed cost: an idle machine can time it no
         * longer than one page's (tests/test_cli.sh: 12 pages of 4 KiB, a third of the
         * time), so the message names both causes */
        fprintf(stderr, "moevm calibrate: a whole expert's copy (%u pages, %.0f KiB) took no "
                "longer than one page's (%.1f us against %.1f us): too few bytes to time apart "
                "from a copy's fixed cost, or a machine too busy to measure; calibrate with "
                "the model you run, or try a longer --time\n", cp.pages_full,
                (double)cp.bytes_full / 1024.0, cp.t_full * 1e6, cp.t_small * 1e6);
        return 1;
    }
    if (!mvm_ctx_device_available()) {
        fprintf(stderr, "gpu: not measured (this build has no device kernels)\n");
        return 0;
    }
    mvm_calib_experts gpu;
    mvm_status st = mvm_calib_gpu_experts(model, pool, a->tokens, a->time, m->gpu_launch, &gpu);
    if (st == MVM_ERR_INVALID) { /* a line that did not rise: what else was measured stands */
        fprintf(stderr, "gpu: not measured (%s): the base's GPU rates are kept\n",
                mvm_last_error());
    } else if (st != MVM_OK) {
        return mvm_cli_error("calibrate", NULL);
    } else {
        print_points("gpu", "one more expert in a step's launch", &gpu);
        if (gpu.fit.b == 0)
            fprintf(stderr, "; flat: the times did not rise from 1 to %u tokens (the "
                    "expert's bytes bound it), gpu_flops is the base's", a->tokens);
        fputc('\n', stderr);
        mvm_calib_apply_gpu(m, &gpu, model->expert_bytes, hp->n_embd, hp->n_ff_exp);
    }
    double t_token;
    st = mvm_calib_gpu_token(model, pool, a->time, &t_token);
    if (st == MVM_ERR_NOSPACE) {
        fprintf(stderr, "attention: not measured (%s)\n", mvm_last_error());
        return 0;
    }
    if (st != MVM_OK)
        return mvm_cli_error("calibrate", NULL);
    if (mvm_calib_apply_token(m, t_token, hp, model->expert_bytes))
        fprintf(stderr, "attention: not measured: a decode token (%.1f us) took no longer "
                "than the cost model's experts in it\n", t_token * 1e6);
    else
        fprintf(stderr, "token: %.1f us, every expert resident; attention and the rest %.1f us "
                "a layer\n", t_token * 1e6, m->attn_time * 1e6);
    return 0;
}

int mvm_cmd_calibrate(int argc, char **argv)
{
    struct cal_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    mvm_machine base, m;
    if (mvm_machine_load(a.base, "--base", &base) != MVM_OK)
        return mvm_cli_error("calibrate", NULL);
    /* A file's base is its own "base" field's preset, not written back; presets stand for
     * themselves. */
    const char *base_name = mvm_machine_preset(base.name) ? base.name : "h100";
    mvm_space_desc desc;
    if ((rc = mvm_cli_space_desc("calibrate", "--gpu-budget", a.budget, &desc)) != 0)
        return rc;
    mvm_pool *pool = NULL;
    mvm_model *model = NULL;
    if ((rc = mvm_cli_threads("calibrate", a.threads, &pool)) != 0)
        return rc;
    /* its moves are what it measures: the experts in pages, never packed */
    const mvm_load_args load = {.desc = &desc, .ctx = {.keep_pages = 1}, .pool = pool,
                                .progress = mvm_cli_progress, .progress_ctx = "loading"};
    if (mvm_model_load(a.model, &load, &model) != MVM_OK)
        rc = mvm_cli_error("calibrate", "loading the model");
    m = base;
    if (!rc)
        rc = measure(&a, model, pool, &m);
    if (!rc) {
        if (a.name)
            snprintf(m.name, sizeof m.name, "%s", a.name);
        else if (gethostname(m.name, sizeof m.name - 1) != 0 || !m.name[0])
            snprintf(m.name, sizeof m.name, "calibrated");
        m.name[sizeof m.name - 1] = '\0';
        print_table(&m, &base, base.name);
        mvm_calib_warn_implausible(&m, (uint32_t)mvm_pool_size(pool), stderr);
        rc = write_file(&a, &m, base_name);
    }
    mvm_model_free(model);
    mvm_pool_destroy(pool);
    return rc;
}
