/*
 * `moevm calibrate`'s measurements (tools/calibrate.h): the line fit and median against
 * values worked out by hand; the rates written from a measurement give back, through the
 * cost model (policy/cost.h), the times measured; the CPU and copy measurements on a model
 * on the host backend (their structure, never their speed); the loader of MOEVM_COST
 * (policy/cost_load.h); the warnings for figures no machine gives.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine/plan/plan.h"
#include "engine/synth/mkmodel.h"
#include "policy/cost_load.h"
#include "tools/calibrate.h"

static char dir[64];

static int near(double got, double want, double rel)
{
    return fabs(got - want) <= rel * fabs(want);
}

static void test_fit_and_median(void)
{
    /* y = 3 + 0.5x exactly, and with a residual of +-0.1 around it. */
    double x[] = {1, 2, 4, 8}, y[] = {3.5, 4, 5, 7}, yn[] = {3.6, 3.9, 5.1, 6.9};
    mvm_line l = {.a = NAN, .b = NAN, .max_rel = NAN};
    CHECK(mvm_fit_line(x, y, 4, &l) == 0);
    CHECK(near(l.a, 3, 1e-12) && near(l.b, 0.5, 1e-12) && l.max_rel < 1e-12);
    CHECK(mvm_fit_line(x, yn, 4, &l) == 0);
    /* By hand: mean x 3.75, mean y 4.875, sxx 28.75, sxy 13.875 -> b 0.4826087,
     * a 3.0652174; the largest residual at x = 2: |3.9 - 4.0304348| / 3.9 = 0.03344. */
    CHECK(near(l.b, 13.875 / 28.75, 1e-12) && near(l.a, 4.875 - 3.75 * 13.875 / 28.75, 1e-12));
    CHECK(near(l.max_rel, (4.875 + (2 - 3.75) * 13.875 / 28.75 - 3.9) / 3.9, 1e-9));
    mvm_line keep = l;
    double same[] = {2, 2, 2};
    CHECK(mvm_fit_line(same, y, 3, &l) == -1 && memcmp(&l, &keep, sizeof l) == 0);
    CHECK(mvm_fit_line(x, y, 1, &l) == -1);

    double odd[] = {5, 1, 9, 3, 7}, even[] = {4, 1, 3, 2};
    CHECK(mvm_median(odd, 5) == 5 && mvm_median(even, 4) == 2.5);
    double one[] = {42};
    CHECK(mvm_median(one, 1) == 42);
}

/* The CPU fit: free where its intercept is above the fork/join, held there below it. */
static void test_fit(void)
{
    mvm_calib_experts c = {.n_points = 4, .tokens = {1, 2, 4, 8},
                           .seconds = {12e-6, 14e-6, 18e-6, 26e-6}, .floor_s = 0.5e-6};
    CHECK(mvm_calib_fit(&c) == 0 && near(c.fit.a, 10e-6, 1e-9) && near(c.fit.b, 2e-6, 1e-9));
    /* -1 µs + 2 µs·n: held at 0.5 µs, slope sum x(y - a) / sum x^2 = 147.5 / 85 µs. */
    mvm_calib_experts d = {.n_points = 4, .tokens = {1, 2, 4, 8},
                           .seconds = {1e-6, 3e-6, 7e-6, 15e-6}, .floor_s = 0.5e-6};
    CHECK(mvm_calib_fit(&d) == 0 && d.fit.a == 0.5e-6);
    CHECK(near(d.fit.b, 147.5e-6 / 85, 1e-9));
    CHECK(near(d.fit.max_rel, fabs(1e-6 - (0.5e-6 + 147.5e-6 / 85)) / 1e-6, 1e-9));
    /* Times that fall with the tokens, or one point: no line. */
    mvm_calib_experts e = {.n_points = 3, .tokens = {1, 2, 4}, .seconds = {9e-6, 5e-6, 3e-6}};
    CHECK(mvm_calib_fit(&e) == -1);
    e.n_points = 1;
    CHECK(mvm_calib_fit(&e) == -1);
}

