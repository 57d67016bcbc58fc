/* llama.cpp's further sampling options (cli_sampling.h). */
#include "tools/cli_sampling.h"

#include <string.h>

#include "tools/sampler_order.h"

static const char *const default_breakers[] = {"\n", ":", "\"", "*"};

/* --samplers "a;b;c" (llama.cpp's: names split at ';') into c's order. */
static int samplers_option(const char *cmd, const char *flag, const char *v, int chars,
                           mvm_cli_sampling *c)
{
    char bad[160], copy[512];
    const char *names[MVM_SAMPLER_MAX_STEPS + 1];
    size_t n = 0;
    int rc;
    if (chars) {
        rc = mvm_cli_sampler_chars(v, c->s.order, bad, sizeof bad);
    } else {
        snprintf(copy, sizeof copy, "%s", v);
        for (char *save = NULL, *t = strtok_r(copy, ";", &save);
             t && n <= MVM_SAMPLER_MAX_STEPS; t = strtok_r(NULL, ";", &save))
            names[n++] = t;
        rc = mvm_cli_sampler_names(names, n, c->s.order, bad, sizeof bad);
    }
    if (rc)
        fprintf(stderr, "moevm %s: %s %s: %s\n", cmd, flag, v, bad);
    return rc ? 2 : 0;
}

void mvm_cli_sampling_init(mvm_cli_sampling *c)
{
    *c = (mvm_cli_sampling){
        .s = {.dry_base = 1.75f, .dry_allowed_length = 2, .dynatemp_exponent = 1,
              .mirostat_tau = 5, .mirostat_eta = 0.1f, .xtc_threshold = 0.1f},
        .dry_last_n = 64, .n_breakers = 4, .think_budget = -1, .escape = 1};
    memcpy(c->breakers, default_breakers, sizeof default_breakers);
}

static int breaker(const char *cmd, const char *flag, const char *v, mvm_cli_sampling *c)
{
    if (!c->breakers_given) /* the first one given replaces the defaults */
        c->n_breakers = 0, c->breakers_given = 1;
    if (!strcmp(v, "none")) {
        c->n_breakers = 0;
        return 0;
    }
    if (!*v || c->n_breakers == MVM_CLI_MAX_BREAKERS) {
        fprintf(stderr, "moevm %s: %s: %s\n", cmd, flag,
                *v ? "at most 16 sequence breakers" : "an empty sequence breaker");
        return 2;
    }
    c->breakers[c->n_breakers++] = v;
    return 0;
}

/* A count, or llama.cpp's -1 (the context, or no budget: the option's meaning). */
static int count_or_none(const char *cmd, const char *flag, const char *v, int32_t *out)
{
    uint32_t u;
    if (v && !strcmp(v, "-1")) {
        *out = -1;
        return 0;
    }
    if (mvm_cli_u32(cmd, flag, v, 0, 1u << 24, &u))
        return 2;
    *out = (int32_t)u;
    return 0;
}

int mvm_cli_sampling_option(const char *cmd, int id, const char *f, const char *v,
                            mvm_cli_sampling *c)
{
    mvm_sampler_params *s = &c->s;
    const double big = 1e6;
    uint32_t u;
    switch (id) {
    case MVM_CLI_S_FREQ: return mvm_cli_float(cmd, f, v, -big, big, &s->frequency_penalty);
    case MVM_CLI_S_PRESENCE: return mvm_cli_float(cmd, f, v, -big, big, &s->presence_penalty);
    case MVM_CLI_S_DRY_MULT: return mvm_cli_float(cmd, f, v, 0, big, &s->dry_multiplier);
    case MVM_CLI_S_DRY_BASE: return mvm_cli_float(cmd, f, v, 1, big, &s->dry_base);
    case MVM_CLI_S_DRY_ALLOWED: return mvm_cli_u32(cmd, f, v, 0, 1u << 24, &s->dry_allowed_length);
    case MVM_CLI_S_DRY_LAST_N: return count_or_none(cmd, f, v, &c->dry_last_n);
    case MVM_CLI_S_DRY_BREAKER: return breaker(cmd, f, v ? v : "", c);
    case MVM_CLI_S_ESCAPE: c->escape = 1; return 0;
    case MVM_CLI_S_NO_ESCAPE: c->escape = 0; return 0;
    case MVM_CLI_S_SIGMA: return mvm_cli_float(cmd, f, v, -big, big, &s->top_n_sigma);
    case MVM_CLI_S_TYPICAL: return mvm_cli_float(cmd, f, v, 0, 1, &s->typical_p);
    case MVM_CLI_S_XTC_P: return mvm_cli_float(cmd, f, v, 0, 1, &s->xtc_probability);
    case MVM_CLI_S_XTC_T: return mvm_cli_float(cmd, f, v, 0, 1, &s->xtc_threshold);
    case MVM_CLI_S_DYNATEMP: return mvm_cli_float(cmd, f, v, 0, 100, &s->dynatemp_range);
    case MVM_CLI_S_DYNATEMP_EXP:
        return mvm_cli_float(cmd, f, v, 1e-6, 100, &s->dynatemp_exponent);
    case MVM_CLI_S_MIROSTAT:
        if (mvm_cli_u32(cmd, f, v, 0, 2, &u))
            return 2;
        s->mirostat = (int32_t)u;
        return 0;
    case MVM_CLI_S_MIROSTAT_LR: return mvm_cli_float(cmd, f, v, 1e-6, 100, &s->mirostat_eta);
    case MVM_CLI_S_MIROSTAT_ENT: return mvm_cli_float(cmd, f, v, 1e-6, 100, &s->mirostat_tau);
    case MVM_CLI_S_THINK: return count_or_none(cmd, f, v, &c->think_budget);
    case MVM_CLI_S_THINK_MSG: c->think_message = v; return 0;
    case MVM_CLI_S_SAMPLERS: return samplers_option(cmd, f, v ? v : "", 0, c);
    case MVM_CLI_S_SEQ: return samplers_option(cmd, f, v ? v : "", 1, c);
    default: return -1;
    }
}

