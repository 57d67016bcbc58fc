/*
 * llama.cpp's flags in a moevm command line (tools/cli_llama.c, read by cli.c's
 * mvm_cli_next): every spelling of every entry, in each command that takes it, read with
 * its value and noted or refused as the table says, the command's own options around it
 * unharmed; the command's own rows first; "=value", a missing value, a flag of another
 * command; and the table itself without a spelling twice for one command.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tools/cli.h"
#include "tools/cli_llama.h"
#include "tools/cli_sampling.h"

enum { O_MODEL = 1, O_CTX, O_NGL };

static void usage(FILE *f) { fputs("usage\n", f); }

static const mvm_cli_opt opts[] = {{"model", 'm', 1, O_MODEL}, {"ctx", 'c', 1, O_CTX},
                                   {"-ngl", 0, 1, O_NGL}, MVM_CLI_LLAMA_OPTS, {0}};

static char err_path[] = "/tmp/moevm_cli_llama_XXXXXX";
static int saved_stderr;

/* stderr into err_path, emptied; back where it was. */
static void capture(void)
{
    fflush(stderr);
    int fd = open(err_path, O_WRONLY | O_TRUNC);
    if (fd >= 0)
        dup2(fd, STDERR_FILENO), close(fd);
}

static void restore(char *err, size_t cap)
{
    fflush(stderr);
    dup2(saved_stderr, STDERR_FILENO);
    FILE *f = err ? fopen(err_path, "r") : NULL;
    size_t n = f ? fread(err, 1, cap - 1, f) : 0;
    if (f)
        fclose(f);
    if (err)
        err[n] = '\0';
}

/* Parses argv[0..argc) as `cmd` with the table above: the final code; *ctx the last --ctx
 * value (NULL: none); err the stderr it wrote. */
static int parse(const char *cmd, int argc, char **argv, const char **ctx, char *err,
                 size_t cap)
{
    capture();
    mvm_cli_iter it = {.cmd = cmd, .usage = usage, .opts = opts, .argc = argc, .argv = argv};
    int next;
    *ctx = NULL;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION)
        if (it.id == O_CTX)
            *ctx = it.value;
    restore(err, cap);
    return next;
}

static const char *const commands[] = {"run", "chat", "serve", "bench", "perplexity"};

/* Every spelling in every command that takes it: a note once, or the refusal, in one line
 * naming the flag; the value consumed; --ctx after it read. */
static void test_every_flag(void)
{
    int entries = 0, noted_twice = 0;
    for (size_t i = 0; mvm_cli_llama_at(i); i++, entries++) {
        const mvm_cli_llama_flag *f = mvm_cli_llama_at(i);
        CHECK(f->say && f->say[0] && f->cmds && f->names[0]);
        CHECK(!f->choices || f->value);
        for (int c = 0; c < 5; c++) {
            if (!(f->cmds & 1u << c))
                continue;
            for (int n = 0; n < MVM_CLI_LLAMA_NAMES && f->names[n]; n++) {
                const char *name = f->names[n];
                CHECK(name[0] == '-' && mvm_cli_llama_find(commands[c], name, strlen(name)) == f);
                char *argv[] = {"moevm", (char *)name,
                                f->value ? (char *)(f->choices ? f->choices[0] : "7") : "-c",
                                f->value ? "-c" : "12", f->value ? "12" : NULL, NULL};
                const char *ctx = NULL;
                char err[1024];
                const int rc = parse(commands[c], f->value ? 5 : 4, argv, &ctx, err, sizeof err);
                char want[128];
                snprintf(want, sizeof want, "moevm %s: %s: llama.cpp's, %s: ", commands[c], name,
                         f->refuse ? "not taken" : "accepted and ignored");
                if (f->refuse) {
                    CHECK(rc == MVM_CLI_BAD && !strncmp(err, want, strlen(want)));
                } else {
                    CHECK(rc == MVM_CLI_END && ctx && !strcmp(ctx, "12"));
                    /* said once a process: the first spelling met prints it */
                    CHECK(!err[0] || !strncmp(err, want, strlen(want)));
                    noted_twice += err[0] && n > 0;
                }
                CHECK(!err[0] || strchr(err, '\n') == err + strlen(err) - 1);
                if (rc != (f->refuse ? MVM_CLI_BAD : MVM_CLI_END))
                    fprintf(stderr, "%s %s: rc %d: %s\n", commands[c], name, rc, err);
            }
        }
    }
    CHECK(entries > 80 && noted_twice == 0);
}