/* The rates from a fit reproduce it through mvm_cost_init, whatever the fork/join. */
static void test_apply_cpu(void)
{
    const uint64_t bytes = 3538944;
    const uint32_t embd = 2048, ff = 1024;
    const double pools[] = {0.4e-6, 1e-3, 0};
    for (size_t i = 0; i < 3; i++) {
        mvm_calib_experts c = {.fit = {.a = 5.5e-6, .b = 187e-6}, .floor_s = pools[i]};
        mvm_machine m = *mvm_machine_preset("a100");
        CHECK(mvm_calib_apply_cpu(&m, &c, bytes, embd, ff) == 0);
        mvm_cost cost;
        mvm_cost_init(&cost, &m, bytes, embd, ff);
        CHECK(near(mvm_cost_cpu(&cost, 1), 5.5e-6 + 187e-6, 1e-12));
        CHECK(near(mvm_cost_cpu(&cost, 32), 5.5e-6 + 32 * 187e-6, 1e-12));
        /* The fork/join is the setup when under half of c0; else half of c0. */
        CHECK(near(m.cpu_setup, i == 0 ? 0.4e-6 : 2.75e-6, 1e-12));
        /* The rest of the machine is the base's. */
        CHECK(m.pcie_bw == mvm_machine_preset("a100")->pcie_bw && !strcmp(m.name, "a100"));
    }
    mvm_machine m = *mvm_machine_preset("h100"), before = m;
    mvm_calib_experts flat = {.fit = {.a = 1e-5, .b = 0}}, neg = {.fit = {.a = -1e-6, .b = 1e-6}};
    CHECK(mvm_calib_apply_cpu(&m, &flat, bytes, embd, ff) == -1);
    CHECK(mvm_calib_apply_cpu(&m, &neg, bytes, embd, ff) == -1);
    CHECK(memcmp(&m, &before, sizeof m) == 0);
}

/* The GPU's rates from a fit reproduce it through mvm_cost_init; the launch is the base's
 * when under half of g0, else half of g0. */
static void test_apply_gpu(void)
{
    const uint64_t bytes = 3538944;
    const uint32_t embd = 2048, ff = 1024;
    const double g0s[] = {100e-6, 20e-6};
    for (size_t i = 0; i < 2; i++) {
        mvm_calib_experts c = {.fit = {.a = g0s[i], .b = 0.7e-6}};
        mvm_machine m = *mvm_machine_preset("h100");
        CHECK(mvm_calib_apply_gpu(&m, &c, bytes, embd, ff) == 0);
        mvm_cost cost;
        mvm_cost_init(&cost, &m, bytes, embd, ff);
        CHECK(near(mvm_cost_gpu(&cost, 1), g0s[i] + 0.7e-6, 1e-12));
        CHECK(near(mvm_cost_gpu(&cost, 64), g0s[i] + 64 * 0.7e-6, 1e-12));
        CHECK(near(m.gpu_launch, i == 0 ? mvm_machine_preset("h100")->gpu_launch : 10e-6,
                   1e-12));
        CHECK(m.cpu_flops == mvm_machine_preset("h100")->cpu_flops);
    }
    mvm_machine m = *mvm_machine_preset("h100"), before = m;
    mvm_calib_experts inf = {.fit = {.a = INFINITY, .b = 1}};
    mvm_calib_experts falls = {.fit = {.a = 1e-5, .b = -1e-7}};
    CHECK(mvm_calib_apply_gpu(&m, &inf, bytes, embd, ff) == -1);
    CHECK(mvm_calib_apply_gpu(&m, &falls, bytes, embd, ff) == -1);
    CHECK(memcmp(&m, &before, sizeof m) == 0);
    /* A flat fit (bound by the bytes): the launch and bandwidth give g0 back, the base's
     * flops the work per token. */
    mvm_calib_experts flat = {.fit = {.a = 2e-6, .b = 0}};
    CHECK(mvm_calib_apply_gpu(&m, &flat, bytes, embd, ff) == 0);
    CHECK(m.gpu_flops == before.gpu_flops && m.gpu_launch == 1e-6);
    mvm_cost cost;
    mvm_cost_init(&cost, &m, bytes, embd, ff);
    const double per_token = 6.0 * embd * ff / before.gpu_flops;
    CHECK(near(mvm_cost_gpu(&cost, 1), 2e-6 + per_token, 1e-12));
    CHECK(near(mvm_cost_gpu(&cost, 32), 2e-6 + 32 * per_token, 1e-12));
}

/* The flat fit: the points' median, held at the floor (and 1 ns), slope 0; the CPU's
 * refuses a flat line (test_apply_cpu). */
