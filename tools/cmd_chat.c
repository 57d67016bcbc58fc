/*
 * `moevm chat`: a conversation with a model, through the engine API (moevm/engine.h). Each
 * turn renders the whole conversation with the model's chat template and evaluates only
 * what the KV cache does not already hold (the longest common prefix of the new prompt's
 * tokens and the cached ones), so history costs nothing twice. Lines from stdin are the
 * user's turns — typed at a terminal, or piped. Ctrl-C stops a reply (the part written so
 * far stays in the conversation, as llama.cpp keeps it) and, while a turn's prompt is being
 * evaluated, drops that turn; either way the chat goes back to the prompt. At the prompt it
 * ends the program, as end of input does. The statistics line comes last on stderr.
 * A reply is read as the server reads it (engine/chat/chat_reply.h): its reasoning goes
 * to stderr and into the conversation as reasoning_content, its answer to stdout.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/chat/chat_reply.h"
#include "engine/compute/clock.h"
#include "tools/cli_engine.h"
#include "tools/cli_think.h"

enum { O_SYSTEM = 1, O_SYSTEM_FILE, O_VERBOSE };

static void usage(FILE *f)
{
    fprintf(f, "usage: moevm chat -m MODEL.gguf [--system TEXT | -sysf FILE] [options]\n"
               "A conversation in the model's own chat template (tokenizer.chat_template;\n"
               "ChatML when the model has none). Each line of input is a turn; /reset forgets\n"
               "the conversation, /exit or end of input ends it. Ctrl-C stops a reply (or\n"
               "drops a message still being read) and returns to the prompt.\n"
               "  --system, -sys, --system-prompt TEXT  the system message\n"
               "  -sysf, --system-prompt-file FILE  the system message from a file (less\n"
               "                  one final newline, as llama.cpp's)\n"
               "  --verbose-prompt  each turn's rendered prompt on stderr\n");
    mvm_cli_engine_usage(f);
}

struct chat {
    mvm_cli_engine o;
    const char *system;
    char *system_text;          /* -sysf's, which system points to */
    char *kwargs;               /* the template's variables (--chat-template-kwargs ...) */
    int verbose;
    mvm_engine *e;
    mvm_sampler *sampler;
    cJSON *messages;
    int32_t *cached;            /* [n_ctx] sequence 0's tokens in the cache */
    int32_t *prompt;            /* [cap] this turn's */
    uint32_t n_cached;
    size_t cap;
    float *logits;
    uint64_t evaluated, reused, generated;
    double t_prompt, t_reply;
    /* each reply read into its reasoning and answer (engine/chat/chat_reply.h) */
    mvm_chat_reply_opts read;
    int32_t keep[16];           /* the control tokens of its markup, kept in its text */
    uint32_t n_keep;
    size_t shown_reasoning, shown_content; /* bytes of each printed */
};

/* -sysf FILE: its text, less one final newline (llama.cpp's); 0, or 2 after a line. */
static int system_file(struct chat *c, const char *path)
{
    size_t len;
    free(c->system_text);
    if (!(c->system_text = mvm_cli_read_text("chat", path, &len)))
        return 2;
    if (len && c->system_text[len - 1] == '\n')
        c->system_text[len - 1] = '\0';
    c->system = c->system_text;
    return 0;
}

static int parse_args(int argc, char **argv, struct chat *c)
{
    static const mvm_cli_opt opts[] = {MVM_CLI_ENGINE_OPTS,
                                       {"system", 0, 1, O_SYSTEM},
                                       {"system-prompt", 0, 1, O_SYSTEM},
                                       {"-sys", 0, 1, O_SYSTEM},
                                       {"system-prompt-file", 0, 1, O_SYSTEM_FILE},
                                       {"-sysf", 0, 1, O_SYSTEM_FILE},
                                       {"verbose-prompt", 0, 0, O_VERBOSE},
                                       {0}};
    mvm_cli_iter it = {.cmd = "chat", .usage = usage, .opts = opts, .argc = argc, .argv = argv};
    int next;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION) {
        int bad = mvm_cli_engine_option(&it, &c->o);
        if (bad < 0 && it.id == O_SYSTEM)
            c->system = it.value, bad = 0;
        else if (bad < 0 && it.id == O_SYSTEM_FILE)
            bad = system_file(c, it.value);
        else if (bad < 0 && it.id == O_VERBOSE)
            c->verbose = 1, bad = 0;
        if (bad)
            return 2;
    }
    if (next != MVM_CLI_END)
        return next;
    return mvm_cli_engine_check("chat", &c->o);
}