void mvm_cli_sampling_apply(const mvm_cli_sampling *c, uint32_t n_ctx, mvm_sampler_params *s)
{
    const mvm_sampler_params *o = &c->s;
    s->frequency_penalty = o->frequency_penalty, s->presence_penalty = o->presence_penalty;
    s->dry_multiplier = o->dry_multiplier, s->dry_base = o->dry_base;
    s->dry_allowed_length = o->dry_allowed_length;
    s->dry_last_n = c->dry_last_n < 0 ? n_ctx : (uint32_t)c->dry_last_n;
    s->top_n_sigma = o->top_n_sigma, s->typical_p = o->typical_p;
    s->xtc_probability = o->xtc_probability, s->xtc_threshold = o->xtc_threshold;
    s->dynatemp_range = o->dynatemp_range, s->dynatemp_exponent = o->dynatemp_exponent;
    s->mirostat = o->mirostat, s->mirostat_tau = o->mirostat_tau;
    s->mirostat_eta = o->mirostat_eta;
    memcpy(s->order, o->order, sizeof s->order);
}

void mvm_cli_sampling_escape(mvm_cli_sampling *c)
{
    for (size_t i = 0; c->escape && c->breakers_given && i < c->n_breakers; i++)
        mvm_cli_unescape((char *)c->breakers[i]); /* argv's, which may be written */
}

int mvm_cli_sampling_breakers(const char *cmd, const mvm_cli_sampling *c,
                              const mvm_sampler_params *s, const mvm_engine *e,
                              mvm_dry_breakers **out)
{
    *out = NULL;
    const int dry = s->dry_multiplier > 0 && s->dry_last_n && !s->mirostat;
    if (!(dry || c->requests_sample) || !c->n_breakers)
        return 0;
    if (mvm_dry_breakers_create(e, c->breakers, c->n_breakers, out) != MVM_OK)
        return mvm_cli_error(cmd, "--dry-sequence-breaker");
    return 0;
}

void mvm_cli_sampling_usage(FILE *f)
{
    fprintf(f,
            "  --frequency-penalty F, --presence-penalty P  taken from the logit of a token\n"
            "                  among the last --repeat-last-n: F per time seen, P once (0: off)\n"
            "  --dry-multiplier M  DRY (0: off): a token that would extend a repetition of N\n"
            "                  tokens loses M * --dry-base (1.75) ^ (N - --dry-allowed-length\n"
            "                  (2)), over the last --dry-penalty-last-n (64; -1: the context)\n"
            "  --dry-sequence-breaker S  a repetition stops at S (repeatable; replaces the\n"
            "                  defaults \\n : \" *; none: no breaker; \\n is a newline)\n"
            "  --top-nsigma N  the logits within N standard deviations of the top (-1: off)\n"
            "  --typical P     locally typical sampling (1: off)\n"
            "  --xtc-probability P, --xtc-threshold T  XTC: with chance P, the tokens above T\n"
            "                  but the least likely are dropped (0 and 0.1: off)\n"
            "  --dynatemp-range R, --dynatemp-exp E  the temperature moves within --temp +-R\n"
            "                  by the entropy (0 and 1: off)\n"
            "  --mirostat 1|2  Mirostat in place of the steps above (--mirostat-ent tau 5,\n"
            "                  --mirostat-lr eta 0.1; 0: off)\n"
            "  --samplers N;N;...  the steps in this order, llama.cpp's names (default\n"
            "                  penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;\n"
            "                  temperature); --sampling-seq: their letters (edskypmxt)\n"
            "  --reasoning-budget N  chat, serve: a reply's reasoning ends after N tokens (0:\n"
            "                  at once; -1, the default: no budget), with\n"
            "                  --reasoning-budget-message TEXT before its end mark\n"
            "  -e, --escape, --no-escape  llama.cpp's escapes (\\n \\t \\\\ \\xHH ...) read in\n"
            "                  run's prompt and the sequence breakers (default: on)\n");
}
