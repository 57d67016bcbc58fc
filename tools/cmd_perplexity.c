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
 *
 * With --kl-divergence-base FILE it also saves each scored position's log-probabilities
 * in llama.cpp's file; with --kl-divergence as well, it scores that file's chunks instead
 * and compares the model with the one that wrote it (tools/kl_divergence.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compute/clock.h"
#include "tools/cli_engine.h"
#include "tools/kl_divergence.h"
#include "vmm/error.h"

enum { O_FILE = MVM_CLI_E_LAST, O_CHUNKS, O_KLD_BASE, O_KLD };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moevm perplexity -m MODEL.gguf -f TEXT_FILE [-c N] [-b N] [--chunks N]\n"
            "                        [--kl-divergence-base FILE [--kl-divergence]]\n"
            "The model's perplexity on a text, as llama.cpp's llama-perplexity computes it:\n"
            "chunks of -c tokens, each scored on its second half.\n"
            "  -m, --model     the GGUF model (required)\n"
            "  -f, --file      the text ('-': standard input; wiki.test.raw is the usual),\n"
            "                  as llama.cpp reads it: less one final newline, its escapes\n"
            "                  (\\n, \\t, \\\\...) read unless --no-escape\n"
            "  -c, --ctx-size  tokens a chunk (default 512)\n"
            "  -b, --batch-size  tokens a forward pass (default 2048): -b / -c chunks at a\n"
            "                  time, each in its own sequence; below -c, a chunk in passes\n"
            "  --chunks N      at most N chunks (default: all the text holds)\n"
            "  --kl-divergence-base FILE  save each scored position's log-probabilities\n"
            "                  there (llama.cpp's file; --save-all-logits is its other name)\n"
            "  --kl-divergence  instead, score that file's chunks and compare this model\n"
            "                  with its (KL divergence, PPL ratio, top token agreement); no -f\n"
            "  -t, --threads   CPU threads (default: the cores near the GPU, or all)\n"
            "  --gpu-budget, --n-cpu-moe, -ngl, --cpu-moe, --kv-type, --evict, --predict,\n"
            "  --route, --config, --assign, --cost  as `moevm run` takes them\n");
    mvm_cli_meta_usage(f);
}

struct ppl {
    mvm_cli_engine o;
    const char *file, *base_path;
    uint32_t chunks;        /* 0: all */
    int kld;                /* --kl-divergence */
    mvm_engine *e;
    uint32_t n_vocab, n_ctx, n_seq, n_batch, n_chunk;
    double t_pass;          /* when the first pass began */
    int32_t bos;            /* replaces each chunk's first token; -1: the vocabulary adds none */
    mvm_engine_token *batch;
    float *logits;          /* a pass's rows */
    double *part;           /* [n_seq] a pass's negative log-likelihood of each chunk */
    double nll, nll2;       /* the chunks' so far, summed, and of its squares */
    uint64_t count;
    mvm_kld_file base;      /* written, or with kld read */
    mvm_kld stats;          /* with kld */
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
        {"chunks", 0, 1, O_CHUNKS}, {"kl-divergence-base", 0, 1, O_KLD_BASE},
        {"save-all-logits", 0, 1, O_KLD_BASE}, {"kl-divergence", 0, 0, O_KLD},
        MVM_CLI_META_OPTS, MVM_CLI_ESCAPE_OPTS, {0}};
    mvm_cli_iter it = {.cmd = "perplexity", .usage = usage, .opts = opts, .argc = argc,
                       .argv = argv};
    int next;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION) {
        int bad = 0;
        switch (it.id) {
        case O_FILE: p->file = it.value; break;
        case O_KLD_BASE: p->base_path = it.value; break;
        case O_KLD: p->kld = 1; break;
        case O_CHUNKS: bad = mvm_cli_u32(it.cmd, it.flag, it.value, 1, 1u << 30, &p->chunks); break;
        default: bad = mvm_cli_engine_option(&it, &p->o);
        }
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
    if (p->kld && !p->base_path) {
        fprintf(stderr, "moevm perplexity: --kl-divergence needs --kl-divergence-base FILE, "
                        "the base model's log-probabilities\n");
        return 2;
    }
    if (!p->kld && !p->file && p->o.p.model) {
        fprintf(stderr, "moevm perplexity: needs -f TEXT_FILE, the text to score (see --help)\n");
        return 2;
    }
    return mvm_cli_engine_check("perplexity", &p->o);
}