static void test_fit_flat(void)
{
    /* the H200's Qwen3 expert (calibrate, session 106): 2.48 µs at 1 token, 1.54 at 32 */
    mvm_calib_experts c = {.n_points = 6, .tokens = {1, 2, 4, 8, 16, 32},
                           .seconds = {2.48e-6, 1.9e-6, 1.7e-6, 2.1e-6, 1.6e-6, 1.54e-6}};
    CHECK(mvm_calib_fit(&c) == -1);
    CHECK(mvm_calib_fit_flat(&c) == 0 && near(c.fit.a, 1.8e-6, 1e-12) && c.fit.b == 0);
    CHECK(near(c.fit.max_rel, (2.48e-6 - 1.8e-6) / 2.48e-6, 1e-9));
    CHECK(c.seconds[0] == 2.48e-6 && c.seconds[5] == 1.54e-6); /* the points as they were */
    c.floor_s = 5e-6;
    CHECK(mvm_calib_fit_flat(&c) == 0 && c.fit.a == 5e-6);
    c.n_points = 0;
    CHECK(mvm_calib_fit_flat(&c) == -1);
}

/* A decode token's time, less what the cost model's experts take of it (every MoE layer's
 * top-k at one token each), is the attention's a layer; the simulator's layer steps then
 * give the token back. A token no longer than its experts leaves the machine as it was. */
static void test_apply_token(void)
{
    const mvm_hparams hp = {.n_layer = 12, .n_expert = 128, .n_expert_used = 8,
                            .n_embd = 2048, .n_ff_exp = 768};
    const uint64_t bytes = 5013504;
    mvm_machine m = *mvm_machine_preset("h100");
    mvm_cost cost;
    mvm_cost_init(&cost, &m, bytes, hp.n_embd, hp.n_ff_exp);
    const double experts = 12 * 8 * mvm_cost_gpu(&cost, 1);
    CHECK(experts > 1e-3 && experts < 2e-3); /* the preset's 15 us a lone expert's launch */
    CHECK(mvm_calib_apply_token(&m, 3e-3, &hp, bytes) == 0);
    CHECK(near(m.attn_time, (3e-3 - experts) / 12, 1e-12));
    CHECK(near(12 * (m.attn_time + 8 * mvm_cost_gpu(&cost, 1)), 3e-3, 1e-12));
    mvm_machine before = m;
    CHECK(mvm_calib_apply_token(&m, experts, &hp, bytes) == -1);
    CHECK(mvm_calib_apply_token(&m, 1e-3, &hp, bytes) == -1);
    CHECK(mvm_calib_apply_token(&m, NAN, &hp, bytes) == -1);
    CHECK(memcmp(&m, &before, sizeof m) == 0);
}

static void test_apply_copy(void)
{
    /* 2 MiB in 50 us, 24 MiB in 490 us: 20 us setup, 23068672 B / 440 us. */
    mvm_calib_copy c = {.pages_small = 1, .pages_full = 12, .bytes_small = 2097152,
                        .bytes_full = 25165824, .t_small = 50e-6, .t_full = 490e-6};
    mvm_machine m = *mvm_machine_preset("h100");
    CHECK(mvm_calib_apply_copy(&m, &c) == 0);
    mvm_cost cost;
    mvm_cost_init(&cost, &m, c.bytes_full, 64, 64);
    CHECK(near(mvm_cost_load_bytes(&cost, c.bytes_small), c.t_small, 1e-9));
    CHECK(near(cost.t_load, c.t_full, 1e-9) && near(m.load_setup, 10e-6, 1e-9));
    CHECK(near(m.pcie_bw, 23068672 / 440e-6, 1e-9));

    /* Per-page costs that make the intercept negative: a token setup, the expert exact. */
    c.t_small = 10e-6;
    c.t_full = 490e-6;
    CHECK(mvm_calib_apply_copy(&m, &c) == 0);
    mvm_cost_init(&cost, &m, c.bytes_full, 64, 64);
    CHECK(near(m.load_setup, 0.1e-6, 1e-9) && near(cost.t_load, 490e-6, 1e-9));

    /* A one-page expert: the base's setup when under half the time, else half. */
    mvm_calib_copy one = {.pages_small = 1, .pages_full = 1, .bytes_small = 65536,
                          .bytes_full = 65536, .t_small = 30e-6, .t_full = 30e-6};
    m = *mvm_machine_preset("h100");
    CHECK(mvm_calib_apply_copy(&m, &one) == 0);
    CHECK(near(m.load_setup, 10e-6, 1e-12) && near(m.pcie_bw, 65536 / 20e-6, 1e-9));
    one.t_small = one.t_full = 12e-6;
    m = *mvm_machine_preset("h100");
    CHECK(mvm_calib_apply_copy(&m, &one) == 0 && near(m.load_setup, 6e-6, 1e-12));

    mvm_machine before = m;
    c.t_full = c.t_small; /* no growth with the bytes */
    CHECK(mvm_calib_apply_copy(&m, &c) == -1);
    c.t_small = 0;
    CHECK(mvm_calib_apply_copy(&m, &c) == -1 && memcmp(&m, &before, sizeof m) == 0);
}

