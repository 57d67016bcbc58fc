/*
 * The cost model (policy/cost.h): the formulas against values worked out by hand, cost files
 * and every way one can be wrong, the presets against the papers' own measurements, the
 * bench/costs/<preset>.json files against the presets; and module parameters (policy/params.c),
 * policy/'s other parser.
 *
 * usage: test_cost [REPO_ROOT]   (with the root, bench/costs/<preset>.json are checked too)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "policy/cost.h"
#include "policy/policy.h"

static int near(double got, double want, double rel)
{
    return fabs(got - want) <= rel * fabs(want);
}

/* ---- the formulas ---------------------------------------------------------------------- */

/* A made-up shape whose bytes (5 MB) and FLOPs per token (2·3·1000·2000 = 12 MFLOP) differ,
 * so a formula that mixed them up would show. Expected values worked out by hand from the
 * h100 preset (50 GB/s PCIe, 10 µs setup, 35 GB/s zero-copy, 3350 GB/s HBM, 494.5 TFLOP/s,
 * 15 µs launch, 171 GB/s and 512 GFLOP/s CPU, 10 µs CPU setup). */
static void test_formulas(void)
{
    mvm_cost c;
    mvm_cost_init(&c, mvm_machine_preset("h100"), 5000000, 1000, 2000);
    CHECK(c.expert_bytes == 5000000 && c.n_embd == 1000 && c.n_ff == 2000);
    CHECK(strcmp(c.m.name, "h100") == 0);
    CHECK(near(c.t_load, 110e-6, 1e-12));             /* 10 µs + 5e6 / 50e9 = 100 µs */
    CHECK(near(c.g0, 16.492537313e-6, 1e-9));         /* 15 µs + 5e6 / 3350e9 */
    CHECK(near(c.g1, 2.4266936299e-8, 1e-9));         /* 12e6 / 494.5e12 */
    CHECK(near(c.c0, 39.239766082e-6, 1e-9));         /* 10 µs + 5e6 / 171e9 */
    CHECK(near(c.c1, 23.4375e-6, 1e-12));             /* 12e6 / 512e9 */
    CHECK(near(c.zc0, 157.857142857e-6, 1e-9));       /* 15 µs + 5e6 / 35e9 */
    CHECK(near(mvm_cost_gpu(&c, 4), 16.589605058e-6, 1e-9));
    CHECK(near(mvm_cost_cpu(&c, 4), 132.989766082e-6, 1e-9));
    CHECK(near(mvm_cost_zerocopy(&c, 4), 157.954210602e-6, 1e-9));
    CHECK(mvm_cost_gpu(&c, 0) == c.g0 && mvm_cost_cpu(&c, 0) == c.c0);
    CHECK(near(mvm_cost_load_bytes(&c, 1000000), 30e-6, 1e-12)); /* 10 µs + 20 µs */
    CHECK(mvm_cost_load_bytes(&c, 0) == 0);
    CHECK(mvm_cost_load_bytes(&c, 5000000) == c.t_load);
    /* h100 has no network; a100 has Prism's: 32 µs + 2·3·1000·2 B / 62.5 MB/s = 224 µs. */
    CHECK(isinf(mvm_cost_net(&c, 3, 2)));
    mvm_cost_init(&c, mvm_machine_preset("a100"), 5000000, 1000, 2000);
    CHECK(near(mvm_cost_net(&c, 3, 2), 224e-6, 1e-12));
    CHECK(near(mvm_cost_net(&c, 0, 2), 32e-6, 1e-12));
}

/* ---- presets against the papers -------------------------------------------------------- */

static const char *const preset_names[] = {"rtx3090", "a6000", "a100", "h100"};

