/*
 * The MOEVM_* options table: parsers, malformed values, unknown names, and docs/options.md
 * against the table (argv[1] is the path of docs/options.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine/forward/engine_options.h"
#include "interpose/options.h"
#include "policy/policy_options.h"
#include "vmm/options.h"
#include "vmm/error.h"
#include "vmm/file_replace.h"
#include "vmm/registry.h"

static void test_sizes(void)
{
    uint64_t v;
    CHECK(mvm_parse_size("0", &v) == 0 && v == 0);
    CHECK(mvm_parse_size("4096", &v) == 0 && v == 4096);
    CHECK(mvm_parse_size("64K", &v) == 0 && v == 65536);
    CHECK(mvm_parse_size("2MiB", &v) == 0 && v == 2u << 20);
    CHECK(mvm_parse_size("8g", &v) == 0 && v == 8ull << 30);
    CHECK(mvm_parse_size("1.5G", &v) == 0 && v == 3ull << 29);
    CHECK(mvm_parse_size("2TB", &v) == 0 && v == 2ull << 40);
    const char *bad[] = {"", "12Q", "-1", "G", "1.5", "0x10", " 8G", "8G ", "8GiBs", "1e30",
                         "nan", "inf", "+4", "4KK"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = mvm_parse_size(bad[i], &v);
        CHECK(rc != 0);
        if (rc == 0)
            fprintf(stderr, "  accepted '%s'\n", bad[i]);
    }
}

static void test_budgets(void)
{
    uint64_t b;
    double f;
    CHECK(mvm_parse_budget("auto", &b, &f) == 0 && b == MVM_BUDGET_AUTO);
    CHECK(mvm_parse_budget("25%", &b, &f) == 0 && b == 0 && f == 0.25);
    CHECK(mvm_parse_budget("100%", &b, &f) == 0 && f == 1.0);
    CHECK(mvm_parse_budget("12.5%", &b, &f) == 0 && f == 0.125);
    CHECK(mvm_parse_budget("8G", &b, &f) == 0 && b == 8ull << 30 && f == 0);
    const char *bad[] = {"0%", "101%", "%", "-5%", "x%", "12Q", "Auto!", " 5%", "0", "0G"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(mvm_parse_budget(bad[i], &b, &f) != 0);
}

static void test_env(void)
{
    mvm_option_value v;
    char msg[256];
    unsetenv("MOEVM_GPU_BUDGET");
    CHECK(mvm_option_get(&mvm_opt_gpu_budget, &v, msg, sizeof msg) == MVM_OK);
    CHECK((uint64_t)v.i == MVM_BUDGET_AUTO);
    setenv("MOEVM_GPU_BUDGET", "12Q", 1);
    CHECK(mvm_option_get(&mvm_opt_gpu_budget, &v, msg, sizeof msg) == MVM_ERR_OPTION);
    CHECK(strstr(msg, "MOEVM_GPU_BUDGET=12Q") != NULL && strstr(msg, "percentage") != NULL);
    CHECK(mvm_options_check() == MVM_ERR_OPTION);
    setenv("MOEVM_GPU_BUDGET", "40%", 1);
    CHECK(mvm_option_get(&mvm_opt_gpu_budget, &v, msg, sizeof msg) == MVM_OK && v.frac == 0.4);

    setenv("MOEVM_BACKEND", "CUDA", 1); /* choices are case-insensitive */
    CHECK(mvm_option_get(&mvm_opt_backend, &v, msg, sizeof msg) == MVM_OK && v.i == 2);
    setenv("MOEVM_BACKEND", "gpu", 1);
    CHECK(mvm_option_get(&mvm_opt_backend, &v, msg, sizeof msg) == MVM_ERR_OPTION);
    CHECK(strstr(msg, "one of auto|host|cuda") != NULL);
    unsetenv("MOEVM_BACKEND");
    setenv("MOEVM_DEVICE", "-1", 1);
    CHECK(mvm_option_get(&mvm_opt_device, &v, msg, sizeof msg) == MVM_ERR_OPTION);
    setenv("MOEVM_DEVICE", "99999999999", 1);
    CHECK(mvm_option_get(&mvm_opt_device, &v, msg, sizeof msg) == MVM_ERR_OPTION);
    unsetenv("MOEVM_DEVICE");
    /* an integer with a range: its ends in, past them out, and the range named */
    setenv("MOEVM_THREADS", "1024", 1);
    CHECK(mvm_option_get(&mvm_opt_threads, &v, msg, sizeof msg) == MVM_OK && v.i == 1024);
    setenv("MOEVM_THREADS", "0", 1);
    CHECK(mvm_option_get(&mvm_opt_threads, &v, msg, sizeof msg) == MVM_OK && v.i == 0);
    setenv("MOEVM_THREADS", "1025", 1);
    CHECK(mvm_option_get(&mvm_opt_threads, &v, msg, sizeof msg) == MVM_ERR_OPTION);
    CHECK(strstr(msg, "MOEVM_THREADS=1025: not valid (expected an integer in 0..1024)") != NULL);
    setenv("MOEVM_THREADS", "auto", 1); /* auto only where it is the default */
    CHECK(mvm_option_get(&mvm_opt_threads, &v, msg, sizeof msg) == MVM_ERR_OPTION);
    unsetenv("MOEVM_THREADS");
    unsetenv("MOEVM_MOVE_SPIN"); /* its default, whatever the test was run with */
    CHECK(mvm_option_get(&mvm_opt_move_spin, &v, msg, sizeof msg) == MVM_OK && v.i == -1);
    setenv("MOEVM_MOVE_SPIN", "100000", 1);
    CHECK(mvm_option_get(&mvm_opt_move_spin, &v, msg, sizeof msg) == MVM_OK && v.i == 100000);
    setenv("MOEVM_MOVE_SPIN", "100001", 1);
    CHECK(mvm_option_get(&mvm_opt_move_spin, &v, msg, sizeof msg) == MVM_ERR_OPTION);
    CHECK(strstr(msg, "(expected an integer in 0..100000, or auto)") != NULL);
    unsetenv("MOEVM_MOVE_SPIN");
    setenv("MOEVM_CUDA_LIBRARY", "", 1);
    CHECK(mvm_option_get(&mvm_opt_cuda_library, &v, msg, sizeof msg) == MVM_ERR_OPTION);
    unsetenv("MOEVM_CUDA_LIBRARY");
    /* An unknown name is a warning, not an error: the program goes on. */
    setenv("MOEVM_GPU_BUGDET", "8G", 1);
    CHECK(mvm_options_check() == MVM_OK);
    unsetenv("MOEVM_GPU_BUGDET");
    unsetenv("MOEVM_GPU_BUDGET");
}