/* A qwen3moe model of 2 layers x 8 experts of 96 pages (4 KiB), F32: big enough that an
 * expert's time at 12 tokens stands well above the scheduler's noise at 1. */
static const char *make_model(mvm_pool *pool)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    mvm_model_spec s = mvm_preset_find("tiny", "qwen3moe")->spec;
    s.n_ff_exp = 512;
    s.type = MVM_W_F32;
    s.seed = 5;
    CHECK_ST(mvm_mkmodel_write(&s, path, pool, NULL, NULL), MVM_OK);
    return path;
}

static mvm_model *load(const char *path, mvm_pool *pool, uint64_t budget)
{
    mvm_space_desc d;
    mvm_space_desc_init(&d);
    d.backend = MVM_BACKEND_HOST;
    d.page_size = 4096;
    d.device_budget = budget;
    d.device_budget_frac = budget ? 0 : 1;
    mvm_model *m = NULL;
    CHECK_ST(mvm_model_load(path, &(mvm_load_args){.desc = &d, .pool = pool}, &m), MVM_OK);
    return m;
}

static void test_measure(void)
{
    /* One thread: a fork/join that a busy machine preempts would time the scheduler. */
    mvm_pool *pool = NULL;
    CHECK_ST(mvm_pool_create(1, NULL, &pool), MVM_OK);
    const char *path = make_model(pool);
    mvm_model *m = load(path, pool, 0);
    if (!m) {
        mvm_pool_destroy(pool);
        return;
    }
    mvm_calib_experts cpu;
    mvm_status st = MVM_ERR_INVALID;
    for (int tries = 0; tries < 3 && st == MVM_ERR_INVALID; tries++) { /* too busy to measure */
        memset(&cpu, 0xff, sizeof cpu);
        st = mvm_calib_cpu_experts(m, pool, 12, 0.01, &cpu);
    }
    CHECK_ST(st, MVM_OK);
    /* 1, 2, 4, 8, then the maximum. */
    CHECK(cpu.n_points == 5 && cpu.tokens[3] == 8 && cpu.tokens[4] == 12);
    for (uint32_t i = 0; i < cpu.n_points && i < MVM_CALIB_MAX_POINTS; i++)
        CHECK(cpu.seconds[i] > 0 && cpu.seconds[i] < 1 && cpu.reps[i] >= 3);
    CHECK(cpu.fit.a > 0 && cpu.fit.b > 0 && cpu.floor_s > 0 && cpu.floor_s < 1);
    mvm_calib_experts bad;
    CHECK_ST(mvm_calib_cpu_experts(m, pool, 1, 0.01, &bad), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "at least 2 tokens") != NULL);

    mvm_calib_copy cp;
    memset(&cp, 0xff, sizeof cp);
    CHECK_ST(mvm_make_resident(m->space, 1, 3, MVM_ALL_PAGES), MVM_OK);
    CHECK_ST(mvm_calib_copies(m->space, 0.01, &cp), MVM_OK);
    mvm_space_info info;
    mvm_space_get_info(m->space, &info);
    uint32_t ppe = (uint32_t)((info.expert_bytes + 4095) / 4096);
    CHECK(ppe > 1 && cp.pages_small == 1 && cp.pages_full == ppe);
    CHECK(cp.bytes_small == 4096 && cp.bytes_full == info.expert_bytes);
    CHECK(cp.t_small > 0 && cp.t_full > 0);
    /* It leaves the space empty: the expert made resident before is gone too. */
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t e = 0; e < 8; e++) {
            mvm_residency r;
            CHECK_ST(mvm_expert_residency(m->space, l, e, &r), MVM_OK);
            CHECK(r.resident == 0 && r.loading == 0 && r.pins == 0);
        }
    mvm_model_free(m);

    /* A budget of one page holds less than an expert. */
    m = load(path, pool, 4096);
    if (m)
        CHECK_ST(mvm_calib_copies(m->space, 0.01, &cp), MVM_ERR_NOSPACE);
    mvm_model_free(m);
    mvm_pool_destroy(pool);
}