/* No spelling twice for one command: the first would hide the second. */
static void test_unique(void)
{
    int dup = 0;
    for (size_t i = 0; mvm_cli_llama_at(i); i++)
        for (size_t j = i + 1; mvm_cli_llama_at(j); j++) {
            const mvm_cli_llama_flag *a = mvm_cli_llama_at(i), *b = mvm_cli_llama_at(j);
            for (int m = 0; m < MVM_CLI_LLAMA_NAMES && a->names[m]; m++)
                for (int n = 0; n < MVM_CLI_LLAMA_NAMES && b->names[n]; n++)
                    if ((a->cmds & b->cmds) && !strcmp(a->names[m], b->names[n]))
                        dup++, fprintf(stderr, "twice: %s\n", a->names[m]);
        }
    CHECK(dup == 0);
}

static void test_edges(void)
{
    const char *ctx;
    char err[1024];
    /* "=value", a switch given one, a value missing */
    char *a1[] = {"moevm", "--numa=distribute", "-c", "3", NULL};
    CHECK(parse("serve", 4, a1, &ctx, err, sizeof err) == MVM_CLI_END && ctx && !strcmp(ctx, "3"));
    char *a2[] = {"moevm", "--jinja=1", NULL};
    CHECK(parse("serve", 2, a2, &ctx, err, sizeof err) == MVM_CLI_BAD &&
          strstr(err, "--jinja takes no value"));
    char *a3[] = {"moevm", "--numa", NULL};
    CHECK(parse("serve", 2, a3, &ctx, err, sizeof err) == MVM_CLI_BAD &&
          strstr(err, "--numa needs a value"));
    char *a4[] = {"moevm", "--numa", "everywhere", NULL};
    CHECK(parse("serve", 3, a4, &ctx, err, sizeof err) == MVM_CLI_BAD &&
          strstr(err, "--numa everywhere: expected distribute, isolate or numactl"));
    /* a server's flag in run, a bench flag in serve: unknown there */
    char *a5[] = {"moevm", "--metrics", NULL};
    CHECK(parse("run", 2, a5, &ctx, err, sizeof err) == MVM_CLI_BAD &&
          strstr(err, "unknown option --metrics"));
    char *a6[] = {"moevm", "-pg", "1,2", NULL};
    CHECK(parse("serve", 3, a6, &ctx, err, sizeof err) == MVM_CLI_BAD);
    /* llama.cpp's one-dash names over a cluster of the command's letters ("-cb" is not
     * -c b), and the command's own letters and rows as ever */
    char *a7[] = {"moevm", "-cb", "-c512", "-ngl", "9", NULL};
    CHECK(parse("serve", 5, a7, &ctx, err, sizeof err) == MVM_CLI_END && ctx &&
          !strcmp(ctx, "512"));
    char *a8[] = {"moevm", "-md", "draft.gguf", NULL}; /* not -m d, then an argument */
    CHECK(parse("chat", 3, a8, &ctx, err, sizeof err) == MVM_CLI_BAD &&
          strstr(err, "-md: llama.cpp's, not taken: moevm has no speculative decoding"));
    /* a table without the rows knows none of them */
    static const mvm_cli_opt plain[] = {{"ctx", 'c', 1, O_CTX}, {0}};
    char *a9[] = {"moevm", "--jinja", NULL};
    mvm_cli_iter it = {.cmd = "serve", .usage = usage, .opts = plain, .argc = 2, .argv = a9};
    capture();
    CHECK(mvm_cli_next(&it) == MVM_CLI_BAD);
    restore(err, sizeof err);
    CHECK(strstr(err, "unknown option --jinja"));
}