/* messages = [system?] */
static int reset(struct chat *c)
{
    cJSON_Delete(c->messages);
    c->messages = cJSON_CreateArray();
    if (c->messages && c->system) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", c->system);
        cJSON_AddItemToArray(c->messages, m);
    }
    return c->messages ? 0 : 1;
}

static void add_message(struct chat *c, const char *role, const char *content)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(c->messages, m);
}

/* This turn's prompt tokens into c->prompt, *n; 1 after an error. */
static int render(struct chat *c, size_t *n)
{
    char *json = cJSON_PrintUnformatted(c->messages), *text = NULL;
    mvm_status st = mvm_engine_chat_format(c->e, json, c->kwargs, 1, &text);
    free(json);
    if (st != MVM_OK)
        return mvm_cli_error("chat", "chat template");
    size_t len = strlen(text);
    c->read.thinking_open = mvm_chat_prompt_thinks(text);
    if (c->verbose)
        fprintf(stderr, "prompt: %s\n", text);
    if (len + 16 > c->cap) {
        int32_t *p = realloc(c->prompt, (len + 16) * sizeof *p);
        if (!p) {
            free(text);
            fprintf(stderr, "moevm chat: out of memory\n");
            return 1;
        }
        c->prompt = p, c->cap = len + 16;
    }
    /* at most a token a byte, plus BOS/EOS (a vocabulary needing more: RANGE, an error) */
    st = mvm_engine_tokenize(c->e, text, len, 1, 1, c->prompt, c->cap, n);
    free(text);
    return st == MVM_OK ? 0 : mvm_cli_error("chat", "tokenizing the conversation");
}

/* Renders the conversation so that it leaves room for a reply, dropping its oldest turns
 * (the system message stays) as llama.cpp's server truncates; 1 when even the last
 * message alone does not fit (it is dropped). */
static int fit(struct chat *c, size_t *n)
{
    mvm_engine_info in;
    mvm_engine_get_info(c->e, &in);
    for (;;) {
        if (render(c, n))
            return 1;
        if (*n + 1 < in.n_ctx)
            return 0;
        int first = c->system ? 1 : 0;
        if (cJSON_GetArraySize(c->messages) <= first + 1) {
            fprintf(stderr, "moevm chat: the message takes %zu tokens with the template, the "
                    "context holds %u (-c)\n", *n, in.n_ctx);
            cJSON_DeleteItemFromArray(c->messages, first);
            return 1;
        }
        cJSON_DeleteItemFromArray(c->messages, first);
    }
}

/* Evaluates what of the prompt the cache lacks; c->logits then follow its last token. -1
 * after Ctrl-C: the cache is back where the turn began. */
static int prefill(struct chat *c, size_t n)
{
    uint32_t reused;
    double t0 = mvm_now_s();
    mvm_status st = mvm_cli_prefill(c->e, 0, c->cached, &c->n_cached, c->prompt, (uint32_t)n,
                                    c->logits, &reused);
    c->t_prompt += mvm_now_s() - t0;
    if (st == MVM_ERR_CANCELLED)
        return -1;
    if (st != MVM_OK)
        return mvm_cli_error("chat", "prompt");
    c->evaluated += n - reused;
    c->reused += reused;
    return 0;
}

/* Prints what is new of the reply text[0..len) read so far (partial: it goes on): the
 * reasoning on stderr, the answer on stdout. The message read, or NULL. */
static cJSON *show(struct chat *c, const char *text, size_t len, int partial)
{
    cJSON *m = mvm_chat_reply_parse(&c->read, text, len, partial);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(m, "content");
    const size_t nr = cJSON_IsString(r) ? strlen(r->valuestring) : 0;
    const size_t na = cJSON_IsString(a) ? strlen(a->valuestring) : 0;
    if (nr > c->shown_reasoning) {
        fputs(r->valuestring + c->shown_reasoning, stderr);
        c->shown_reasoning = nr;
    }
    if (na > c->shown_content) {
        if (c->shown_reasoning && !c->shown_content)
            fputc('\n', stderr); /* the thinking done */
        fputs(a->valuestring + c->shown_content, stdout);
        fflush(stdout);
        c->shown_content = na;
    }
    return m;
}