static void test_presets_sane(void)
{
    for (size_t i = 0; i < 4; i++) {
        const mvm_machine *m = mvm_machine_preset(preset_names[i]);
        CHECK(m != NULL);
        if (!m)
            continue;
        CHECK(strcmp(m->name, preset_names[i]) == 0);
        CHECK(strstr(mvm_machine_preset_names(), preset_names[i]) != NULL);
        const double pos[] = {m->pcie_bw, m->load_setup, m->zerocopy_bw, m->gpu_mem_bw,
                              m->gpu_flops, m->gpu_launch, m->cpu_mem_bw, m->cpu_flops,
                              m->cpu_setup, m->attn_time};
        for (size_t k = 0; k < sizeof pos / sizeof *pos; k++)
            CHECK(isfinite(pos[k]) && pos[k] > 0);
        CHECK(m->net_rtt >= 0 && m->net_bw >= 0 && m->gpu_memory >= (24ull << 30));
        /* Orders the hardware guarantees: HBM/GDDR > host DRAM > PCIe >= zero-copy reads. */
        CHECK(m->gpu_mem_bw > m->cpu_mem_bw && m->cpu_mem_bw > m->pcie_bw);
        CHECK(m->zerocopy_bw <= m->pcie_bw && m->gpu_flops > 10 * m->cpu_flops);

        /* SMoE (§I): "PCIe loading can be one to two orders of magnitude slower than
         * GPU computation, and CPU computation is typically one order of magnitude slower"
         * — at batch 1 for a fine-grained expert (DeepSeek-V2-Lite's, 17.3 MB in BF16). */
        mvm_cost c;
        mvm_cost_init(&c, m, 17301504, 2048, 1408);
        double load_over_gpu = c.t_load / mvm_cost_gpu(&c, 1);
        double cpu_over_gpu = mvm_cost_cpu(&c, 1) / mvm_cost_gpu(&c, 1);
        CHECK(load_over_gpu >= 10 && load_over_gpu <= 100);
        CHECK(cpu_over_gpu >= 3 && cpu_over_gpu <= 30);
    }
    CHECK(mvm_machine_preset("v100") == NULL && mvm_machine_preset(NULL) == NULL);
    CHECK(mvm_machine_preset("H100") == NULL);

    /* PreScope (Fig. 17): on the A100 the peak per-layer CPU-GPU gap, ~14 ms, is
     * "exactly the latency of one expert prefetch" of Mixtral (352 MB in BF16). */
    mvm_cost c;
    mvm_cost_init(&c, mvm_machine_preset("a100"), 352321536, 4096, 14336);
    CHECK(near(c.t_load, 14e-3, 0.05));
    /* PreScope (Fig. 13): the CPU beats load-then-GPU below ~16 tokens per expert for
     * Qwen3-30B-A3B's 9 MiB experts. Break-even n* = (t_load + g0 - c0) / (c1 - g1). */
    mvm_cost_init(&c, mvm_machine_preset("a100"), 9437184, 2048, 768);
    double n_star = (c.t_load + c.g0 - c.c0) / (c.c1 - c.g1);
    CHECK(n_star > 13 && n_star < 19);
    /* At PCIe 4's effective 25 GB/s a Qwen3 expert loads in ≈ 0.38 ms. */
    CHECK(near(c.t_load - c.m.load_setup, 0.38e-3, 0.02));
}

/* ---- cost files ------------------------------------------------------------------------ */

static int same_machine(const mvm_machine *a, const mvm_machine *b)
{
    const double x[] = {a->pcie_bw, a->load_setup, a->zerocopy_bw, a->gpu_mem_bw, a->gpu_flops,
                        a->gpu_launch, a->cpu_mem_bw, a->cpu_flops, a->cpu_setup, a->attn_time,
                        a->host_step, a->host_queue, a->host_token, a->net_rtt, a->net_bw};
    const double y[] = {b->pcie_bw, b->load_setup, b->zerocopy_bw, b->gpu_mem_bw, b->gpu_flops,
                        b->gpu_launch, b->cpu_mem_bw, b->cpu_flops, b->cpu_setup, b->attn_time,
                        b->host_step, b->host_queue, b->host_token, b->net_rtt, b->net_bw};
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        if (!(x[i] == y[i] || near(x[i], y[i], 1e-12)))
            return 0;
    return strcmp(a->name, b->name) == 0 && a->gpu_memory == b->gpu_memory;
}

