/* `moevm mkmodel`: write a synthetic GGUF MoE model (engine/synth/mkmodel.h) from a preset,
 * optionally with some sizes changed (e.g. fewer layers for a benchmark that must fit). */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/statvfs.h>

#include "engine/model/model.h"
#include "engine/synth/mkmodel.h"
#include "tools/cli.h"
#include "vmm/topo.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moevm mkmodel [--preset NAME] [--arch ARCH] [--type TYPE] [--seed N]\n"
            "                     [-o FILE] [--layers N] [--experts N] [--top-k N] [--embd N]\n"
            "                     [--expert-ff N] [--vocab N] [--ctx N]\n"
            "                     [--rope-scaling linear:FACTOR|yarn:FACTOR:ORIG_CTX] [--list]\n"
            "  --preset   tiny (default) or a real model shape; --list shows them all\n"
            "  --arch     for tiny: llama (default), qwen2moe, qwen3moe, olmoe, deepseek2,\n"
            "             glm4moe, minimax-m2, gpt-oss\n"
            "  --type     f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_K, q3_K,\n"
            "             q4_K, q5_K, q6_K, iq4_xs, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s,\n"
            "             iq1_s, iq1_m, or llama.cpp's mixes q4_K_M, q5_K_M and mxfp4\n"
            "             (MXFP4_MOE: the experts mxfp4, the rest q8_0) (default: f32 for\n"
            "             tiny, q8_0 otherwise); as llama-quantize, rows that are not whole\n"
            "             256-element blocks fall back from q2_K/q3_K/iq4_xs and the iq1/2/3\n"
            "             types to iq4_nl, q4_K to q5_0, q5_K to q5_1, q6_K to q8_0; the\n"
            "             iq1/2/3 quantizer is a plain one (no importance matrix)\n"
            "  --seed     the weights' seed (default 1): same seed, same file\n"
            "  -o, --output  the file to write (default: <preset>-<arch>-<type>.gguf)\n"
            "  --rope-scaling  write a context extension (rope.scaling.*): linear, or YaRN\n"
            "             from a model trained on ORIG_CTX positions\n"
            "  the size flags override the preset's value\n");
}

/* A type name (any case), or q4_K / q5_K with "_M" for llama.cpp's mix. */
static int parse_type(const char *v, enum mvm_wtype *t, int *k_mix)
{
    const size_t len = strlen(v);
    const int has_m = len > 2 && strcasecmp(v + len - 2, "_m") == 0;
    /* a type's own name first (iq1_m ends in "_m" too), then q4_K / q5_K and "_m" */
    for (int mix = 0; mix <= has_m; mix++) {
        const size_t n = len - 2 * (size_t)mix;
        for (int i = 0; i < MVM_W_COUNT; i++) {
            const char *name = mvm_k_wtype_name((enum mvm_wtype)i);
            if (strlen(name) == n && strncasecmp(v, name, n) == 0 &&
                (!mix || i == MVM_W_Q4_K || i == MVM_W_Q5_K)) {
                *t = (enum mvm_wtype)i;
                *k_mix = mix;
                return 0;
            }
        }
    }
    fprintf(stderr, "moevm mkmodel: --type %s: expected", v);
    for (int i = 0; i < MVM_W_COUNT; i++)
        fprintf(stderr, " %s,", mvm_k_wtype_name((enum mvm_wtype)i));
    fprintf(stderr, " q4_K_M or q5_K_M\n");
    return 2;
}

/* --rope-scaling linear:FACTOR or yarn:FACTOR:ORIG_CTX into the spec (checked there). */
static int parse_rope_scaling(const char *v, mvm_model_spec *s)
{
    char type[8] = "", end;
    double factor = 0;
    unsigned orig = 0;
    int n = sscanf(v, "%7[a-z]:%lf:%u%c", type, &factor, &orig, &end);
    if ((strcmp(type, "linear") == 0 && n == 2) || (strcmp(type, "yarn") == 0 && n == 3)) {
        snprintf(s->rope_scaling, sizeof s->rope_scaling, "%s", type);
        s->rope_factor = (float)factor;
        s->rope_orig_ctx = orig;
        return 0;
    }
    fprintf(stderr, "moevm mkmodel: --rope-scaling %s: expected linear:FACTOR or "
            "yarn:FACTOR:ORIG_CTX\n", v);
    return 2;
}

/* The file name's type: "q4_K_M" for the mix. */
static const char *type_name(const mvm_model_spec *s, char *buf, size_t size)
{
    snprintf(buf, size, "%s%s", mvm_k_wtype_name(s->type), s->k_mix ? "_M" : "");
    return buf;
}

/* Writes model s (of preset p) to `out`, refusing up front when the disk cannot hold it
 * rather than failing after minutes of writing. The exit code. */
