/*
 * A request's sampling (serve_api.h): the fields llama.cpp's server reads
 * (tools/server/server-schema.cpp), with its ranges, over the command line's defaults.
 * OpenAI's frequency_penalty and presence_penalty are llama.cpp's too. A request that
 * turns DRY on with its own dry_sequence_breakers gets them made here, on the connection's
 * thread (a scan of the vocabulary), so that the scheduler only hands them to its sampler.
 */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "moevm/moevm.h"
#include "tools/cli_think.h"
#include "tools/sampler_order.h"
#include "tools/serve_api.h"

/* The fields of llama.cpp's first sampling steps, and the reply's length. */
static int basics(const serve_api *a, const cJSON *body, serve_req *r, char *bad, size_t cap)
{
    double t = a->defaults.temperature, p = a->defaults.top_p, k = a->defaults.top_k;
    double mp = a->defaults.min_p, rp = a->defaults.repeat_penalty;
    double seed = (double)(a->defaults.seed & 0xFFFFFFFF), max = a->default_max_tokens;
    double mct = -2, np = -2, last = a->defaults.repeat_last_n, tmax = 0;
    int bad_any = serve_api_number(body, "temperature", 0, 100, 0, &t, bad, cap) |
                  serve_api_number(body, "top_p", 1e-6, 1, 0, &p, bad, cap) |
                  serve_api_number(body, "top_k", 0, 1 << 24, 1, &k, bad, cap) |
                  serve_api_number(body, "min_p", 0, 1, 0, &mp, bad, cap) |
                  serve_api_number(body, "repeat_penalty", 1e-3, 100, 0, &rp, bad, cap) |
                  serve_api_number(body, "seed", -9.2e18, 9.2e18, 1, &seed, bad, cap) |
                  serve_api_number(body, "max_tokens", -1, 1 << 24, 1, &max, bad, cap) |
                  serve_api_number(body, "max_completion_tokens", -1, 1 << 24, 1, &mct, bad,
                                   cap) |
                  serve_api_number(body, "n_predict", -1, 1 << 24, 1, &np, bad, cap) |
                  serve_api_number(body, "repeat_last_n", -1, 1 << 24, 1, &last, bad, cap) |
                  serve_api_number(body, "t_max_predict_ms", -1, 1e12, 0, &tmax, bad, cap);
    if (bad_any)
        return -1;
    r->sp.temperature = (float)t, r->sp.top_p = (float)p, r->sp.top_k = (int32_t)k;
    r->sp.min_p = (float)mp, r->sp.repeat_penalty = (float)rp;
    r->sp.seed = (uint64_t)(int64_t)seed;
    /* llama.cpp's -1: the whole context */
    r->sp.repeat_last_n = last < 0 ? a->n_ctx : (uint32_t)last;
    r->max_tokens = (int32_t)(np > -2 ? np : mct > -2 ? mct : max);
    r->t_max_predict = tmax > 0 ? tmax / 1e3 : 0; /* llama.cpp's -1 and 0: none */
    return 0;
}

/* A float field of the sampler's, kept where the body does not have it. */
typedef struct float_field {
    const char *key;
    size_t offset; /* in mvm_sampler_params */
    double lo, hi;
} float_field;

#define FIELD(key, member, lo, hi) {key, offsetof(mvm_sampler_params, member), lo, hi}
static const float_field float_fields[] = {
    FIELD("frequency_penalty", frequency_penalty, -100, 100),
    FIELD("presence_penalty", presence_penalty, -100, 100),
    FIELD("dry_multiplier", dry_multiplier, 0, 1e4),
    FIELD("top_n_sigma", top_n_sigma, -1e4, 1e4),
    FIELD("typical_p", typical_p, 0, 1),
    FIELD("xtc_probability", xtc_probability, 0, 1),
    FIELD("xtc_threshold", xtc_threshold, 0, 1),
    FIELD("dynatemp_range", dynatemp_range, 0, 100),
    FIELD("dynatemp_exponent", dynatemp_exponent, 1e-6, 100),
    FIELD("mirostat_tau", mirostat_tau, 0, 100),
    FIELD("mirostat_eta", mirostat_eta, 0, 100),
};
#undef FIELD

/* The further steps' fields. */
static int further(const serve_api *a, const cJSON *body, serve_req *r, char *bad, size_t cap)
{
    mvm_sampler_params *sp = &r->sp;
    for (size_t i = 0; i < sizeof float_fields / sizeof *float_fields; i++) {
        float *f = (float *)(void *)((char *)sp + float_fields[i].offset);
        double v = *f;
        if (serve_api_number(body, float_fields[i].key, float_fields[i].lo, float_fields[i].hi,
                             0, &v, bad, cap))
            return -1;
        *f = (float)v;
    }
    double base = sp->dry_base, allowed = sp->dry_allowed_length, miro = sp->mirostat;
    double keep = sp->min_keep, last = -2;
    if (serve_api_number(body, "dry_base", 0, 1e4, 0, &base, bad, cap) ||
        serve_api_number(body, "dry_allowed_length", 0, 1 << 24, 1, &allowed, bad, cap) ||
        serve_api_number(body, "dry_penalty_last_n", -1, 1 << 24, 1, &last, bad, cap) ||
        serve_api_number(body, "mirostat", 0, 2, 1, &miro, bad, cap) ||
        serve_api_number(body, "min_keep", 0, 1 << 24, 1, &keep, bad, cap))
        return -1;
    /* llama.cpp's: a base under 1 is the default's */
    sp->dry_base = base < 1 ? a->defaults.dry_base : (float)base;
    sp->dry_allowed_length = (uint32_t)allowed, sp->mirostat = (int32_t)miro;
    sp->min_keep = (uint32_t)keep;
    if (last > -2) /* -1: the context; 0: off */
        sp->dry_last_n = last < 0 ? a->n_ctx : (uint32_t)last;
    return 0;
}

