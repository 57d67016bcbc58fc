/*
 * llama.cpp's --override-kv and RoPE options (tools/cli_meta.h), read as llama.cpp's
 * common/arg.cpp reads them: --override-kv takes a comma-separated list (a field in double
 * quotes may hold commas, "" a quote), each KEY=TYPE:VALUE; --rope-scale N and
 * --rope-freq-scale 1/N are the same setting (the last given wins); a negative
 * --yarn-ext-factor or --yarn-beta-* is llama.cpp's "not set" (the file's).
 *
 * --yarn-attn-factor is refused: llama.cpp computes YaRN's attention magnitude from the
 * factor and drops the value given (src/llama-context.cpp), so taking it would compute
 * what llama.cpp does not; rope.scaling.attn_factor in --override-kv scales it in both.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"
#include "tools/cli_meta.h"

/* One field of llama.cpp's parse_csv_row from *at, into a malloc'ed string; *at moves past
 * it and its comma (NULL after the last). */
static char *csv_field(const char **at)
{
    const char *s = *at;
    char *out = malloc(strlen(s) + 1), *o = out;
    if (!out)
        return NULL;
    int quoted = 0;
    for (; *s; s++) {
        if (*s == '"' && !quoted && o == out) {
            quoted = 1;
        } else if (*s == '"' && quoted) {
            if (s[1] == '"')
                *o++ = '"', s++;
            else
                quoted = 0;
        } else if (*s == ',' && !quoted) {
            break;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
    *at = *s ? s + 1 : NULL;
    return out;
}

static int add_overrides(const char *cmd, const char *flag, const char *value, mvm_cli_meta *m)
{
    for (const char *at = value; at;) {
        if (m->n_kv == MVM_CLI_MAX_OVERRIDES) {
            fprintf(stderr, "moevm %s: %s: more than %d overrides\n", cmd, flag,
                    MVM_CLI_MAX_OVERRIDES);
            return 2;
        }
        char *spec = csv_field(&at);
        mvm_gguf_override o;
        if (!spec) {
            fprintf(stderr, "moevm %s: %s: out of memory\n", cmd, flag);
            return 2;
        }
        m->kv[m->n_kv++] = spec;
        if (mvm_gguf_override_parse(spec, &o) != MVM_OK) {
            mvm_cli_error(cmd, NULL);
            return 2;
        }
    }
    return 0;
}

/* A value in [lo, hi], or a negative one, llama.cpp's "not set": *set 0 then. */
static int maybe_float(const char *cmd, const mvm_cli_iter *it, double lo, double hi,
                       float *out, int *set)
{
    char *end;
    const double v = strtod(it->value, &end);
    if (!*it->value || *end || !(v < 0 || (v >= lo && v <= hi))) {
        fprintf(stderr, "moevm %s: %s %s: expected a number in %g..%g, or a negative one for "
                "the model's\n", cmd, it->flag, it->value, lo, hi);
        return 2;
    }
    *set = v >= 0;
    *out = v >= 0 ? (float)v : 0;
    return 0;
}

int mvm_cli_meta_option(const char *cmd, const mvm_cli_iter *it, mvm_cli_meta *m)
{
    static const char *const scalings[] = {"none", "linear", "yarn", NULL};
    mvm_rope_params *r = &m->rope;
    int set, i;
    float f;
    switch (it->id) {
    case MVM_CLI_M_KV:
        return add_overrides(cmd, it->flag, it->value, m);
    case MVM_CLI_M_SCALING:
        if (mvm_cli_choice(cmd, it->flag, it->value, scalings, &i))
            return 2;
        r->scaling = scalings[i];
        return 0;
    case MVM_CLI_M_SCALE:
        return mvm_cli_float(cmd, it->flag, it->value, 1e-6, 1e6, &r->scale);
    case MVM_CLI_M_FREQ_SCALE:
        if (mvm_cli_float(cmd, it->flag, it->value, 1e-6, 1e6, &f))
            return 2;
        r->scale = 1.0f / f;
        return 0;
    case MVM_CLI_M_FREQ_BASE:
        return mvm_cli_float(cmd, it->flag, it->value, 1.0001, 1e30, &r->freq_base);
    case MVM_CLI_M_ORIG_CTX: /* 0: the model's, as llama.cpp's */
        return mvm_cli_u32(cmd, it->flag, it->value, 0, 1u << 24, &r->yarn_orig_ctx);
    case MVM_CLI_M_EXT:
        return maybe_float(cmd, it, 0, 1, &r->yarn_ext_factor, &r->yarn_ext_set);
    case MVM_CLI_M_BETA_FAST:
        return maybe_float(cmd, it, 1e-6, 1e6, &r->yarn_beta_fast, &set);
    case MVM_CLI_M_BETA_SLOW:
        return maybe_float(cmd, it, 1e-6, 1e6, &r->yarn_beta_slow, &set);
    case MVM_CLI_M_ATTN:
        fprintf(stderr, "moevm %s: %s: not taken: llama.cpp computes YaRN's attention magnitude "
                "from the factor and drops this value; --override-kv "
                "ARCH.rope.scaling.attn_factor=float:X scales it\n", cmd, it->flag);
        return 2;
    default:
        return -1;
    }
}

void mvm_cli_meta_params(const mvm_cli_meta *m, mvm_engine_params *p)
{
    p->kv_overrides = (const char *const *)m->kv;
    p->n_kv_overrides = m->n_kv;
    p->rope = m->rope;
}

void mvm_cli_meta_usage(FILE *f)
{
    fprintf(f,
            "  --override-kv KEY=TYPE:VALUE[,...]  llama.cpp's: a metadata value in place of\n"
            "                the file's (TYPE int, float, bool or str), e.g.\n"
            "                qwen3moe.expert_used_count=int:10 (each token to 10 experts)\n"
            "  --rope-scaling none|linear|yarn, --rope-scale N (--rope-freq-scale 1/N),\n"
            "  --rope-freq-base B, --yarn-orig-ctx N, --yarn-ext-factor X,\n"
            "  --yarn-beta-fast X, --yarn-beta-slow X  llama.cpp's: the rotary embedding's\n"
            "                context extension in place of the file's (Qwen3's 128K:\n"
            "                --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768)\n");
}

void mvm_cli_meta_free(mvm_cli_meta *m)
{
    for (uint32_t i = 0; i < m->n_kv; i++)
        free(m->kv[i]);
    m->n_kv = 0;
}