static void test_parse_ok(void)
{
    mvm_machine m;
    CHECK_ST(mvm_machine_parse_json("{}", "empty.json", &m), MVM_OK);
    CHECK(same_machine(&m, mvm_machine_preset("h100")));
    CHECK_ST(mvm_machine_parse_json(" \n{ \"base\" : \"rtx3090\" }\n", "b.json", &m), MVM_OK);
    CHECK(same_machine(&m, mvm_machine_preset("rtx3090")));

    /* Units: GB/s, GFLOP/s, µs, GiB. */
    const char *text = "{\"base\": \"a100\", \"name\": \"my box\", \"pcie_bw\": 12.5, "
                       "\"load_setup\": 20, \"cpu_flops\": 100, \"gpu_memory\": 1.5, "
                       "\"net_rtt\": 0, \"net_bw\": 0, \"attn_time\": 1e3}";
    CHECK_ST(mvm_machine_parse_json(text, "u.json", &m), MVM_OK);
    const mvm_machine *a100 = mvm_machine_preset("a100");
    CHECK(strcmp(m.name, "my box") == 0);
    CHECK(m.pcie_bw == 12.5e9 && near(m.load_setup, 20e-6, 1e-15) && m.cpu_flops == 100e9);
    CHECK(m.gpu_memory == 1610612736ull && m.net_rtt == 0 && m.net_bw == 0);
    CHECK(near(m.attn_time, 1e-3, 1e-15));
    CHECK(m.gpu_mem_bw == a100->gpu_mem_bw && m.zerocopy_bw == a100->zerocopy_bw);
    CHECK(m.cpu_setup == a100->cpu_setup && m.gpu_flops == a100->gpu_flops);

    /* Every field by name, each to a distinct value, lands where it should. */
    text = "{\"pcie_bw\":1,\"load_setup\":2,\"zerocopy_bw\":3,\"gpu_mem_bw\":4,\"gpu_flops\":5,"
           "\"gpu_launch\":6,\"cpu_mem_bw\":7,\"cpu_flops\":8,\"cpu_setup\":9,\"attn_time\":10,"
           "\"net_rtt\":11,\"net_bw\":12,\"gpu_memory\":13,\"host_step\":14,\"name\":\"x\"}";
    CHECK_ST(mvm_machine_parse_json(text, "all.json", &m), MVM_OK);
    CHECK(m.pcie_bw == 1e9 && near(m.load_setup, 2e-6, 1e-15) && m.zerocopy_bw == 3e9);
    CHECK(m.gpu_mem_bw == 4e9 && m.gpu_flops == 5e9 && near(m.gpu_launch, 6e-6, 1e-15));
    CHECK(m.cpu_mem_bw == 7e9 && m.cpu_flops == 8e9 && near(m.cpu_setup, 9e-6, 1e-15));
    CHECK(near(m.attn_time, 10e-6, 1e-15) && near(m.net_rtt, 11e-6, 1e-15));
    CHECK(m.net_bw == 12e9 && m.gpu_memory == 13ull << 30 && near(m.host_step, 14e-6, 1e-15));
    /* host_step may be 0 (none, the presets'); the others of that kind are the network's */
    CHECK_ST(mvm_machine_parse_json("{\"host_step\": 0}", "h.json", &m), MVM_OK);
    CHECK(m.host_step == 0 && mvm_machine_preset("h100")->host_step == 0);
    CHECK_ST(mvm_machine_parse_json("{\"host_token\": 161}", "t.json", &m), MVM_OK);
    CHECK(near(m.host_token, 161e-6, 1e-15) && mvm_machine_preset("h100")->host_token == 0);
    CHECK_ST(mvm_machine_parse_json("{\"host_token\": 0}", "t.json", &m), MVM_OK);
}

/* Each malformed file fails with MVM_ERR_INVALID, a message naming the file and `needle`,
 * and leaves *out alone. */
static void expect_bad(const char *text, const char *needle)
{
    mvm_machine m;
    memset(&m, 0x5a, sizeof m);
    mvm_status st = mvm_machine_parse_json(text, "bad.json", &m);
    CHECK(st == MVM_ERR_INVALID);
    const char *msg = mvm_last_error();
    int ok = strncmp(msg, "bad.json: ", 10) == 0 && strstr(msg, needle) != NULL &&
             !strchr(msg, '\n');
    if (!ok || st != MVM_ERR_INVALID)
        fprintf(stderr, "  for %s: got '%s', wanted '%s'\n", text ? text : "NULL", msg, needle);
    CHECK(ok);
    unsigned char poison[sizeof m];
    memset(poison, 0x5a, sizeof poison);
    CHECK(memcmp(&m, poison, sizeof m) == 0);
}

/* Every preset, and a machine with odd values and a name to escape, written out by
 * mvm_machine_format_json and parsed back: the same machine. */
