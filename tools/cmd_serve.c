/*
 * `moevm serve`: an OpenAI-compatible HTTP server over one engine (docs/serve.md). The
 * engine runs on a thread of its own (serve_sched.c), the HTTP front on libmicrohttpd's
 * (serve_http.c); this thread waits for SIGINT or SIGTERM, then stops both in order: the
 * engine thread ends what runs with an error its client sees, then the connections close.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli_engine.h"
#include "tools/serve.h"
#include "tools/serve_api.h"

enum { O_HOST = 1, O_PORT, O_PARALLEL, O_ALIAS, O_QUEUE, O_API_KEY, O_API_KEY_FILE,
       O_REASONING, O_TIMEOUT, O_PREFIX };

static void usage(FILE *f)
{
    fprintf(f, "usage: moevm serve -m MODEL.gguf [--host ADDR] [--port N] [-np SLOTS] [options]\n"
               "An OpenAI-compatible API: POST /v1/chat/completions, /v1/completions and\n"
               "/v1/responses (with \"stream\": true, server-sent events), GET /v1/models,\n"
               "/health, /metrics; Anthropic's POST /v1/messages; and llama-server's own:\n"
               "POST /completion, /infill, /tokenize, /detokenize, /apply-template, the\n"
               "input_tokens counts, GET /props, /slots (docs/serve.md).\n"
               "  --host ADDR     the IPv4 address to listen on (default 127.0.0.1)\n"
               "  --port N        the port (default 8080; 0: any free one, printed)\n"
               "  -np, --parallel N  requests served at once, each with its own KV cache of\n"
               "                  -c positions (default 4)\n"
               "  --queue N       requests that may wait for a slot before 503 (default 64)\n"
               "  -to, --timeout N  seconds a connection may stay idle before it is closed\n"
               "                  (default 600, llama-server's; 0: never)\n"
               "  --api-prefix PATH  every route under PATH (/api: /api/v1/models...)\n"
               "  --alias NAME    the model's id in the API (default: its general.name)\n"
               "  --api-key KEY[,KEY...]  every route but /health wants one of these, as\n"
               "                  'Authorization: Bearer KEY' (default: none asked for)\n"
               "  --api-key-file FILE  keys, one a line ('#' lines are comments): not on the\n"
               "                  command line, where other users of the machine see them\n"
               "  --reasoning-format FMT  a chat's reasoning: 'auto' (default; also\n"
               "                  'deepseek'): in reasoning_content; 'none': left in content\n"
               "  -n              the default max_tokens (default -1: until the reply ends)\n");
    mvm_cli_engine_usage(f);
}

#define MAX_KEYS 256

struct serve_args {
    mvm_cli_engine o;
    const char *host, *alias, *prefix;
    uint32_t port, parallel, queue, timeout;
    char *keys[MAX_KEYS];     /* --api-key's and --api-key-file's, each malloc'd */
    uint32_t n_keys;
    int reasoning_none;       /* --reasoning-format none */
};

/* --api-prefix: a path, "/" and more, without a final "/" (llama-server's; "" or "/": none);
 * 0, or 2 after a one-line error. */
static int api_prefix(const char *flag, const char *v, struct serve_args *a)
{
    const size_t n = strlen(v);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] <= ' ' || v[i] == '?' || v[i] == '#' || v[i] == 0x7f) {
            fprintf(stderr, "moevm serve: %s: a path without spaces, '?' or '#'\n", flag);
            return 2;
        }
    if (n > 1 && (v[0] != '/' || v[n - 1] == '/' || n > 200)) {
        fprintf(stderr, "moevm serve: %s %s: a path that starts with '/' and does not end "
                "with one (/api), of 200 bytes at most\n", flag, v);
        return 2;
    }
    a->prefix = n > 1 ? v : NULL;
    return 0;
}

/* Adds text[0..n) as a key, white space around it dropped; 2 after a one-line error. */
static int add_key(struct serve_args *a, const char *flag, const char *text, size_t n)
{
    while (n && (*text == ' ' || *text == '\t'))
        text++, n--;
    while (n && strchr(" \t\r", text[n - 1]))
        n--;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)text[i] < 0x21 || (unsigned char)text[i] > 0x7E) {
            /* what an HTTP header carries whole: printable ASCII, no spaces */
            fprintf(stderr, "moevm serve: %s: a key holds a space or a character that is not "
                    "printable ASCII\n", flag);
            return 2;
        }
    if (!n) {
        fprintf(stderr, "moevm serve: %s: an empty key\n", flag);
        return 2;
    }
    if (a->n_keys == MAX_KEYS || !(a->keys[a->n_keys] = strndup(text, n))) {
        fprintf(stderr, "moevm serve: %s: more than %d keys\n", flag, MAX_KEYS);
        return 2;
    }
    a->n_keys++;
    return 0;
}

