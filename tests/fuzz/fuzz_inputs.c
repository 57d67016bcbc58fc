/*
 * libFuzzer target for every other parser of user input; the first byte picks which, the
 * rest is the input:
 *   0  a cost file (policy/cost.c): what parses is a machine the cost model can use (rates
 *      finite and positive, the network's >= 0) and survives format -> parse;
 *   1  a routing trace (tools/trace.c, read from a file as `moevm sim --trace` does): what
 *      loads keeps the format's promises (experts in range and distinct, weights and
 *      scores finite) and is replayed by the simulator with two policy sets, which index
 *      the arrays blindly;
 *   2  a `moevm train-predictor` file (policy/predictor_mlp.c): what parses computes
 *      logits for every layer it has a model for and none for the others (finite weights
 *      may still overflow to NaN: the predict modules never pick a NaN);
 *   3  module parameters, "name=value,..." (policy/params.c): text that checks gives
 *      every known parameter a finite value;
 *   4  a size and a budget, as MOEVM_* values (vmm/options.c);
 *   5  text for the pre-tokenizers (engine/tokenizer/tok_pretok.c; the next byte picks which): the
 *      pieces are non-empty, in order, cover the text and cut it only between code points;
 *   6  a chat template (engine/chat/jinja.h), parsed and rendered over a small conversation:
 *      it renders (the output NUL-terminated at its length) or fails with a message, within
 *      the limits, never a crash;
 *   7  a file of a base model's log-probabilities (`moevm perplexity --kl-divergence-base`,
 *      tools/kl_divergence.c, llama.cpp's format): what opens holds the tokens it says,
 *      allocated only once they are there; its rows are read to the end or refused with a
 *      message, and each is compared with logits, whatever its floats hold;
 *   8  a GBNF grammar (engine/grammar/), then after a 0xFF byte a text: what parses matches
 *      the text whole or in pieces alike (a step refused leaves the state as it was), and
 *      what fails says why; made lazy (an input of odd length), it takes every byte until a
 *      trigger word shows outside its quiet block, where a plain scan finds it, and from
 *      there on matches as the grammar does;
 *   9  a JSON Schema (engine/grammar/json_schema.c): what converts is a grammar that
 *      parses; what fails says why.
 * A broken promise traps, so libFuzzer reports it like a crash.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/chat/jinja.h"
#include "engine/grammar/grammar.h"
#include "engine/tokenizer/tokenizer_impl.h"
#include "policy/cost.h"
#include "policy/predictor_mlp.h"
#include "tools/kl_divergence.h"
#include "tools/sim.h"
#include "tools/trace.h"
#include "vmm/options.h"

static volatile float sink; /* keeps the reads of the logits */

static void require(int cond)
{
    if (!cond)
        __builtin_trap();
}

/* data[0..size) as a C string (a NUL inside ends it early, as it would in a file). */
static char *text_of(const uint8_t *data, size_t size)
{
    char *t = malloc(size + 1);
    require(t != NULL);
    memcpy(t, data, size);
    t[size] = '\0';
    return t;
}

static int close_rel(double a, double b)
{
    return a == b || fabs(a - b) <= 1e-12 * fabs(b);
}

static void cost_file(const uint8_t *data, size_t size)
{
    char *text = text_of(data, size);
    mvm_machine m, back;
    if (mvm_machine_parse_json(text, "fuzz", &m) == MVM_OK) {
        const double pos[] = {m.pcie_bw, m.load_setup, m.zerocopy_bw, m.gpu_mem_bw, m.gpu_flops,
                              m.gpu_launch, m.cpu_mem_bw, m.cpu_flops, m.cpu_setup, m.attn_time};
        for (size_t i = 0; i < sizeof pos / sizeof *pos; i++)
            require(isfinite(pos[i]) && pos[i] > 0);
        require(isfinite(m.net_rtt) && m.net_rtt >= 0 && isfinite(m.net_bw) && m.net_bw >= 0);
        require(memchr(m.name, '\0', sizeof m.name) != NULL);
        char buf[4096];
        int n = mvm_machine_format_json(&m, NULL, buf, sizeof buf);
        require(n > 0 && (size_t)n < sizeof buf);
        require(mvm_machine_parse_json(buf, "fuzz round trip", &back) == MVM_OK);
        require(strcmp(back.name, m.name) == 0);
        require(close_rel(back.pcie_bw, m.pcie_bw) && close_rel(back.cpu_flops, m.cpu_flops));
        require(close_rel(back.attn_time, m.attn_time) && close_rel(back.net_bw, m.net_bw));
        mvm_cost c;
        mvm_cost_init(&c, &m, 1 << 20, 64, 64);
        require(isfinite(c.t_load) && isfinite(mvm_cost_cpu(&c, 8)) && mvm_cost_gpu(&c, 8) > 0);
    }
    free(text);
}