static int write_model(const mvm_preset *p, const mvm_model_spec *spec, const char *out)
{
    const mvm_model_spec s = *spec;
    char tn[16];
    uint64_t total, experts;
    mvm_spec_bytes(&s, &total, &experts);
    /* Refuse up front rather than fail after minutes of writing. */
    char dir[512];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir ? 1 : 0] = '\0';
    struct statvfs fs;
    if (statvfs(slash ? dir : ".", &fs) == 0 &&
        (uint64_t)fs.f_bavail * fs.f_frsize < total + (total >> 6) + (16u << 20)) {
        fprintf(stderr, "moevm mkmodel: %s needs %.2f GiB but only %.2f GiB are free there\n",
                out, (double)total / (1 << 30),
                (double)((uint64_t)fs.f_bavail * fs.f_frsize) / (1 << 30));
        return 1;
    }
    printf("mkmodel: %s %s, %u layers x %u experts (top-%u), %s, %.2f GiB (experts %.2f GiB) "
           "-> %s\n", p->name, s.arch, s.n_layer, s.n_expert, s.n_expert_used,
           type_name(&s, tn, sizeof tn), (double)total / (1 << 30),
           (double)experts / (1 << 30), out);
    fflush(stdout);
    char label[600];
    snprintf(label, sizeof label, "writing %s", out);
    mvm_topo topo;
    mvm_pool *pool;
    if (mvm_topo_probe(NULL, &topo) != MVM_OK ||
        mvm_pool_create(topo.n_cores > 0 ? topo.n_cores : 1, &topo, &pool) != MVM_OK)
        return mvm_cli_error("mkmodel", NULL);
    mvm_status st = mvm_mkmodel_write(&s, out, pool, mvm_cli_progress, label);
    mvm_pool_destroy(pool);
    return st == MVM_OK ? 0 : mvm_cli_error("mkmodel", NULL);
}

int mvm_cmd_mkmodel(int argc, char **argv)
{
    const char *preset = "tiny", *arch = NULL, *out = NULL;
    enum mvm_wtype type = MVM_W_F32;
    int type_set = 0, list = 0, k_mix = 0;
    uint32_t seed = 1;
    const char *rope_scaling = NULL;
    /* the size overrides: ids 1..7, in dst[]'s order below */
    struct { uint32_t val; int set; } ov[7] = {{0}};
    enum { O_LIST = 8, O_PRESET, O_ARCH, O_ROPE, O_OUT, O_SEED, O_TYPE };
    static const mvm_cli_opt opts[] = {
        {"layers", 0, 1, 1},   {"experts", 0, 1, 2},      {"top-k", 0, 1, 3},
        {"embd", 0, 1, 4},     {"expert-ff", 0, 1, 5},    {"vocab", 0, 1, 6},
        {"ctx", 0, 1, 7},      {"list", 0, 0, O_LIST},    {"preset", 0, 1, O_PRESET},
        {"arch", 0, 1, O_ARCH}, {"rope-scaling", 0, 1, O_ROPE}, {"output", 'o', 1, O_OUT},
        {"seed", 0, 1, O_SEED}, {"type", 0, 1, O_TYPE},   {0}};
    const size_t n_ov = sizeof ov / sizeof *ov;
    mvm_cli_iter it = {.cmd = "mkmodel", .usage = usage, .opts = opts, .argc = argc,
                       .argv = argv};
    int next;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION) {
        const char *f = it.flag, *v = it.value;
        int bad = 0;
        switch (it.id) {
        case O_LIST: list = 1; break;
        case O_PRESET: preset = v; break;
        case O_ARCH: arch = v; break;
        case O_ROPE: rope_scaling = v; break;
        case O_OUT: out = v; break;
        case O_SEED: bad = mvm_cli_u32("mkmodel", f, v, 0, UINT32_MAX, &seed); break;
        case O_TYPE:
            bad = parse_type(v, &type, &k_mix);
            type_set = 1;
            break;
        default:
            bad = mvm_cli_u32("mkmodel", f, v, 1, 1u << 24, &ov[it.id - 1].val);
            ov[it.id - 1].set = 1;
        }
        if (bad)
            return 2;
    }
    if (next != MVM_CLI_END)
        return next;
    if (list) {
        mvm_preset_list(type_set ? type : MVM_W_Q8_0);
        return 0;
    }
    if (arch && !mvm_arch_find(arch)) {
        fprintf(stderr, "moevm mkmodel: --arch %s: not supported (supported: %s)\n", arch,
                mvm_arch_names());
        return 2;
    }
    const mvm_preset *p = mvm_preset_find(preset, arch);
    if (!p) {
        fprintf(stderr, "moevm mkmodel: no preset '%s'%s%s (see --list)\n", preset,
                arch ? " for architecture " : "", arch ? arch : "");
        return 2;
    }
    mvm_model_spec s = p->spec;
    s.type = type_set ? type : strcmp(preset, "tiny") == 0 ? MVM_W_F32 : MVM_W_Q8_0;
    s.k_mix = k_mix;
    s.seed = seed;
    if (rope_scaling && parse_rope_scaling(rope_scaling, &s))
        return 2;
    uint32_t *dst[] = {&s.n_layer, &s.n_expert, &s.n_expert_used, &s.n_embd, NULL, &s.n_vocab,
                       &s.n_ctx};
    for (size_t k = 0; k < n_ov; k++) {
        if (!ov[k].set)
            continue;
        if (dst[k])
            *dst[k] = ov[k].val;
        else if (s.n_ff_exp)
            s.n_ff_exp = ov[k].val;
        else
            s.n_ff = ov[k].val;
    }
    if (mvm_spec_check(&s) != MVM_OK)
        return mvm_cli_error("mkmodel", NULL);
    char path[512], tn[16];
    if (!out) {
        snprintf(path, sizeof path, "%s-%s-%s.gguf", preset, s.arch, type_name(&s, tn, sizeof tn));
        out = path;
    }
    return write_model(p, &s, out);
}