static void test_docs_match_table(const char *path)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f)
        return;
    char *doc = NULL;
    size_t doc_len = 0;
    FILE *m = open_memstream(&doc, &doc_len);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, m);
    fclose(f);
    fclose(m);
    /* every layer's table, as the CLI registers them (registering again is a no-op) */
    mvm_options_register(&mvm_engine_options);
    mvm_options_register(&mvm_policy_options);
    mvm_options_register(&mvm_interpose_options);
    char *table = NULL;
    size_t table_len = 0;
    m = open_memstream(&table, &table_len);
    mvm_options_print_markdown(m);
    fclose(m);
    /* the whole table: a doc with rows beyond it (a stale option) fails as well */
    const char *at = strstr(doc, table);
    bool found = at && at[table_len] != '|';
    CHECK(found);
    if (!found)
        fprintf(stderr, "docs/options.md does not contain the table `moevm options --markdown` "
                "prints; regenerate it:\n%s", table);
    free(doc);
    free(table);
}

/* A layer's options join the table when registered: before, a name of theirs is unknown (a
 * warning) and its value unchecked; after, a bad value is an error naming it, and each
 * option is listed once however often its table is registered. */
static void test_layer_tables(void)
{
    setenv("MOEVM_KV_TYPE", "f8", 1);
    CHECK(mvm_options_check() == MVM_OK);
    CHECK(mvm_options_register(&mvm_engine_options) == MVM_OK);
    CHECK(mvm_options_check() == MVM_ERR_OPTION);
    CHECK(strstr(mvm_last_error(), "MOEVM_KV_TYPE=f8") != NULL);
    unsetenv("MOEVM_KV_TYPE");
    CHECK(mvm_options_check() == MVM_OK);
    CHECK(mvm_options_register(&mvm_policy_options) == MVM_OK);
    CHECK(mvm_options_register(&mvm_interpose_options) == MVM_OK);
    CHECK(mvm_options_register(&mvm_engine_options) == MVM_OK);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    mvm_options_print_effective(m);
    fclose(m);
    const char *names[] = {"MOEVM_GPU_BUDGET ", "MOEVM_KV_TYPE ", "MOEVM_EVICT ", "MOEVM_REPORT "};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *at = strstr(text, names[i]);
        CHECK(at != NULL && strstr(at + 1, names[i]) == NULL); /* there, once */
    }
    free(text);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *s = f ? calloc(1, 256) : NULL;
    if (s)
        fread(s, 1, 255, f);
    if (f)
        fclose(f);
    return s;
}

