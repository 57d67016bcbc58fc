/*
 * `moevm perplexity`: llama.cpp's llama-perplexity over the engine API, so that a model's
 * quantizations can be compared as llama.cpp users compare them, and moevm's numbers with
 * llama.cpp's on the same file and text (bench/cpu/perplexity.sh). The algorithm is
 * llama-perplexity's default one, step for step: the text tokenized as one prompt (the
 * vocabulary's BOS first, control-token texts left as text); cut into chunks of -c tokens
 * (the rest dropped); each chunk evaluated from an empty cache with its first token
 * replaced by the BOS where the vocabulary adds one; the negative log-likelihood of each
 * token of its second half under the logits of the position before (the first half only
 * gives context); chunks evaluated -b / -c at a time, each in a sequence of its own. The
 * running PPL after each chunk, then the estimate with its standard error:
 * exp(mean) +/- exp(mean) * sd / sqrt(count - 1).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compute/clock.h"
#include "tools/cli_engine.h"
#include "vmm/error.h"

enum { O_FILE = MVM_CLI_E_LAST, O_CHUNKS };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moevm perplexity -m MODEL.gguf -f TEXT_FILE [-c N] [-b N] [--chunks N]\n"
            "The model's perplexity on a text, as llama.cpp's llama-perplexity computes it:\n"
            "chunks of -c tokens, each scored on its second half.\n"
            "  -m, --model     the GGUF model (required)\n"
            "  -f, --file      the text ('-': standard input; wiki.test.raw is the usual)\n"
            "  -c, --ctx-size  tokens a chunk (default 512)\n"
            "  -b, --batch-size  tokens a forward pass (default 2048): -b / -c chunks at a\n"
            "                  time, each in its own sequence; below -c, a chunk in passes\n"
            "  --chunks N      at most N chunks (default: all the text holds)\n"
            "  -t, --threads   CPU threads (default: the cores near the GPU, or all)\n"
            "  --gpu-budget, --n-cpu-moe, -ngl, --cpu-moe, --kv-type, --evict, --predict,\n"
            "  --route, --config, --assign, --cost  as `moevm run` takes them\n");
}

struct ppl {
    mvm_cli_engine o;
    const char *file;
    uint32_t chunks;        /* 0: all */
    mvm_engine *e;
    uint32_t n_vocab, n_ctx, n_seq, n_batch;
    int32_t bos;            /* replaces each chunk's first token; -1: the vocabulary adds none */
    mvm_engine_token *batch;
    float *logits;          /* a pass's rows */
    double *part;           /* [n_seq] a pass's negative log-likelihood of each chunk */
    double nll, nll2;       /* the chunks' so far, summed, and of its squares */
    uint64_t count;
};

static int parse_args(int argc, char **argv, struct ppl *p)
{
    static const mvm_cli_opt opts[] = {
        {"model", 'm', 1, MVM_CLI_E_MODEL}, {"threads", 't', 1, MVM_CLI_E_THREADS},
        {"ctx-size", 'c', 1, MVM_CLI_E_CTX}, {"batch-size", 'b', 1, MVM_CLI_E_BATCH},
        {"gpu-budget", 0, 1, MVM_CLI_E_BUDGET},
        MVM_CLI_GPU_OPTS(MVM_CLI_E_NGL, MVM_CLI_E_CPU_MOE, MVM_CLI_E_KV),
        {"kv-type", 0, 1, MVM_CLI_E_KV}, {"evict", 0, 1, MVM_CLI_E_EVICT},
        {"predict", 0, 1, MVM_CLI_E_PREDICT}, {"route", 0, 1, MVM_CLI_E_ROUTE},
        {"config", 0, 1, MVM_CLI_E_CONFIG}, {"assign", 0, 1, MVM_CLI_E_ASSIGN},
        {"cost", 0, 1, MVM_CLI_E_COST}, {"file", 'f', 1, O_FILE},
        {"chunks", 0, 1, O_CHUNKS}, {0}};
    mvm_cli_iter it = {.cmd = "perplexity", .usage = usage, .opts = opts, .argc = argc,
                       .argv = argv};
    int next;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION) {
        int bad = it.id == O_FILE     ? (p->file = it.value, 0)
                  : it.id == O_CHUNKS ? mvm_cli_u32(it.cmd, it.flag, it.value, 1, 1u << 30,
                                                    &p->chunks)
                                      : mvm_cli_engine_option(&it, &p->o);
        if (bad)
            return 2;
    }
    if (next != MVM_CLI_END)
        return next;
    if (p->o.p.n_ctx < 3) {
        fprintf(stderr, "moevm perplexity: -c %u: a chunk's second half scores nothing under "
                "3 tokens\n", p->o.p.n_ctx);
        return 2;
    }
    if (!p->file && p->o.p.model) {
        fprintf(stderr, "moevm perplexity: needs -f TEXT_FILE, the text to score (see --help)\n");
        return 2;
    }
    return mvm_cli_engine_check("perplexity", &p->o);
}