/* --api-key's comma-separated keys, or --api-key-file's lines ('#' ones comments). */
static int add_keys(struct serve_args *a, const char *flag, const char *text, int file)
{
    size_t len = strlen(text);
    if (!file && !len)
        return add_key(a, flag, text, 0); /* its message: an empty key */
    char *owned = file ? mvm_cli_read_text("serve", text, &len) : NULL;
    if (file && !owned)
        return 2;
    const char *at = file ? owned : text, *end = at + len;
    const char sep = file ? '\n' : ',';
    int bad = 0, any = 0;
    while (!bad && at < end) {
        const char *stop = memchr(at, sep, (size_t)(end - at));
        stop = stop ? stop : end;
        const int blank = strspn(at, " \t\r") >= (size_t)(stop - at);
        if (!(file && (*at == '#' || blank)))
            bad = add_key(a, flag, at, (size_t)(stop - at)), any = 1;
        at = stop + 1;
    }
    if (!bad && !any) {
        fprintf(stderr, "moevm serve: %s %s: no key in it\n", flag, text);
        bad = 2;
    }
    free(owned);
    return bad;
}

static int parse_args(int argc, char **argv, struct serve_args *a)
{
    static const mvm_cli_opt opts[] = {MVM_CLI_ENGINE_OPTS,
                                       {"host", 0, 1, O_HOST},
                                       {"port", 0, 1, O_PORT},
                                       {"parallel", 0, 1, O_PARALLEL},
                                       {"-np", 0, 1, O_PARALLEL},
                                       {"alias", 0, 1, O_ALIAS},
                                       {"queue", 0, 1, O_QUEUE},
                                       {"timeout", 0, 1, O_TIMEOUT},
                                       {"-to", 0, 1, O_TIMEOUT},
                                       {"api-prefix", 0, 1, O_PREFIX},
                                       {"api-key", 0, 1, O_API_KEY},
                                       {"api-key-file", 0, 1, O_API_KEY_FILE},
                                       {"reasoning-format", 0, 1, O_REASONING},
                                       {0}};
    mvm_cli_iter it = {.cmd = "serve", .usage = usage, .opts = opts, .argc = argc, .argv = argv};
    int next;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION) {
        int bad = mvm_cli_engine_option(&it, &a->o);
        if (bad >= 0) {
            if (bad)
                return 2;
            continue;
        }
        bad = 0;
        switch (it.id) {
        case O_HOST: {
            struct in_addr addr;
            if (inet_pton(AF_INET, it.value, &addr) != 1) {
                fprintf(stderr, "moevm serve: --host %s: expected an IPv4 address (127.0.0.1, "
                        "0.0.0.0)\n", it.value);
                return 2;
            }
            a->host = it.value;
            break;
        }
        case O_ALIAS:
            a->alias = it.value;
            if (!*it.value) { /* the name clients ask for in "model" */
                fprintf(stderr, "moevm serve: --alias: expected a name, not an empty one\n");
                return 2;
            }
            break;
        case O_PORT: bad = mvm_cli_u32("serve", it.flag, it.value, 0, 65535, &a->port); break;
        case O_PARALLEL:
            bad = mvm_cli_u32("serve", it.flag, it.value, 1, 256, &a->parallel);
            break;
        case O_QUEUE: bad = mvm_cli_u32("serve", it.flag, it.value, 0, 1u << 16, &a->queue); break;
        case O_TIMEOUT:
            bad = mvm_cli_u32("serve", it.flag, it.value, 0, 1u << 24, &a->timeout);
            break;
        case O_PREFIX: bad = api_prefix(it.flag, it.value, a); break;
        case O_API_KEY: bad = add_keys(a, it.flag, it.value, 0); break;
        case O_API_KEY_FILE: bad = add_keys(a, it.flag, it.value, 1); break;
        case O_REASONING:
            a->reasoning_none = !strcmp(it.value, "none");
            if (!a->reasoning_none && strcmp(it.value, "auto") && strcmp(it.value, "deepseek")) {
                fprintf(stderr, "moevm serve: --reasoning-format %s: expected auto, deepseek or "
                        "none\n", it.value);
                bad = 2;
            }
            break;
        }
        if (bad)
            return 2;
    }
    if (next != MVM_CLI_END)
        return next;
    return mvm_cli_engine_check("serve", &a->o);
}