/* Samples, prints and evaluates the reply; its message into *reply. */
static int reply(struct chat *c, cJSON **reply)
{
    mvm_engine_info in;
    mvm_engine_get_info(c->e, &in);
    size_t len = 0, cap = 256;
    char *text = malloc(cap), piece[256];
    if (!text)
        return 1;
    mvm_grammar *grammar = NULL; /* each reply a sentence of its own */
    if (mvm_cli_grammar_attach("chat", &c->o.grammar, c->e, c->sampler, &grammar)) {
        free(text);
        return 1;
    }
    mvm_think_budget think, *budget = NULL; /* --reasoning-budget: each reply's own */
    char why[512];
    if (c->o.sampling.think_budget >= 0) {
        if (mvm_cli_think_make(c->e, c->read.syntax, c->o.sampling.think_budget,
                               c->o.sampling.think_message, c->read.thinking_open, &think, why,
                               sizeof why)) {
            fprintf(stderr, "moevm chat: --reasoning-budget: %s\n", why);
            mvm_sampler_set_grammar(c->sampler, NULL);
            mvm_grammar_free(grammar);
            free(text);
            return 1;
        }
        budget = &think;
    }
    double t0 = mvm_now_s();
    int rc = 0;
    for (int32_t made = 0; !mvm_cli_interrupted && (c->o.n_predict < 0 || made < c->o.n_predict);
         made++) {
        if (c->o.ignore_eos)
            mvm_engine_mask_eog(c->e, c->logits);
        int forced;
        int32_t next = mvm_cli_think_next(budget, c->sampler, grammar, c->logits, in.n_vocab,
                                          c->cached, c->n_cached, &forced);
        if (next < 0 || mvm_engine_is_eog(c->e, next) || c->n_cached + 1 >= in.n_ctx)
            break;
        mvm_cli_think_took(c->e, budget, next);
        const size_t np = mvm_cli_reply_piece(c->e, next, c->keep, c->n_keep, piece,
                                              sizeof piece);
        if (len + np + 1 > cap) {
            char *bigger = realloc(text, cap = 2 * cap + np);
            if (!bigger) {
                rc = 1;
                break;
            }
            text = bigger;
        }
        memcpy(text + len, piece, np), len += np;
        cJSON_Delete(show(c, text, len, 1));
        if (mvm_engine_eval(c->e, 0, &next, 1, c->logits) != MVM_OK) {
            rc = mvm_cli_error("chat", "decode");
            break;
        }
        c->cached[c->n_cached++] = next;
        c->generated++;
    }
    c->t_reply += mvm_now_s() - t0;
    mvm_sampler_set_grammar(c->sampler, NULL);
    mvm_grammar_free(grammar);
    *reply = show(c, text, len, 0);
    free(text);
    c->shown_reasoning = c->shown_content = 0;
    printf(mvm_cli_interrupted ? " [stopped]\n" : "\n");
    fflush(stdout);
    mvm_cli_interrupted = 0;
    return rc;
}

static int turn(struct chat *c, const char *line)
{
    size_t n;
    add_message(c, "user", line);
    if (fit(c, &n))
        return 0; /* said why; the conversation goes on without that message */
    int rc = prefill(c, n);
    if (rc < 0) { /* Ctrl-C before the reply: the turn goes, as if never typed */
        cJSON_DeleteItemFromArray(c->messages, cJSON_GetArraySize(c->messages) - 1);
        fprintf(stderr, "moevm chat: interrupted while reading the message: it is dropped\n");
        mvm_cli_interrupted = 0;
        return 0;
    }
    if (rc)
        return 1;
    cJSON *said = NULL;
    rc = reply(c, &said);
    if (said) /* its reasoning apart, as templates take it back */
        cJSON_AddItemToArray(c->messages, said);
    return rc;
}