/* -log p(target) under a row of logits: as llama-perplexity's log_softmax, the sum of
 * exponentials in double over float differences from the largest. */
static double nll_of(const float *row, uint32_t n, int32_t target)
{
    float max;
    uint32_t top;
    const double sum = mvm_kld_sum_exp(row, n, &max, &top);
    return (double)max + log(sum) - (double)row[target];
}

/* A scored position of chunk s of the pass: its negative log-likelihood counted; its
 * log-probabilities saved, or compared with the base's. 0, or 1 after a one-line error. */
static int take(struct ppl *p, uint32_t s, const float *row, int32_t target)
{
    double v;
    if (p->kld) {
        if (mvm_kld_read_row(&p->base))
            return mvm_cli_error("perplexity", NULL);
        v = mvm_kld_add(&p->stats, row, p->n_vocab, p->base.row, target);
    } else {
        v = nll_of(row, p->n_vocab, target);
        if (p->base.f && mvm_kld_write_row(&p->base, row))
            return mvm_cli_error("perplexity", NULL);
    }
    p->part[s] += v, p->nll2 += v * v;
    return 0;
}

/* Chunk c (sequence s of its pass) scored whole: as llama-perplexity prints it after each,
 * the running PPL, or the comparison's line. */
static void chunk_done(struct ppl *p, uint32_t c, uint32_t s)
{
    if (c == 0) { /* the first pass evaluated: the time it took, before any value */
        const double t = mvm_now_s() - p->t_pass;
        fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n", t,
                t * ((p->n_chunk + p->n_seq - 1) / p->n_seq) / 60);
    }
    p->nll += p->part[s], p->count += p->n_ctx - 1 - p->n_ctx / 2;
    if (p->kld)
        mvm_kld_print_chunk(&p->stats, c + 1);
    else
        printf("[%u]%.4f,", c + 1, exp(p->nll / (double)p->count));
    fflush(stdout);
}

/* Chunks c0 .. c0 + ns - 1 of tokens: evaluated (a pass of each sequence's positions
 * [at, at + span) at a time), their second halves scored. 0, or 1 after a one-line error. */