/* llama.cpp's string_process_escapes, case by case; the breakers given unescaped, the
 * defaults (string literals) left alone, nothing under --no-escape. */
static void test_unescape(void)
{
    static const char *const cases[][2] = {
        {"a\\nb", "a\nb"}, {"\\t\\r\\'\\\"\\\\", "\t\r'\"\\"}, {"\\x41\\x7a", "Az"},
        {"\\x4", "\\x4"}, {"\\xZZ", "\\xZZ"}, {"\\q", "\\q"}, {"end\\", "end\\"},
        {"\\x00", "\\x00"}, {"\\\\n", "\\n"}, {"", ""}, {"plain", "plain"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s", cases[i][0]);
        mvm_cli_unescape(buf);
        CHECK(!strcmp(buf, cases[i][1]));
        if (strcmp(buf, cases[i][1]))
            fprintf(stderr, "'%s' -> '%s', wanted '%s'\n", cases[i][0], buf, cases[i][1]);
    }
    mvm_cli_sampling c;
    mvm_cli_sampling_init(&c);
    mvm_cli_sampling_escape(&c); /* the defaults: literals, not written */
    CHECK(c.n_breakers == 4 && !strcmp(c.breakers[0], "\n"));
    char given[] = "\\n", kept[] = "\\t";
    capture();
    CHECK(mvm_cli_sampling_option("chat", MVM_CLI_S_DRY_BREAKER, "--dry-sequence-breaker", given,
                                  &c) == 0);
    restore(NULL, 0);
    mvm_cli_sampling_escape(&c);
    CHECK(c.n_breakers == 1 && !strcmp(c.breakers[0], "\n"));
    mvm_cli_sampling_init(&c);
    CHECK(mvm_cli_sampling_option("chat", MVM_CLI_S_DRY_BREAKER, "--dry-sequence-breaker", kept,
                                  &c) == 0);
    CHECK(mvm_cli_sampling_option("chat", MVM_CLI_S_NO_ESCAPE, "--no-escape", NULL, &c) == 0);
    mvm_cli_sampling_escape(&c);
    CHECK(!strcmp(c.breakers[0], "\\t"));
}

static const char *doc_path; /* docs/llama-flags.md, the program's argument */

/* docs/llama-flags.md names every spelling, as `-tb`. */
static void test_documented(void)
{
    FILE *f = doc_path ? fopen(doc_path, "r") : NULL;
    static char doc[1 << 17];
    const size_t n = f ? fread(doc, 1, sizeof doc - 1, f) : 0;
    if (f)
        fclose(f);
    doc[n] = '\0';
    CHECK(n > 0);
    for (size_t i = 0; mvm_cli_llama_at(i); i++)
        for (int k = 0; k < MVM_CLI_LLAMA_NAMES && mvm_cli_llama_at(i)->names[k]; k++) {
            char quoted[64];
            snprintf(quoted, sizeof quoted, "`%s`", mvm_cli_llama_at(i)->names[k]);
            CHECK(strstr(doc, quoted));
            if (!strstr(doc, quoted))
                fprintf(stderr, "%s: %s not named\n", doc_path, quoted);
        }
}

int main(int argc, char **argv)
{
    int fd = mkstemp(err_path);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    saved_stderr = dup(STDERR_FILENO);
    RUN(test_every_flag);
    RUN(test_unique);
    RUN(test_edges);
    RUN(test_unescape);
    doc_path = argc > 1 ? argv[1] : NULL;
    RUN(test_documented);
    unlink(err_path);
    TEST_END();
}