static void *engine_thread(void *s)
{
    serve_run(s);
    return NULL;
}

static void print_stats(serve *s)
{
    serve_metrics m;
    serve_get_metrics(s, &m);
    const mvm_engine_stats *e = &m.engine;
    fprintf(stderr, "served %" PRIu64 " requests (%" PRIu64 " completed, %" PRIu64
            " cancelled, %" PRIu64 " failed) | prompts %" PRIu64 " tokens (%" PRIu64
            " reused) | generated %" PRIu64 " tokens | expert accesses %" PRIu64,
            m.requests, m.completed, m.cancelled, m.failed, m.prompt_tokens, m.reused_tokens,
            m.generated_tokens, e->accesses);
    if (e->budget_bytes)
        fprintf(stderr, " (hit %.1f%%) | moved %.1f MiB\n",
                e->accesses ? 100.0 * (double)e->hits / (double)e->accesses : 0.0,
                (double)e->bytes_moved / 1048576.0);
    else
        fprintf(stderr, ", all read at their homes\n");
}

/* Serves until SIGINT or SIGTERM (blocked in every thread, taken here by sigwait). */
static int run(struct serve_args *a, mvm_engine *e, const sigset_t *sigs)
{
    serve *s = serve_create(e, a->queue);
    if (!s) {
        fprintf(stderr, "moevm serve: out of memory for the slots\n");
        return 1;
    }
    mvm_engine_info in;
    mvm_engine_get_info(e, &in);
    uint16_t port = 0;
    const serve_api api = {.model_id = a->alias ? a->alias : in.name, .defaults = a->o.s,
                           .default_max_tokens = a->o.n_predict,
                           .default_ignore_eos = a->o.ignore_eos, .model_path = a->o.p.model,
                           .api_keys = (const char *const *)a->keys, .n_api_keys = a->n_keys,
                           .default_grammar = a->o.grammar.gbnf,
                           .default_breakers = a->o.breakers,
                           .default_think_budget = a->o.sampling.think_budget,
                           .default_think_message = a->o.sampling.think_message,
                           .default_kwargs = a->o.tmpl.kwargs,
                           .reasoning_none = a->reasoning_none};
    serve_http *http = serve_http_start(s, a->host, (uint16_t)a->port, a->timeout, a->prefix,
                                        &api, &port);
    pthread_t t;
    int rc = !http || pthread_create(&t, NULL, engine_thread, s) != 0;
    if (!rc) {
        fprintf(stderr, "serve: listening on http://%s:%u (%u slots of %u positions%s); Ctrl-C "
                "stops\n", a->host, port, in.n_seq, in.n_ctx,
                a->n_keys ? ", an API key asked for" : "");
        int sig;
        sigwait(sigs, &sig);
        fprintf(stderr, "serve: %s: stopping\n", sig == SIGINT ? "interrupted" : "terminated");
        serve_stop(s);
        pthread_join(t, NULL);
        print_stats(s);
    } else if (http) {
        fprintf(stderr, "moevm serve: cannot start the engine thread\n");
    }
    serve_http_stop(http);
    serve_free(s);
    return rc;
}

int mvm_cmd_serve(int argc, char **argv)
{
    struct serve_args a = {.host = "127.0.0.1", .port = 8080, .parallel = 4, .queue = 64,
                           .timeout = 600};
    mvm_cli_engine_init(&a.o);
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) {
        mvm_cli_engine_free(&a.o);
        for (uint32_t i = 0; i < a.n_keys; i++)
            free(a.keys[i]);
        return rc;
    }
    /* before any thread starts, so that every thread inherits the mask */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error return, not a death */
    a.o.p.n_seq = a.parallel;
    a.o.sampling.requests_sample = 1; /* llama.cpp's breakers for any request's DRY */
    mvm_engine *e = NULL;
    rc = mvm_cli_engine_load("serve", &a.o, &e);
    if (!rc)
        rc = run(&a, e, &sigs);
    mvm_engine_free(e);
    mvm_cli_engine_free(&a.o);
    for (uint32_t i = 0; i < a.n_keys; i++)
        free(a.keys[i]);
    return rc;
}