static void test_format_round_trip(void)
{
    char buf[2048];
    mvm_machine m, back;
    for (size_t i = 0; i < 4; i++) {
        const mvm_machine *p = mvm_machine_preset(preset_names[i]);
        int n = mvm_machine_format_json(p, "a6000", buf, sizeof buf);
        CHECK(n > 0 && (size_t)n < sizeof buf && strstr(buf, "\"base\": \"a6000\""));
        CHECK_ST(mvm_machine_parse_json(buf, "round trip", &back), MVM_OK);
        CHECK(same_machine(&back, p));
    }
    m = *mvm_machine_preset("a100");
    snprintf(m.name, sizeof m.name, "box \"7\"\\ \n\f");
    m.pcie_bw = 3.14159265358979e9;
    m.cpu_setup = 1.234567e-7;
    m.cpu_flops = 98765.4321e9;
    m.host_step = 123.456e-6;
    m.host_token = 98.765e-6;
    m.host_queue = 45.678e-6;
    m.gpu_memory = 123456789;
    int n = mvm_machine_format_json(&m, NULL, buf, sizeof buf);
    CHECK_ST(mvm_machine_parse_json(buf, "odd", &back), MVM_OK);
    CHECK(strcmp(back.name, m.name) == 0 && strstr(buf, "\"base\": \"h100\""));
    back.gpu_memory = m.gpu_memory = 0; /* GiB in the file: bytes come back rounded */
    CHECK(same_machine(&back, &m));
    /* A short buffer: snprintf's rules, the full length returned. */
    char small[16];
    n = mvm_machine_format_json(&m, NULL, buf, sizeof buf);
    CHECK(mvm_machine_format_json(&m, NULL, small, sizeof small) == n);
    CHECK(strlen(small) == sizeof small - 1);
}

static void test_parse_errors(void)
{
    expect_bad(NULL, "no text");
    expect_bad("", "not valid JSON");
    expect_bad("{\"pcie_bw\": 25,\n \"gpu_flops\": }", "line 2: not valid JSON");
    expect_bad("{\"pcie_bw\" 25,\n \"gpu_flops\": 3}", "line 1: not valid JSON near '25,'");
    expect_bad("{} trailing", "not valid JSON");
    expect_bad("[1, 2]", "one JSON object");
    expect_bad("25", "one JSON object");
    expect_bad("{\"pcie_bandwidth\": 25}", "unknown field 'pcie_bandwidth'");
    expect_bad("{\"pcie_bw\": 25, \"pcie_bw\": 26}", "field 'pcie_bw' given twice");
    expect_bad("{\"base\": 3}", "field 'base' must be a preset name");
    expect_bad("{\"base\": \"v100\"}", "base 'v100' is not a preset");
    expect_bad("{\"gpu_flops\": \"fast\"}", "field 'gpu_flops' must be a number");
    expect_bad("{\"cpu_setup\": null}", "field 'cpu_setup' must be a number");
    expect_bad("{\"cpu_mem_bw\": {\"v\": 1}}", "field 'cpu_mem_bw' must be a number");
    expect_bad("{\"pcie_bw\": 0}", "field 'pcie_bw' is 0; it must be finite and > 0");
    expect_bad("{\"load_setup\": -1}", "field 'load_setup' is -1");
    expect_bad("{\"attn_time\": 1e999}", "field 'attn_time' is inf");
    expect_bad("{\"net_bw\": -0.5}", "field 'net_bw' is -0.5; it must be finite and >= 0");
    expect_bad("{\"host_step\": -3}", "field 'host_step' is -3; it must be finite and >= 0");
    expect_bad("{\"host_token\": -1}", "field 'host_token' is -1; it must be finite and >= 0");
    expect_bad("{\"gpu_memory\": 0}", "field 'gpu_memory' is 0");
    expect_bad("{\"gpu_memory\": 1e12}", "'gpu_memory' is 1e+12 GiB: too large");
    expect_bad("{\"name\": 7}", "field 'name' must be a string");
    expect_bad("{\"name\": \"\"}", "field 'name' must be a string");
    expect_bad("{\"name\": \"0123456789012345678901234567890123456789012345678901234567890123\"}",
               "field 'name' must be a string of 1 to 63 characters");
}

static const char *root; /* the repository, from the command line */

/* bench/costs/<preset>.json describe exactly the presets. */
static void test_cost_files(void)
{
    for (size_t i = 0; i < 4; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/bench/costs/%s.json", root, preset_names[i]);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        if (!f)
            continue;
        static char text[1 << 16];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = '\0';
        mvm_machine m;
        CHECK_ST(mvm_machine_parse_json(text, path, &m), MVM_OK);
        /* Starting from another preset, so every field must come from the file. */
        char based[1 << 16];
        const char *other = i == 3 ? "rtx3090" : "h100";
        char *brace = strchr(text, '{');
        CHECK(brace != NULL);
        if (!brace)
            continue;
        snprintf(based, sizeof based, "{\"base\": \"%s\", %s", other, brace + 1);
        mvm_machine m2;
        CHECK_ST(mvm_machine_parse_json(based, path, &m2), MVM_OK);
        CHECK(same_machine(&m, mvm_machine_preset(preset_names[i])));
        CHECK(same_machine(&m2, mvm_machine_preset(preset_names[i])));
    }
}