static void print_stats(const struct chat *c)
{
    mvm_engine_stats s;
    mvm_engine_get_stats(c->e, &s);
    fprintf(stderr, "prompts %" PRIu64 " tokens %.1f tok/s (%" PRIu64 " more reused from the "
            "cache) | replies %" PRIu64 " tokens %.2f tok/s | expert accesses %" PRIu64,
            c->evaluated, c->t_prompt > 0 ? (double)c->evaluated / c->t_prompt : 0.0, c->reused,
            c->generated, c->t_reply > 0 ? (double)c->generated / c->t_reply : 0.0, s.accesses);
    if (s.budget_bytes)
        fprintf(stderr, " (hit %.1f%%) | moved %.1f MiB\n",
                s.accesses ? 100.0 * (double)s.hits / (double)s.accesses : 0.0,
                (double)s.bytes_moved / 1048576.0);
    else
        fprintf(stderr, ", all read at their homes\n");
}

/* One line of input (a trailing backslash continues it), without its newline; NULL at the
 * end of input or on Ctrl-C. */
static char *read_turn(int tty)
{
    char *all = NULL, *line = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (tty)
            fprintf(stderr, all ? ". " : "> ");
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0 || mvm_cli_interrupted) {
            free(line);
            if (n < 0 && !mvm_cli_interrupted && all)
                return all; /* a last line without a newline */
            free(all);
            return NULL;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        int more = n > 0 && line[n - 1] == '\\';
        if (more)
            line[--n] = '\n';
        char *grown = realloc(all, len + (size_t)n + 1);
        if (!grown) {
            free(line), free(all);
            return NULL;
        }
        all = grown;
        memcpy(all + len, line, (size_t)n + 1), len += (size_t)n;
        if (!more) {
            free(line);
            return all;
        }
    }
}

static int converse(struct chat *c)
{
    int tty = isatty(STDIN_FILENO);
    if (tty)
        fprintf(stderr, "chat: type a message; /reset forgets the conversation, /exit or "
                "Ctrl-D ends it, Ctrl-C stops a reply\n");
    int rc = 0;
    char *line;
    while (!rc && (line = read_turn(tty))) {
        if (strcmp(line, "/exit") == 0) {
            free(line);
            break;
        }
        if (strcmp(line, "/reset") == 0)
            rc = reset(c), c->n_cached = 0;
        else if (line[0])
            rc = turn(c, line);
        free(line);
    }
    return rc;
}

static int open_chat(struct chat *c)
{
    int rc = mvm_cli_engine_load("chat", &c->o, &c->e);
    if (rc)
        return rc;
    mvm_engine_info in;
    mvm_engine_get_info(c->e, &in);
    if (!in.chat_template && !c->o.tmpl.file && !c->o.tmpl.source)
        fprintf(stderr, "moevm chat: note: the model has no chat template "
                "(tokenizer.chat_template): using ChatML\n");
    c->read = (mvm_chat_reply_opts){
        .syntax = mvm_chat_syntax_of(mvm_engine_chat_template(c->e)), .reasoning = 1};
    c->n_keep = mvm_cli_reply_markers(c->e, c->keep, sizeof c->keep / sizeof *c->keep);
    if (mvm_sampler_create(&c->o.s, in.n_vocab, &c->sampler) != MVM_OK)
        return mvm_cli_error("chat", "sampler");
    mvm_sampler_set_dry_breakers(c->sampler, c->o.breakers);
    c->kwargs = mvm_cli_template_kwargs(&c->o.tmpl);
    if ((c->o.tmpl.kwargs && c->o.tmpl.kwargs->child && !c->kwargs) ||
        !(c->logits = malloc(in.n_vocab * sizeof *c->logits)) ||
        !(c->cached = malloc(in.n_ctx * sizeof *c->cached)) || reset(c)) {
        fprintf(stderr, "moevm chat: out of memory\n");
        return 1;
    }
    return 0;
}

int mvm_cmd_chat(int argc, char **argv)
{
    struct chat c = {0};
    mvm_cli_engine_init(&c.o);
    int rc = parse_args(argc, argv, &c);
    if (rc >= 0) {
        mvm_cli_engine_free(&c.o);
        free(c.system_text);
        return rc;
    }
    mvm_cli_catch_sigint(0); /* no SA_RESTART: Ctrl-C ends a read */
    rc = open_chat(&c);
    if (!rc) { /* statistics of a conversation, not after a failure to start one */
        rc = converse(&c);
        print_stats(&c);
    }
    mvm_sampler_free(c.sampler);
    mvm_engine_free(c.e);
    mvm_cli_engine_free(&c.o);
    cJSON_Delete(c.messages);
    free(c.cached), free(c.prompt), free(c.logits), free(c.system_text), free(c.kwargs);
    return rc;
}