static int score(struct ppl *p, const int32_t *tokens, uint32_t c0, uint32_t ns)
{
    const uint32_t n_ctx = p->n_ctx, first = n_ctx / 2;
    const uint32_t span = p->n_batch < n_ctx ? p->n_batch : n_ctx;
    for (uint32_t s = 0; s < ns; s++)
        mvm_engine_truncate(p->e, s, 0), p->part[s] = 0;
    for (uint32_t at = 0; at < n_ctx; at += span) {
        const uint32_t end = at + span < n_ctx ? at + span : n_ctx;
        uint32_t n = 0;
        for (uint32_t s = 0; s < ns; s++) {
            const int32_t *chunk = tokens + (size_t)(c0 + s) * n_ctx;
            for (uint32_t pos = at; pos < end; pos++) {
                /* the logits of positions first .. n_ctx - 2 predict the second half */
                const int want = pos >= first && pos + 1 < n_ctx;
                p->batch[n++] = (mvm_engine_token){pos == 0 && p->bos >= 0 ? p->bos : chunk[pos],
                                                   s, want};
            }
        }
        if (mvm_engine_eval_batch(p->e, p->batch, n, p->logits) != MVM_OK)
            return mvm_cli_error("perplexity", "evaluating");
        const float *row = p->logits;
        for (uint32_t s = 0; s < ns; s++) {
            const int32_t *chunk = tokens + (size_t)(c0 + s) * n_ctx;
            for (uint32_t pos = at > first ? at : first; pos < end && pos + 1 < n_ctx; pos++) {
                if (take(p, s, row, chunk[pos + 1]))
                    return 1;
                row += p->n_vocab;
            }
            if (end == n_ctx)
                chunk_done(p, c0 + s, s);
        }
        if (mvm_cli_interrupted) {
            fprintf(stderr, "moevm perplexity: interrupted\n");
            return 1;
        }
    }
    return 0;
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

/* The estimate (or the comparison's statistics), and the rate on stderr. */
static void report(struct ppl *p, uint32_t n_chunk, double secs)
{
    printf("\n");
    if (p->kld) {
        mvm_kld_print_summary(&p->stats);
    } else {
        const double mean = p->nll / (double)p->count, ppl = exp(mean);
        const double var = p->nll2 / (double)p->count - mean * mean;
        const double err = var > 0 ? sqrt(var / (double)(p->count - 1)) * ppl : 0;
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    }
    fflush(stdout); /* before the summary on stderr, where both go to one place */
    fprintf(stderr, "perplexity: %u chunks, %llu tokens scored, %.2f s (%.1f tokens/s "
            "evaluated)\n", n_chunk, (unsigned long long)p->count, secs,
            (double)n_chunk * p->n_ctx / secs);
}

/* Every chunk of tokens scored, pass after pass. */
static int run(struct ppl *p, const int32_t *tokens, uint32_t n_chunk)
{
    fprintf(stderr, "perplexity: %u chunks of %u, batch %u, %u at a time%s\n", n_chunk,
            p->n_ctx, p->n_batch, p->n_seq, p->kld ? ", against the base" : "");
    mvm_cli_catch_sigint(0);
    const double t0 = p->t_pass = mvm_now_s();
    p->n_chunk = n_chunk;
    for (uint32_t c = 0; c < n_chunk; c += p->n_seq)
        if (score(p, tokens, c, n_chunk - c < p->n_seq ? n_chunk - c : p->n_seq))
            return 1;
    report(p, n_chunk, mvm_now_s() - t0);
    return 0;
}

/* The tokens to score and their chunks: the base file's, or the text's (the file then
 * created with them). NULL after a one-line error. */
static int32_t *chunks(struct ppl *p, const char *text, size_t len, uint32_t *n_chunk)
{
    int32_t bos_only[4];
    size_t nb = 0;
    mvm_engine_tokenize(p->e, "", 0, 1, 0, bos_only, 4, &nb);
    p->bos = nb == 1 ? bos_only[0] : -1;
    if (p->kld) {
        if (mvm_kld_check_vocab(&p->base, p->n_vocab)) {
            mvm_cli_error("perplexity", NULL);
            return NULL;
        }
        *n_chunk = p->chunks && p->chunks < p->base.n_chunk ? p->chunks : p->base.n_chunk;
        if (mvm_kld_init(&p->stats, (size_t)*n_chunk * (p->n_ctx - 1 - p->n_ctx / 2))) {
            fprintf(stderr, "moevm perplexity: no memory for the positions' statistics\n");
            return NULL;
        }
        return p->base.tokens;
    }
    size_t n_tok = 0;
    int32_t *tokens = tokenize(p, text, len, &n_tok);
    if (!tokens) {
        mvm_cli_error("perplexity", p->file);
        return NULL;
    }
    if (n_tok < 2 * (size_t)p->n_ctx) {
        fprintf(stderr, "moevm perplexity: %s: %zu tokens; a context of %u (-c) needs at least "
                "%u\n", p->file, n_tok, p->n_ctx, 2 * p->n_ctx);
        free(tokens);
        return NULL;
    }
    *n_chunk = (uint32_t)(n_tok / p->n_ctx);
    *n_chunk = p->chunks && p->chunks < *n_chunk ? p->chunks : *n_chunk;
    fprintf(stderr, "perplexity: %zu tokens\n", n_tok);
    if (p->base_path &&
        mvm_kld_create(&p->base, p->base_path, p->n_ctx, p->n_vocab, *n_chunk, tokens)) {
        mvm_cli_error("perplexity", NULL);
        free(tokens);
        return NULL;
    }
    return tokens;
}

/* The engine's shape for the chunks: -b / -c of them a pass, each a sequence (a batch
 * below -c: a chunk in passes), no more sequences than the chunks can fill. */
static void shape(struct ppl *p, size_t text_len)
{
    p->n_ctx = p->o.p.n_ctx;
    p->n_seq = p->o.p.n_batch >= p->n_ctx ? p->o.p.n_batch / p->n_ctx : 1;
    /* a token is a byte or more of the text (but for the BOS) */
    size_t most = p->kld ? p->base.n_chunk : (text_len + 1) / p->n_ctx;
    most = p->chunks && p->chunks < most ? p->chunks : most;
    p->n_seq = most && most < p->n_seq ? (uint32_t)most : p->n_seq;
    p->n_batch = p->o.p.n_batch >= p->n_ctx ? p->n_seq * p->n_ctx : p->o.p.n_batch;
    p->o.p.n_seq = p->n_seq, p->o.p.n_batch = p->n_batch;
}

int mvm_cmd_perplexity(int argc, char **argv)
{
    struct ppl p = {.bos = -1};
    mvm_cli_engine_init(&p.o);
    p.o.p.n_ctx = 512, p.o.p.n_batch = 2048; /* llama-perplexity's */
    int rc = parse_args(argc, argv, &p);
    if (rc >= 0) {
        mvm_cli_engine_free(&p.o);
        return rc;
    }
    size_t len = 0;
    char *text = NULL;
    if (p.kld) { /* the base's chunks, at its context */
        if (mvm_kld_open(&p.base, p.base_path)) {
            mvm_cli_error("perplexity", NULL);
            mvm_kld_close(&p.base, 1);
            mvm_cli_engine_free(&p.o);
            return 1;
        }
        p.o.p.n_ctx = p.base.n_ctx;
        if (p.file)
            fprintf(stderr, "perplexity: -f %s left unread: the base's tokens are scored\n",
                    p.file);
    } else if (!(text = mvm_cli_read_text("perplexity", p.file, &len))) {
        mvm_cli_engine_free(&p.o);
        return 1;
    } else { /* as llama.cpp reads -f: one final newline dropped, the escapes read */
        if (len && text[len - 1] == '\n')
            text[--len] = '\0';
        if (p.o.sampling.escape) {
            mvm_cli_unescape(text);
            len = strlen(text);
        }
    }
    shape(&p, len);
    uint32_t n_chunk = 0;
    int32_t *tokens = NULL;
    if ((rc = mvm_cli_engine_load("perplexity", &p.o, &p.e)) == 0) {
        p.n_vocab = mvm_engine_n_vocab(p.e);
        const uint32_t rows = p.n_seq * (p.n_ctx - p.n_ctx / 2);
        p.batch = malloc((size_t)p.n_batch * sizeof *p.batch);
        p.logits = malloc((size_t)rows * p.n_vocab * sizeof *p.logits);
        p.part = malloc(p.n_seq * sizeof *p.part);
        if (!p.batch || !p.logits || !p.part)
            fprintf(stderr, "moevm perplexity: no memory for %u rows of %u logits\n", rows,
                    p.n_vocab);
        rc = !p.batch || !p.logits || !p.part || !(tokens = chunks(&p, text, len, &n_chunk)) ||
             run(&p, tokens, n_chunk);
    }
    if (!p.kld) /* the base's are its own */
        free(tokens);
    if (mvm_kld_close(&p.base, rc == 0) && rc == 0) /* after a failure: its line alone */
        rc = mvm_cli_error("perplexity", NULL);
    mvm_kld_free(&p.stats);
    free(p.batch), free(p.logits), free(p.part), free(text);
    mvm_engine_free(p.e);
    mvm_cli_engine_free(&p.o);
    return rc;
}