/* ---- module parameters (policy/params.c) ----------------------------------------------- */

static void test_params(void)
{
    static const char *const known[] = {"alpha", "w_size", NULL};
    mvm_pparams p = {"alpha=0.25,w_size=4"};
    double v;
    CHECK_ST(mvm_pparams_check(&p, known, "evict score"), MVM_OK);
    CHECK_ST(mvm_pparam_double(&p, "alpha", 9, &v), MVM_OK);
    CHECK(v == 0.25);
    CHECK_ST(mvm_pparam_double(&p, "w_size", 9, &v), MVM_OK);
    CHECK(v == 4);
    CHECK_ST(mvm_pparam_double(&p, "u_size", 9, &v), MVM_OK);
    CHECK(v == 9);
    CHECK_ST(mvm_pparam_double(&p, "w", 9, &v), MVM_OK); /* a prefix is not the name */
    CHECK(v == 9);
    p.text = "alpha=-1.5e-3";
    CHECK_ST(mvm_pparam_double(&p, "alpha", 9, &v), MVM_OK);
    CHECK(v == -1.5e-3);
    mvm_pparams none = {NULL}, empty = {""};
    CHECK_ST(mvm_pparams_check(&none, known, "m"), MVM_OK);
    CHECK_ST(mvm_pparams_check(&empty, known, "m"), MVM_OK);
    CHECK_ST(mvm_pparam_double(&none, "alpha", 3, &v), MVM_OK);
    CHECK(v == 3);
    CHECK_ST(mvm_pparam_double(NULL, "alpha", 4, &v), MVM_OK);
    CHECK(v == 4);

    static const struct { const char *text, *needle; } bad[] = {
        {"beta=1", "evict score: unknown parameter 'beta' (known: alpha, w_size)"},
        {"alpha=1,alpha=2", "evict score: parameter 'alpha' given twice"},
        {"alpha=x", "evict score: parameter 'alpha': value 'x' is not a finite number"},
        {"alpha=1x", "value '1x' is not a finite number"},
        {"alpha=", "parameter 'alpha': value '' is empty"},
        {"alpha=inf", "value 'inf' is not a finite number"},
        {"alpha=nan", "value 'nan' is not a finite number"},
        {"alpha=1e999", "value '1e999' is not a finite number"},
        {"alpha= 1", "value ' 1' is not a finite number"},
        {"alpha", "parameter 'alpha': expected '=' after the name, found the end"},
        {"alpha =1", "parameter 'alpha': expected '=' after the name"},
        {"alpha=1,", "evict score: parameters end with ','"},
        {"alpha=1,,w_size=2", "expected a name at ',w_size=2'"},
        {"=1", "expected a name at '=1'"},
        {" alpha=1", "expected a name"},
        {"alpha=0.5,w_size=1.2.3", "parameter 'w_size': value '1.2.3'"},
        {"alpha=111111111111111111111111111111111111111111111111111111111111111111",
         "value '1111111111111111111111111111111111111111111111111111111111111111"
         "11' is too long"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mvm_pparams b = {bad[i].text};
        mvm_status st = mvm_pparams_check(&b, known, "evict score");
        int ok = st == MVM_ERR_INVALID && strstr(mvm_last_error(), bad[i].needle) != NULL;
        if (!ok)
            fprintf(stderr, "  params '%s': got %s '%s'\n", bad[i].text, mvm_status_name(st),
                    mvm_last_error());
        CHECK(ok);
    }
    /* Looking a value up without the check still refuses what it cannot read. */
    mvm_pparams b = {"alpha=x"};
    CHECK_ST(mvm_pparam_double(&b, "alpha", 1, &v), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "parameter 'alpha'") != NULL);
    b.text = "w_size=1,,alpha=2";
    CHECK_ST(mvm_pparam_double(&b, "alpha", 1, &v), MVM_ERR_INVALID);
    static const char *const nothing[] = {NULL};
    b.text = "a=1";
    CHECK_ST(mvm_pparams_check(&b, nothing, "evict lru"), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "evict lru: unknown parameter 'a' (known: none)") != NULL);
}

int main(int argc, char **argv)
{
    RUN(test_formulas);
    RUN(test_presets_sane);
    RUN(test_parse_ok);
    RUN(test_parse_errors);
    RUN(test_format_round_trip);
    if (argc > 1) {
        root = argv[1];
        RUN(test_cost_files);
    }
    RUN(test_params);
    TEST_END();
}