static void test_cost_load(void)
{
    mvm_machine m;
    memset(&m, 0, sizeof m);
    CHECK_ST(mvm_machine_load("a6000", "--cost", &m), MVM_OK);
    CHECK(!strcmp(m.name, "a6000") && m.pcie_bw == mvm_machine_preset("a6000")->pcie_bw);
    unsetenv("MOEVM_COST");
    CHECK_ST(mvm_machine_load(NULL, "--cost", &m), MVM_OK);
    CHECK(!strcmp(m.name, "h100"));

    char path[128];
    snprintf(path, sizeof path, "%s/c.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"name\": \"box\", \"base\": \"a100\", \"cpu_flops\": 123}", f);
    fclose(f);
    setenv("MOEVM_COST", path, 1);
    CHECK_ST(mvm_machine_load(NULL, "--cost", &m), MVM_OK);
    CHECK(!strcmp(m.name, "box") && m.cpu_flops == 123e9);
    CHECK(m.gpu_mem_bw == mvm_machine_preset("a100")->gpu_mem_bw);

    /* Errors name the option or the flag with its value; *out is left alone. */
    mvm_machine keep = m;
    setenv("MOEVM_COST", "/nonexistent/c.json", 1);
    CHECK_ST(mvm_machine_load(NULL, "--cost", &m), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "MOEVM_COST=/nonexistent/c.json: neither a preset") != NULL);
    unsetenv("MOEVM_COST");
    CHECK_ST(mvm_machine_load("", "--cost", &m), MVM_ERR_INVALID);
    CHECK_ST(mvm_machine_load(dir, "--cost", &m), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "--cost /tmp/") == mvm_last_error());
    f = fopen(path, "w");
    fputs("{\"cpu_flops\": 0}", f);
    fclose(f);
    CHECK_ST(mvm_machine_load(path, "--base", &m), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "--base ") && strstr(mvm_last_error(), "'cpu_flops'"));
    f = fopen(path, "w");
    for (int i = 0; i < 20000; i++)
        fputc(' ', f);
    fputs("{}", f);
    fclose(f);
    CHECK_ST(mvm_machine_load(path, "--cost", &m), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "16 KiB") != NULL);
    CHECK(memcmp(&m, &keep, sizeof m) == 0);
    unlink(path);
}

/* The output of mvm_calib_warn_implausible for m at `threads` into buf; its count. */
static uint32_t warnings(const mvm_machine *m, uint32_t threads, char *buf, size_t cap)
{
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f)
        return 0;
    uint32_t n = mvm_calib_warn_implausible(m, threads, f);
    rewind(f);
    size_t got = fread(buf, 1, cap - 1, f);
    buf[got] = '\0';
    fclose(f);
    return n;
}

/* Every preset is plausible; the figure a calibration once reported (125,337 GB/s of CPU
 * memory bandwidth) is not, nor a rate too fast for the threads or one near zero: each
 * named with its value and range, one line each. */
static void test_implausible(void)
{
    static const char *presets[] = {"rtx3090", "a6000", "a100", "h100"};
    char out[4096];
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        CHECK(warnings(mvm_machine_preset(presets[i]), 16, out, sizeof out) == 0);
        CHECK(out[0] == '\0');
    }
    mvm_machine m = *mvm_machine_preset("h100");
    m.cpu_mem_bw = 125337e9;
    CHECK(warnings(&m, 16, out, sizeof out) == 1);
    CHECK(strstr(out, "moevm calibrate: warning: cpu_mem_bw is 1.253e+05 GB/s, outside the "
                      "plausible 0.1 to 2000 GB/s: the cost file may mislead the planner") == out);
    CHECK(strchr(out, '\n') == out + strlen(out) - 1);
    /* 512 GFLOP/s is 16 threads' worth, not one's; a copy at 1e-3 GB/s is no copy */
    m = *mvm_machine_preset("h100");
    m.cpu_flops = 2000e9;
    m.pcie_bw = 1e6;
    CHECK(warnings(&m, 16, out, sizeof out) == 1 && strstr(out, "pcie_bw is 0.001 GB/s"));
    CHECK(warnings(&m, 1, out, sizeof out) == 2);
    CHECK(strstr(out, "cpu_flops is 2000 GFLOP/s, outside the plausible 0.05 to 1000 GFLOP/s "
                      "for 1 thread:") != NULL);
    /* the table holds every rate calibrate writes, each range the right way round */
    CHECK(mvm_calib_n_figures == 9);
    for (size_t i = 0; i < mvm_calib_n_figures; i++)
        CHECK(mvm_calib_figures[i].lo > 0 && mvm_calib_figures[i].lo < mvm_calib_figures[i].hi);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/moevm-test-calibrate-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    RUN(test_fit_and_median);
    RUN(test_fit);
    RUN(test_fit_flat);
    RUN(test_apply_gpu);
    RUN(test_apply_cpu);
    RUN(test_apply_copy);
    RUN(test_apply_token);
    RUN(test_measure);
    RUN(test_cost_load);
    RUN(test_implausible);
    char path[128];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    unlink(path);
    rmdir(dir);
    TEST_END();
}