/* -log p(target) under a row of logits: as llama-perplexity's log_softmax, the sum of
 * exponentials in double over float differences from the largest. */
static double nll_of(const float *row, uint32_t n, int32_t target)
{
    float max = row[0];
    for (uint32_t i = 1; i < n; i++)
        max = row[i] > max ? row[i] : max;
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += expf(row[i] - max);
    return (double)max + log(sum) - (double)row[target];
}

/* Chunks c0 .. c0 + ns - 1 of tokens: evaluated (a pass of each sequence's positions
 * [at, at + span) at a time), their second halves scored. */
static mvm_status score(struct ppl *p, const int32_t *tokens, uint32_t c0, uint32_t ns)
{
    const uint32_t n_ctx = p->n_ctx, first = n_ctx / 2;
    const uint32_t span = p->n_batch < n_ctx ? p->n_batch : n_ctx;
    for (uint32_t s = 0; s < ns; s++)
        mvm_engine_truncate(p->e, s, 0), p->part[s] = 0;
    for (uint32_t at = 0; at < n_ctx; at += span) {
        const uint32_t end = at + span < n_ctx ? at + span : n_ctx;
        uint32_t n = 0, rows = 0;
        for (uint32_t s = 0; s < ns; s++) {
            const int32_t *chunk = tokens + (size_t)(c0 + s) * n_ctx;
            for (uint32_t pos = at; pos < end; pos++) {
                /* the logits of positions first .. n_ctx - 2 predict the second half */
                const int want = pos >= first && pos + 1 < n_ctx;
                p->batch[n++] = (mvm_engine_token){pos == 0 && p->bos >= 0 ? p->bos : chunk[pos],
                                                   s, want};
                rows += want;
            }
        }
        mvm_status st = mvm_engine_eval_batch(p->e, p->batch, n, p->logits);
        if (st != MVM_OK)
            return st;
        const float *row = p->logits;
        for (uint32_t s = 0; s < ns; s++) {
            const int32_t *chunk = tokens + (size_t)(c0 + s) * n_ctx;
            for (uint32_t pos = at; pos < end; pos++) {
                if (pos < first || pos + 1 >= n_ctx)
                    continue;
                const double v = nll_of(row, p->n_vocab, chunk[pos + 1]);
                p->part[s] += v, p->nll2 += v * v;
                row += p->n_vocab;
            }
        }
        if (mvm_cli_interrupted)
            return mvm_fail(MVM_ERR_CANCELLED, "interrupted");
    }
    return MVM_OK;
}

/* The text's tokens, as llama-perplexity's: the BOS where the vocabulary adds one, control
 * texts as text. */
static int32_t *tokenize(const struct ppl *p, const char *text, size_t len, size_t *n)
{
    size_t cap = len + 16;
    int32_t *t = malloc(cap * sizeof *t);
    mvm_status st = t ? mvm_engine_tokenize(p->e, text, len, 1, 0, t, cap, n) : MVM_ERR_NOMEM;
    if (st == MVM_ERR_RANGE) { /* more tokens than bytes */
        int32_t *more = realloc(t, *n * sizeof *t);
        st = more ? mvm_engine_tokenize(p->e, text, len, 1, 0, more, *n, n) : MVM_ERR_NOMEM;
        t = more ? more : t;
    }
    if (st != MVM_OK) {
        if (st == MVM_ERR_NOMEM)
            (void)mvm_fail(st, "no memory for the tokens of %zu bytes", len);
        free(t);
        return NULL;
    }
    return t;
}