/* `samplers`: the steps' order, llama.cpp's names (an array) or letters (a string). */
static int order(const cJSON *body, serve_req *r, char *bad, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "samplers");
    if (!v || cJSON_IsNull(v))
        return 0;
    char why[160] = "";
    int rc = -1;
    if (cJSON_IsString(v)) {
        rc = mvm_cli_sampler_chars(v->valuestring, r->sp.order, why, sizeof why);
    } else if (cJSON_IsArray(v)) {
        const char *names[MVM_SAMPLER_MAX_STEPS + 1];
        size_t n = 0;
        rc = 0;
        for (const cJSON *it = v->child; it && !rc; it = it->next, n++)
            if (n > MVM_SAMPLER_MAX_STEPS || !cJSON_IsString(it))
                rc = -1;
            else
                names[n] = it->valuestring;
        rc = rc ? rc : mvm_cli_sampler_names(names, n, r->sp.order, why, sizeof why);
    }
    if (rc)
        snprintf(bad, cap, "'samplers' must be an array of 1 to %d sampler names or a string "
                 "of their letters%s%s", MVM_SAMPLER_MAX_STEPS, why[0] ? ": " : "", why);
    return rc;
}

/* dry_sequence_breakers, made for r when its DRY is on. */
static int breakers(const serve_api *a, const cJSON *body, serve_req *r, char *bad, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "dry_sequence_breakers");
    r->breakers = a->default_breakers;
    if (!v || cJSON_IsNull(v))
        return 0;
    const char *list[16];
    const int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    int ok = n >= 1 && n <= 16, i = 0;
    for (const cJSON *it = ok ? v->child : NULL; ok && it; it = it->next, i++)
        ok = cJSON_IsString(it) && it->valuestring[0], list[i] = it->valuestring;
    if (!ok) {
        snprintf(bad, cap, "'dry_sequence_breakers' must be an array of 1 to 16 non-empty "
                 "strings");
        return -1;
    }
    if (!(r->sp.dry_multiplier > 0 && r->sp.dry_last_n && !r->sp.mirostat))
        return 0; /* DRY is off: nothing reads them */
    if (mvm_dry_breakers_create(a->e, list, (size_t)n, &r->own_breakers) != MVM_OK) {
        snprintf(bad, cap, "'dry_sequence_breakers': %s", mvm_last_error());
        return -1;
    }
    r->breakers = r->own_breakers;
    return 0;
}

int serve_sampling_read(const serve_api *a, const cJSON *body, serve_req *r, char *bad,
                        size_t cap)
{
    r->sp = a->defaults;
    return basics(a, body, r, bad, cap) || further(a, body, r, bad, cap) ||
                   order(body, r, bad, cap) || breakers(a, body, r, bad, cap)
               ? -1
               : 0;
}

int serve_think_read(const serve_api *a, const cJSON *body, serve_req *r, char *bad,
                     size_t cap)
{
    double budget = -1;
    if (serve_api_number(body, "reasoning_budget_tokens", -1, 1 << 24, 1, &budget, bad, cap) ||
        (budget < 0 && serve_api_number(body, "thinking_budget_tokens", -1, 1 << 24, 1,
                                        &budget, bad, cap)))
        return -1;
    r->think_tokens = budget >= 0 ? (int32_t)budget : a->default_think_budget;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(body, "reasoning_budget_message");
    if (m && !cJSON_IsNull(m) && (!cJSON_IsString(m) || strlen(m->valuestring) > 1024)) {
        snprintf(bad, cap, "'reasoning_budget_message' must be a string of at most 1024 bytes");
        return -1;
    }
    const char *msg = cJSON_IsString(m) ? m->valuestring : a->default_think_message;
    if (msg && msg[0] && !(r->think_message = strdup(msg)))
        return -1;
    return 0;
}

int serve_think_bind(const serve_api *a, serve_req *r, char *bad, size_t cap)
{
    if (r->kind != SERVE_CHAT || r->think_tokens < 0)
        return 0;
    char why[400];
    if (mvm_cli_think_make(a->e, r->reply.syntax, r->think_tokens, r->think_message,
                           r->reply.thinking_open, &r->think, why, sizeof why)) {
        snprintf(bad, cap, "'reasoning_budget_tokens': %s", why);
        return -1;
    }
    r->thinking = 1;
    return 0;
}
