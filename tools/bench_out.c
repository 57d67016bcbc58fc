/* `moevm bench`'s output formats (bench_out.h). */
#include "tools/bench_out.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

const char *const mvm_bench_formats[] = {"text", "csv", "json", "jsonl", "md", NULL};

/* The CSV's and the JSON's fields, in this order; the table shows them as people read
 * them (a test's name, the hit rate in percent, the budget "home"). */
static const char csv_header[] =
    "model_filename,arch,experts_type,experts_gib,backend,n_threads,budget_gib,routing,type_k,"
    "type_v,test,n_prompt,n_gen,n_depth,repetitions,avg_ts,stddev_ts,hit_rate,"
    "mib_moved_per_token,load_wait\n";

/* llama-bench's: "tg128", and "tg128 @ d4096" after a cache of 4096 tokens. */
static void test_name(const mvm_bench_row *r, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s%u", r->gen ? "tg" : "pp", r->n_tokens);
    if (r->n_depth && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, " @ d%u", r->n_depth);
}

/* A string field of a CSV line, quoted: a path may hold commas or quotes. */
static void csv_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputs("\",", f);
}

/* A number of a CSV line; empty where it does not apply (negative). */
static void csv_number(FILE *f, double v, const char *sep)
{
    if (v >= 0)
        fprintf(f, "%.6g", v);
    fputs(sep, f);
}

static void write_csv(FILE *f, const mvm_bench_row *r)
{
    char test[40];
    test_name(r, test, sizeof test);
    csv_string(f, r->model);
    csv_string(f, r->arch);
    csv_string(f, r->experts);
    csv_number(f, r->experts_gib, ",");
    csv_string(f, r->backend);
    fprintf(f, "%d,", r->threads);
    csv_number(f, r->budget_gib, ",");
    csv_string(f, r->routing);
    csv_string(f, r->kv); /* llama-bench's type_k and type_v: one type here */
    csv_string(f, r->kv);
    csv_string(f, test);
    fprintf(f, "%u,%u,%u,%u,", r->gen ? 0 : r->n_tokens, r->gen ? r->n_tokens : 0, r->n_depth,
            r->reps);
    csv_number(f, r->avg_ts, ",");
    csv_number(f, r->stddev_ts, ",");
    csv_number(f, r->hit_rate, ",");
    csv_number(f, r->mib_per_token, ",");
    csv_number(f, r->load_wait, "\n");
}

/* A number of a JSON record; null where it does not apply (negative). */
static void json_number(cJSON *o, const char *key, double v)
{
    if (v >= 0)
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

/* The record as JSON text (malloc'd), formatted for the array or one line for JSON lines;
 * NULL when out of memory. */
static char *json_record(const mvm_bench_row *r, int one_line)
{
    char test[40];
    test_name(r, test, sizeof test);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model_filename", r->model);
    cJSON_AddStringToObject(o, "arch", r->arch);
    cJSON_AddStringToObject(o, "experts_type", r->experts);
    cJSON_AddNumberToObject(o, "experts_gib", r->experts_gib);
    cJSON_AddStringToObject(o, "backend", r->backend);
    cJSON_AddNumberToObject(o, "n_threads", r->threads);
    json_number(o, "budget_gib", r->budget_gib);
    cJSON_AddStringToObject(o, "routing", r->routing);
    cJSON_AddStringToObject(o, "type_k", r->kv);
    cJSON_AddStringToObject(o, "type_v", r->kv);
    cJSON_AddStringToObject(o, "test", test);
    cJSON_AddNumberToObject(o, "n_prompt", r->gen ? 0 : r->n_tokens);
    cJSON_AddNumberToObject(o, "n_gen", r->gen ? r->n_tokens : 0);
    cJSON_AddNumberToObject(o, "n_depth", r->n_depth);
    cJSON_AddNumberToObject(o, "repetitions", r->reps);
    cJSON_AddNumberToObject(o, "avg_ts", r->avg_ts);
    cJSON_AddNumberToObject(o, "stddev_ts", r->stddev_ts);
    cJSON *samples = cJSON_AddArrayToObject(o, "samples_ts");
    for (uint32_t i = 0; samples && i < r->reps; i++)
        cJSON_AddItemToArray(samples, cJSON_CreateNumber(r->samples_ts[i]));
    json_number(o, "hit_rate", r->hit_rate);
    cJSON_AddNumberToObject(o, "mib_moved_per_token", r->mib_per_token);
    json_number(o, "load_wait", r->load_wait);
    char *text = o ? (one_line ? cJSON_PrintUnformatted(o) : cJSON_Print(o)) : NULL;
    cJSON_Delete(o);
    return text;
}

static void write_text(FILE *f, const mvm_bench_row *r)
{
    char budget[32] = "home", hit[16] = "-", wait[16] = "-", test[40];
    if (r->budget_gib >= 0)
        snprintf(budget, sizeof budget, "%.2f", r->budget_gib);
    if (r->hit_rate >= 0)
        snprintf(hit, sizeof hit, "%.1f%%", 100 * r->hit_rate);
    if (r->load_wait >= 0)
        snprintf(wait, sizeof wait, "%.1f%%", 100 * r->load_wait);
    test_name(r, test, sizeof test);
    fprintf(f, "| %s | %s | %.2f | %s | %d | %s | %s | %s | %.2f +- %.2f | %s | %.2f | %s | %s |\n",
            r->arch, r->experts, r->experts_gib, r->backend, r->threads, budget, r->routing,
            test, r->avg_ts, r->stddev_ts, hit, r->mib_per_token, wait, r->kv);
}

/* The table's header, the CSV's header line, or the JSON array's opening: written with the
 * first record, so that a configuration that fails before any (an impossible budget) leaves
 * its one-line error alone. */
static void begin(mvm_bench_out *o)
{
    if (o->format == MVM_BENCH_TEXT || o->format == MVM_BENCH_MD)
        /* KV last: the scripts under bench/gpu read the columns before it by position */
        fputs("| arch | experts | experts GiB | backend | threads | budget GiB | routing | test "
              "| t/s | expert hits | MiB moved/token | load wait | KV |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", o->f);
    else if (o->format == MVM_BENCH_CSV)
        fputs(csv_header, o->f);
    else if (o->format == MVM_BENCH_JSON)
        fputs("[", o->f);
    fflush(o->f);
}

void mvm_bench_out_row(mvm_bench_out *o, const mvm_bench_row *r)
{
    if (!o->rows)
        begin(o);
    if (o->format == MVM_BENCH_CSV) {
        write_csv(o->f, r);
    } else if (o->format == MVM_BENCH_JSON || o->format == MVM_BENCH_JSONL) {
        char *text = json_record(r, o->format == MVM_BENCH_JSONL);
        if (o->format == MVM_BENCH_JSON)
            fputs(o->rows ? ",\n" : "\n", o->f);
        fprintf(o->f, o->format == MVM_BENCH_JSONL ? "%s\n" : "%s", text ? text : "null");
        free(text);
    } else {
        write_text(o->f, r);
    }
    o->rows++;
    fflush(o->f);
}

void mvm_bench_out_end(mvm_bench_out *o)
{
    if (o->format == MVM_BENCH_JSON)
        fputs(o->rows ? "\n]\n" : "[]\n", o->f);
    fflush(o->f);
}