/* A committed write replaces the file; a failed one leaves it as it was, and no .tmp. */
static void test_file_replace(void)
{
    char dir[] = "/tmp/moevm_replace_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128], tmp[160];
    snprintf(path, sizeof path, "%s/f.txt", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    mvm_file_replace r;
    CHECK(mvm_file_replace_open(&r, path, "w") == MVM_OK);
    fputs("first", r.f);
    CHECK(mvm_file_replace_commit(&r, MVM_OK) == MVM_OK);
    char *s = slurp(path);
    CHECK(s && strcmp(s, "first") == 0);
    free(s);

    CHECK(mvm_file_replace_open(&r, path, "w") == MVM_OK);
    fputs("second, half wr", r.f);
    CHECK(mvm_file_replace_commit(&r, MVM_ERR_NOMEM) == MVM_ERR_NOMEM);
    s = slurp(path);
    CHECK(s && strcmp(s, "first") == 0);
    free(s);
    CHECK(access(tmp, F_OK) != 0);

    char nowhere[160];
    snprintf(nowhere, sizeof nowhere, "%s/no/such/dir/f", dir);
    CHECK(mvm_file_replace_open(&r, nowhere, "w") == MVM_ERR_BACKEND);
    CHECK(strstr(mvm_last_error(), "no/such/dir/f.tmp: cannot create") != NULL);
    remove(path);
    rmdir(dir);
}

static void test_registry(void)
{
    /* Many handles, removed in a different order: probe chains must survive deletions. */
    static char objs[5000];
    for (int i = 0; i < 5000; i++)
        CHECK(mvm_registry_add(&objs[i]));
    for (int i = 0; i < 5000; i += 2)
        CHECK(mvm_registry_remove(&objs[i]));
    int ok = 1;
    for (int i = 0; i < 5000; i++)
        ok &= mvm_registry_contains(&objs[i]) == (i % 2 == 1);
    CHECK(ok);
    CHECK(!mvm_registry_remove(&objs[0])); /* twice */
    for (int i = 1; i < 5000; i += 2)
        CHECK(mvm_registry_remove(&objs[i]));
    CHECK(!mvm_registry_contains(&objs[1]));
}

int main(int argc, char **argv)
{
    RUN(test_sizes);
    RUN(test_budgets);
    RUN(test_env);
    RUN(test_layer_tables);
    RUN(test_registry);
    RUN(test_file_replace);
    if (argc > 1)
        test_docs_match_table(argv[1]);
    else
        CHECK(!"usage: test_options docs/options.md");
    TEST_END();
}