static int run(struct ppl *p, const char *text, size_t len)
{
    size_t n_tok = 0;
    int32_t *tokens = tokenize(p, text, len, &n_tok);
    if (!tokens)
        return mvm_cli_error("perplexity", p->file);
    int32_t bos_only[4];
    size_t nb = 0;
    mvm_engine_tokenize(p->e, "", 0, 1, 0, bos_only, 4, &nb);
    p->bos = nb == 1 ? bos_only[0] : -1;
    if (n_tok < 2 * (size_t)p->n_ctx) {
        fprintf(stderr, "moevm perplexity: %s: %zu tokens; a context of %u (-c) needs at least "
                "%u\n", p->file, n_tok, p->n_ctx, 2 * p->n_ctx);
        free(tokens);
        return 1;
    }
    uint32_t n_chunk = (uint32_t)(n_tok / p->n_ctx);
    n_chunk = p->chunks && p->chunks < n_chunk ? p->chunks : n_chunk;
    fprintf(stderr, "perplexity: %zu tokens; %u chunks of %u, batch %u, %u at a time\n", n_tok,
            n_chunk, p->n_ctx, p->n_batch, p->n_seq);
    mvm_cli_catch_sigint(0);
    mvm_status st = MVM_OK;
    const double t0 = mvm_now_s();
    for (uint32_t c = 0; c < n_chunk && st == MVM_OK; c += p->n_seq) {
        const uint32_t ns = n_chunk - c < p->n_seq ? n_chunk - c : p->n_seq;
        const double t = mvm_now_s();
        if ((st = score(p, tokens, c, ns)) != MVM_OK)
            break;
        if (c == 0)
            fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n",
                    mvm_now_s() - t, (mvm_now_s() - t) * ((n_chunk + ns - 1) / ns) / 60);
        /* the running PPL after each chunk, as llama-perplexity prints it */
        for (uint32_t s = 0; s < ns; s++) {
            p->nll += p->part[s], p->count += p->n_ctx - 1 - p->n_ctx / 2;
            printf("[%u]%.4f,", c + s + 1, exp(p->nll / (double)p->count));
        }
        fflush(stdout);
    }
    printf("\n");
    free(tokens);
    if (st != MVM_OK)
        return mvm_cli_error("perplexity", st == MVM_ERR_CANCELLED ? NULL : "evaluating");
    const double mean = p->nll / (double)p->count, ppl = exp(mean);
    const double var = p->nll2 / (double)p->count - mean * mean;
    const double err = var > 0 ? sqrt(var / (double)(p->count - 1)) * ppl : 0;
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    fflush(stdout); /* before the summary on stderr, where both go to one place */
    fprintf(stderr, "perplexity: %u chunks, %llu tokens scored, %.2f s (%.1f tokens/s "
            "evaluated)\n", n_chunk, (unsigned long long)p->count, mvm_now_s() - t0,
            (double)n_chunk * p->n_ctx / (mvm_now_s() - t0));
    return 0;
}

int mvm_cmd_perplexity(int argc, char **argv)
{
    struct ppl p = {0};
    mvm_cli_engine_init(&p.o);
    p.o.p.n_ctx = 512, p.o.p.n_batch = 2048; /* llama-perplexity's */
    int rc = parse_args(argc, argv, &p);
    if (rc >= 0)
        return rc;
    size_t len = 0;
    char *text = mvm_cli_read_text("perplexity", p.file, &len);
    if (!text)
        return 1;
    /* -b / -c chunks a pass, each a sequence (a batch below -c: a chunk in passes) */
    p.n_ctx = p.o.p.n_ctx;
    p.n_seq = p.o.p.n_batch >= p.n_ctx ? p.o.p.n_batch / p.n_ctx : 1;
    /* no more sequences (each its own KV cache) than the text can fill: a token is a
     * byte or more, but for the BOS */
    size_t most = (len + 1) / p.n_ctx;
    most = p.chunks && p.chunks < most ? p.chunks : most;
    p.n_seq = most && most < p.n_seq ? (uint32_t)most : p.n_seq;
    p.n_batch = p.o.p.n_batch >= p.n_ctx ? p.n_seq * p.n_ctx : p.o.p.n_batch;
    p.o.p.n_seq = p.n_seq, p.o.p.n_batch = p.n_batch;
    if ((rc = mvm_cli_engine_load("perplexity", &p.o, &p.e))) {
        free(text);
        return rc;
    }
    p.n_vocab = mvm_engine_n_vocab(p.e);
    const uint32_t rows = p.n_seq * (p.n_ctx - p.n_ctx / 2);
    p.batch = malloc((size_t)p.n_batch * sizeof *p.batch);
    p.logits = malloc((size_t)rows * p.n_vocab * sizeof *p.logits);
    p.part = malloc(p.n_seq * sizeof *p.part);
    if (!p.batch || !p.logits || !p.part) {
        fprintf(stderr, "moevm perplexity: no memory for %u rows of %u logits\n", rows,
                p.n_vocab);
        rc = 1;
    } else {
        rc = run(&p, text, len);
    }
    free(p.batch), free(p.logits), free(p.part), free(text);
    mvm_engine_free(p.e);
    return rc;
}