static void trace_file(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) { /* one in-memory file, rewritten for every input */
        fd = memfd_create("fuzz-trace", 0);
        require(fd >= 0);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    require(ftruncate(fd, 0) == 0 && pwrite(fd, data, size, 0) == (ssize_t)size);
    mvm_trace *t = NULL;
    if (mvm_trace_load(path, &t) != MVM_OK)
        return;
    const mvm_trace_header *h = &t->hdr;
    require(h->n_layers > 0 && h->n_experts > 0 && h->top_k > 0 && h->top_k <= h->n_experts);
    for (uint32_t i = 0; i < t->n_tokens; i++)
        for (uint32_t l = 0; l < h->n_layers; l++) {
            const int32_t *e = mvm_trace_experts(t, i, l);
            const float *w = mvm_trace_weights(t, i, l), *s = mvm_trace_scores(t, i, l);
            for (uint32_t k = 0; k < h->top_k; k++) {
                require(e[k] >= 0 && (uint32_t)e[k] < h->n_experts && isfinite(w[k]));
                for (uint32_t j = 0; j < k; j++)
                    require(e[j] != e[k]);
            }
            for (uint32_t x = 0; x < h->n_experts; x++)
                require(isfinite(s[x]));
        }
    /* Replays, kept small so the fuzzer stays fast: the trace's own shape decides the
     * work, and a header may promise a huge one for a handful of tokens. */
    if ((uint64_t)t->n_tokens * h->n_layers * h->n_experts <= 200000 && h->expert_bytes) {
        mvm_cost cost;
        mvm_cost_init(&cost, mvm_machine_preset("h100"), h->expert_bytes,
                      h->n_embd ? h->n_embd : 1, h->n_ff_exp ? h->n_ff_exp : 1);
        mvm_sim_config cfg;
        mvm_sim_config_init(&cfg);
        uint64_t ppe = (h->expert_bytes + cfg.page_bytes - 1) / cfg.page_bytes;
        cfg.budget_pages = ppe * h->n_experts * h->n_layers / 4 + ppe;
        mvm_sim_result r;
        if (mvm_sim_run(t, &cost, &cfg, &r) == MVM_OK)
            require(r.tokens == t->n_tokens && r.hits <= r.accesses && isfinite(r.time));
        cfg.policy[MVM_ROLE_EVICT] = "lcp";
        cfg.policy[MVM_ROLE_ASSIGN] = "greedy";
        cfg.policy[MVM_ROLE_ROUTE] = "importance";
        cfg.zerocopy = 1;
        if (mvm_sim_run(t, &cost, &cfg, &r) == MVM_OK)
            require(r.cpu_runs + r.zerocopy_runs <= r.accesses && isfinite(r.time));
    }
    mvm_trace_free(t);
}

