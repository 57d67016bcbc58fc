/*
 * The sampler's draws, for tests/ref/check_sampler.py, which compares them with its NumPy
 * rendering of llama.cpp's sampler chain. Reads a case a line from standard input:
 *   {"params": {...mvm_sampler_params' fields, "order": [steps]...}, "logits": [...], "prev": [...],
 *    "draws": N, "sequence": false}
 * and writes a line for each: {"counts": [...]} (how often each token was drawn in N
 * draws from the same logits) and "last" (mvm_sampler_last_probs after the first draw: the
 * distribution it was drawn from), or with "sequence": true {"seq": [...]} (the N tokens drawn
 * one after the other, which Mirostat's state makes differ). A case the sampler refuses
 * writes {"error": "..."}.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moevm/engine.h"
#include "vmm/error.h"

static double field(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static mvm_sampler_params params_of(const cJSON *o)
{
    mvm_sampler_params p = {
        .temperature = (float)field(o, "temperature"), .top_k = (int32_t)field(o, "top_k"),
        .top_p = (float)field(o, "top_p"), .min_p = (float)field(o, "min_p"),
        .seed = (uint64_t)field(o, "seed"), .repeat_penalty = (float)field(o, "repeat_penalty"),
        .repeat_last_n = (uint32_t)field(o, "repeat_last_n"),
        .frequency_penalty = (float)field(o, "frequency_penalty"),
        .presence_penalty = (float)field(o, "presence_penalty"),
        .dry_multiplier = (float)field(o, "dry_multiplier"),
        .dry_base = (float)field(o, "dry_base"),
        .dry_allowed_length = (uint32_t)field(o, "dry_allowed_length"),
        .dry_last_n = (uint32_t)field(o, "dry_last_n"),
        .top_n_sigma = (float)field(o, "top_n_sigma"), .typical_p = (float)field(o, "typical_p"),
        .xtc_probability = (float)field(o, "xtc_probability"),
        .xtc_threshold = (float)field(o, "xtc_threshold"),
        .dynatemp_range = (float)field(o, "dynatemp_range"),
        .dynatemp_exponent = (float)field(o, "dynatemp_exponent"),
        .mirostat = (int32_t)field(o, "mirostat"), .mirostat_tau = (float)field(o, "mirostat_tau"),
        .mirostat_eta = (float)field(o, "mirostat_eta"),
        .min_keep = (uint32_t)field(o, "min_keep"),
    };
    int i = 0; /* "order": the steps' numbers (MVM_SAMPLER_*) */
    for (const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "order") ?
                              cJSON_GetObjectItemCaseSensitive(o, "order")->child : NULL;
         v && i < MVM_SAMPLER_MAX_STEPS; v = v->next)
        p.order[i++] = (uint8_t)v->valuedouble;
    return p;
}

/* The numbers of array k of o into a malloc'd array (*n of them). */
static void *numbers(const cJSON *o, const char *k, int floats, uint32_t *n)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, k);
    *n = (uint32_t)cJSON_GetArraySize(a);
    char *out = malloc(((size_t)*n + 1) * 4), *at = out;
    for (const cJSON *v = a ? a->child : NULL; out && v; v = v->next, at += 4) {
        if (floats)
            *(float *)(void *)at = (float)v->valuedouble;
        else
            *(int32_t *)(void *)at = (int32_t)v->valuedouble;
    }
    return out;
}

/* "last": {"token", "chosen", "ids", "probs"} of mvm_sampler_last_probs. */
static void last_probs(cJSON *out, const mvm_sampler *s, int32_t t)
{
    int32_t ids[MVM_SAMPLER_MAX_PROBS];
    float p[MVM_SAMPLER_MAX_PROBS], chosen;
    const uint32_t k = mvm_sampler_last_probs(s, MVM_SAMPLER_MAX_PROBS, ids, p, &chosen);
    cJSON *o = cJSON_AddObjectToObject(out, "last");
    cJSON_AddNumberToObject(o, "token", t);
    cJSON_AddNumberToObject(o, "chosen", chosen);
    cJSON_AddItemToObject(o, "ids", cJSON_CreateIntArray(ids, (int)k));
    cJSON_AddItemToObject(o, "probs", cJSON_CreateFloatArray(p, (int)k));
}

static void run_case(const cJSON *c)
{
    uint32_t n, n_prev;
    float *logits = numbers(c, "logits", 1, &n);
    int32_t *prev = numbers(c, "prev", 0, &n_prev);
    const int draws = (int)field(c, "draws");
    const int sequence = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "sequence"));
    const mvm_sampler_params p = params_of(cJSON_GetObjectItemCaseSensitive(c, "params"));
    mvm_sampler *s = NULL;
    cJSON *out = cJSON_CreateObject();
    if (mvm_sampler_create(&p, n, &s) != MVM_OK) {
        cJSON_AddStringToObject(out, "error", mvm_last_error());
    } else {
        int *counts = calloc(n, sizeof *counts);
        cJSON *seq = cJSON_AddArrayToObject(out, sequence ? "seq" : "draws_out_of_range");
        for (int d = 0; d < draws; d++) {
            const int32_t t = mvm_sampler_sample_after(s, logits, n, prev, n_prev);
            if (d == 0) /* the distribution the first draw was made from */
                last_probs(out, s, t);
            if (t < 0 || (uint32_t)t >= n || sequence)
                cJSON_AddItemToArray(seq, cJSON_CreateNumber(t));
            else
                counts[t]++;
        }
        if (!sequence)
            cJSON_AddItemToObject(out, "counts", cJSON_CreateIntArray(counts, (int)n));
        free(counts);
    }
    char *text = cJSON_PrintUnformatted(out);
    puts(text);
    free(text);
    cJSON_Delete(out);
    mvm_sampler_free(s);
    free(logits);
    free(prev);
}

int main(void)
{
    static char line[1 << 20];
    while (fgets(line, sizeof line, stdin)) {
        cJSON *c = cJSON_Parse(line);
        if (!c) {
            fprintf(stderr, "sampler_draws: a line that is not JSON\n");
            return 2;
        }
        run_case(c);
        cJSON_Delete(c);
    }
    return 0;
}