static uint32_t u32_at(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void predictor_file(const uint8_t *data, size_t size)
{
    mvm_predictor *p = NULL;
    if (mvm_predictor_parse(data, size, NULL, &p) != MVM_OK)
        return;
    /* It parsed, so the header is there: L, E, K, D after the magic and the version. */
    uint32_t L = u32_at(data + 12), E = u32_at(data + 16), K = u32_at(data + 20);
    uint32_t D = u32_at(data + 24);
    float *work = malloc(mvm_predictor_work(p) * sizeof *work);
    float *h = malloc((size_t)D * sizeof *h);
    int32_t *experts = malloc((size_t)K * sizeof *experts);
    float *weights = malloc((size_t)K * sizeof *weights);
    require(work && h && experts && weights);
    for (uint32_t d = 0; d < D; d++)
        h[d] = (float)((int)(d % 7) - 3) * 0.25f;
    for (uint32_t k = 0; k < K; k++) {
        experts[k] = (int32_t)k - 1; /* -1: out of range, left out */
        weights[k] = 1.0f / (float)K;
    }
    require(mvm_predictor_logits(p, 0, h, experts, weights, work) == NULL);
    for (uint32_t t = 1; t < L; t++) {
        const float *lg = mvm_predictor_logits(p, t, h, experts, weights, work);
        require(lg != NULL);
        float sum = 0;
        for (uint32_t e = 0; e < E; e++)
            sum += lg[e];
        sink = sum;
    }
    require(mvm_predictor_logits(p, L, h, experts, weights, work) == NULL);
    free(work), free(h), free(experts), free(weights);
    mvm_predictor_free(p);
}

static void params_text(const uint8_t *data, size_t size)
{
    char *text = text_of(data, size);
    static const char *const known[] = {"alpha", "window", "n", "w_size", NULL};
    mvm_pparams p = {text};
    if (mvm_pparams_check(&p, known, "fuzz") == MVM_OK)
        for (size_t i = 0; known[i]; i++) {
            double v = NAN;
            require(mvm_pparam_double(&p, known[i], 0.5, &v) == MVM_OK && isfinite(v));
        }
    else
        require(strstr(mvm_last_error(), "fuzz") != NULL);
    free(text);
}

static void option_values(const uint8_t *data, size_t size)
{
    char *text = text_of(data, size);
    uint64_t bytes = 7;
    double frac = -1;
    size_t digits = strspn(text, "0123456789");
    /* Plain digits are that many bytes (up to 15 of them, what a double holds exactly). */
    if (mvm_parse_size(text, &bytes) == 0 && digits && !text[digits] && digits <= 15)
        require(bytes == strtoull(text, NULL, 10));
    if (mvm_parse_budget(text, &bytes, &frac) == 0)
        require(frac == 0 || (frac > 0 && frac <= 1 && isfinite(frac)));
    free(text);
}

static void pretok_text(const uint8_t *data, size_t size)
{
    if (size == 0)
        return;
    enum tok_pre pre = (enum tok_pre)(data[0] % (TOK_PRE_O200K + 1));
    const uint8_t *s = data + 1;
    size_t n = size - 1;
    tok_pieces p = {0};
    require(tok_pretok_split(pre, s, n, &p) == MVM_OK);
    require(p.n <= n && (p.n > 0) == (n > 0) && (!p.n || p.end[p.n - 1] == n));
    /* Where tok_utf8_decode starts each code point: a cut must be one of them. */
    uint8_t *starts = calloc(n + 1, 1);
    require(starts != NULL);
    for (size_t pos = 0; pos < n;) {
        uint32_t cp;
        starts[pos] = 1;
        pos += tok_utf8_decode(s + pos, n - pos, &cp);
    }
    for (size_t i = 0, prev = 0; i < p.n; prev = p.end[i++])
        require(p.end[i] > prev && p.end[i] <= n && (p.end[i] == n || starts[p.end[i]]));
    free(starts);
    tok_pieces_free(&p);
}

static void chat_template(const uint8_t *data, size_t size)
{
    static cJSON *vars;
    if (!vars) {
        vars = cJSON_Parse(
            "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
            "{\"role\": \"user\", \"content\": \"Hi \\\"there\\\" \\u00e9\"},"
            "{\"role\": \"assistant\", \"content\": \"<think>x</think>ok\", \"tool_calls\": [{\"type\":"
            " \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null]}}}]},"
            "{\"role\": \"tool\", \"content\": \"42\"}], \"tools\": [{\"type\": \"function\", \"function\":"
            " {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}], \"add_generation_prompt\": true,"
            " \"enable_thinking\": false, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}");
        require(vars != NULL);
    }
    mvm_jinja *t = NULL;
    if (mvm_jinja_parse((const char *)data, size, &t) != MVM_OK) {
        require(t == NULL && mvm_last_error()[0] != '\0');
        return;
    }
    char *out = (char *)1;
    size_t len = 0;
    mvm_status st = mvm_jinja_render(t, vars, &out, &len);
    if (st == MVM_OK)
        require(out != NULL && out[len] == '\0' && len <= (64u << 20));
    else
        require(out == NULL && mvm_last_error()[0] != '\0' &&
                (st == MVM_ERR_INVALID || st == MVM_ERR_RANGE || st == MVM_ERR_NOMEM));
    free(out);
    mvm_jinja_free(t);
}

/* An in-memory file of the input, rewritten for every one: its path. */
static const char *as_file(const char *name, const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create(name, 0);
        require(fd >= 0);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    require(ftruncate(fd, 0) == 0 && pwrite(fd, data, size, 0) == (ssize_t)size);
    return path;
}

static void kld_base(const uint8_t *data, size_t size)
{
    mvm_kld_file k;
    if (mvm_kld_open(&k, as_file("fuzz-kld", data, size)) != 0) {
        require(mvm_last_error()[0] != '\0');
        mvm_kld_close(&k, 1);
        return;
    }
    require(k.n_ctx >= 3 && k.n_chunk >= 1 && k.n_vocab >= 1 && k.tokens && k.row);
    require(20 + 4 * (uint64_t)k.n_ctx * k.n_chunk <= size);
    if (mvm_kld_check_vocab(&k, k.n_vocab) == 0 && k.n_vocab <= 4096) {
        static float logits[4096];
        for (uint32_t i = 0; i < k.n_vocab; i++)
            logits[i] = (float)(i % 7) - 3.f;
        mvm_kld s;
        require(mvm_kld_init(&s, 64) == 0);
        for (uint32_t r = 0; r < 64 && mvm_kld_read_row(&k) == 0; r++)
            mvm_kld_add(&s, logits, k.n_vocab, k.row, k.tokens[r % k.n_ctx]);
        require(s.count <= 64);
        mvm_kld_free(&s);
    }
    mvm_kld_close(&k, 1);
}

/* Where the first of the words "<t>" and "{" starts in text[0..len) outside <q>...</q>
 * (quiet: the text starts inside one), by a plain scan of the whole; len when none. */
static size_t first_trigger(const char *text, size_t len, int quiet)
{
    for (size_t i = 0; i < len;) {
        const char *p = text + i;
        const size_t n = len - i;
        if (quiet) {
            quiet = !(n >= 4 && !memcmp(p, "</q>", 4));
            i += quiet ? 1 : 4;
        } else if (*p == '{' || (n >= 3 && !memcmp(p, "<t>", 3))) {
            return i;
        } else {
            quiet = n >= 3 && !memcmp(p, "<q>", 3);
            i += quiet ? 3 : 1;
        }
    }
    return len;
}

/* gbnf made lazy on "<t>" and "{" fed text[0..len) byte by byte, against first_trigger
 * and the grammar itself fed the text from there. */
static void lazy_text(const char *gbnf, const char *text, size_t len, int quiet)
{
    static const char *const words[] = {"<t>", "{"};
    mvm_grammar *lazy = NULL, *from = NULL;
    require(mvm_grammar_parse(gbnf, &lazy) == MVM_OK && mvm_grammar_parse(gbnf, &from) == MVM_OK);
    require(mvm_grammar_set_lazy(lazy, &(mvm_grammar_triggers){words, 2, "<q>", "</q>", quiet}) ==
            MVM_OK);
    int all = 1;
    for (size_t i = 0; i < len; i++)
        all &= mvm_grammar_accept_text(lazy, text + i, 1);
    const size_t k = first_trigger(text, len, quiet);
    if (k == len)
        require(all && mvm_grammar_complete(lazy) && !mvm_grammar_finished(lazy));
    else if (mvm_grammar_accept_text(from, text + k, len - k))
        require(all && mvm_grammar_complete(lazy) == mvm_grammar_complete(from));
    mvm_grammar_free(lazy);
    mvm_grammar_free(from);
}

static void gbnf_text(const uint8_t *data, size_t size)
{
    const uint8_t *cut = memchr(data, 0xFF, size);
    const size_t n = cut ? (size_t)(cut - data) : size;
    char *src = text_of(data, n);
    const char *text = cut ? (const char *)cut + 1 : "";
    const size_t len = cut ? size - n - 1 : 0;
    mvm_grammar *whole = NULL, *steps = NULL;
    if (mvm_grammar_parse(src, &whole) != MVM_OK) {
        require(whole == NULL && mvm_last_error()[0] != '\0');
        free(src);
        return;
    }
    require(mvm_grammar_parse(src, &steps) == MVM_OK);
    const int ok = mvm_grammar_accept_text(whole, text, len);
    /* byte by byte: each byte the whole text's prefix allows is taken, and a refused
     * one leaves the state to take a later one (the whole text needs every byte) */
    int all = 1;
    for (size_t i = 0; i < len && len <= 4096; i++)
        all &= mvm_grammar_accept_text(steps, text + i, 1);
    if (len <= 4096)
        require(ok == all && (!ok || mvm_grammar_complete(whole) == mvm_grammar_complete(steps)));
    if (size % 2 && len <= 4096)
        lazy_text(src, text, len, size % 4 == 3);
    mvm_grammar_free(whole);
    mvm_grammar_free(steps);
    free(src);
}

static void json_schema(const uint8_t *data, size_t size)
{
    char *gbnf = (char *)1;
    if (mvm_json_schema_to_grammar((const char *)data, size, &gbnf) != MVM_OK) {
        require(mvm_last_error()[0] != '\0');
        return;
    }
    mvm_grammar *g = NULL;
    require(gbnf != NULL && mvm_grammar_parse(gbnf, &g) == MVM_OK);
    mvm_grammar_free(g);
    free(gbnf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    static void (*const targets[])(const uint8_t *, size_t) = {
        cost_file, trace_file, predictor_file, params_text, option_values, pretok_text,
        chat_template, kld_base, gbnf_text, json_schema};
    targets[data[0] % (sizeof targets / sizeof *targets)](data + 1, size - 1);
    return 0;
}
