/*
 * The engine API as an application embedding moevm sees it: only include/moevm/engine.h,
 * linked against libmoevm.so (the exports its map allows). A tiny model is made with the
 * CLI given as argv[1] in the directory argv[2].
 *
 * Loading refuses bad parameters with a message naming them; tokens round-trip; a chat
 * template renders and its control tokens are parsed; two sequences evaluate independently,
 * and a sequence truncated and extended gives the logits of evaluating it whole (the prefix
 * reuse that chat and serve rely on); a failed evaluation leaves the cache as it was; the
 * sampler at temperature 0 picks the highest logit; llama.cpp's --n-cpu-moe is a budget, none
 * when it covers every layer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "moevm/engine.h"

static char model[512];

static mvm_engine *load(mvm_engine_params p)
{
    mvm_engine *e = NULL;
    p.model = p.model ? p.model : model;
    p.threads = 2;
    CHECK_ST(mvm_engine_load(&p, &e), MVM_OK);
    return e;
}

static void test_load_errors(void)
{
    mvm_engine *e = NULL;
    const struct {
        mvm_engine_params p;
        mvm_status want;
        const char *says;
    } cases[] = {
        {{.model = "/nonexistent/x.gguf"}, MVM_ERR_INVALID, "/nonexistent/x.gguf"},
        {{.model = model, .gpu_budget = "lots"}, MVM_ERR_INVALID, "lots"},
        {{.model = model, .evict = "clairvoyant"}, MVM_ERR_INVALID, "clairvoyant"},
        {{.model = model, .evict = "lru{n=1"}, MVM_ERR_INVALID, "lru{n=1"},
        {{.model = model, .n_batch = 5000}, MVM_ERR_INVALID, "5000"},
        {{.model = model, .kv_type = "q4"}, MVM_ERR_INVALID, "q4"},
        {{.model = model, .gpu_budget = "50%", .cpu_moe = 1}, MVM_ERR_INVALID, "n_cpu_moe"},
        {{0}, MVM_ERR_INVALID, "no model"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mvm_status st = mvm_engine_load(&cases[i].p, &e);
        CHECK(st != MVM_OK && e == NULL);
        CHECK(strstr(mvm_last_error(), cases[i].says) != NULL);
        if (st == MVM_OK || !strstr(mvm_last_error(), cases[i].says))
            fprintf(stderr, "  case %zu: %s: %s\n", i, mvm_status_name(st), mvm_last_error());
        mvm_engine_free(e);
    }
}

static void test_text(mvm_engine *e)
{
    const char *text = "Once upon a time, the sea.";
    int32_t ids[64];
    size_t n = 0;
    CHECK_ST(mvm_engine_tokenize(e, text, strlen(text), 0, 0, ids, 64, &n), MVM_OK);
    char back[256] = "";
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += mvm_engine_token_piece(e, ids[i], back + len, sizeof back - len - 1);
    CHECK(n > 0 && len == strlen(text) && memcmp(back, text, len) == 0);
    char *prompt = NULL;
    CHECK_ST(mvm_engine_chat_format(e, "[{\"role\":\"user\",\"content\":\"hi\"}]", NULL, 1,
                                    &prompt), MVM_OK);
    CHECK(prompt && strstr(prompt, "hi") && strstr(prompt, "<|im_start|>"));
    if (prompt) {
        CHECK_ST(mvm_engine_tokenize(e, prompt, strlen(prompt), 1, 1, ids, 64, &n), MVM_OK);
        int found = 0; /* <|im_start|> as one control token, which prints nothing */
        for (size_t i = 0; i < n; i++)
            found |= strcmp(mvm_engine_token_text(e, ids[i]), "<|im_start|>") == 0 &&
                     mvm_engine_token_piece(e, ids[i], NULL, 0) == 0;
        CHECK(found);
    }
    free(prompt);
    /* the template's source: the model's own (the tiny presets carry their family's) */
    const char *src = mvm_engine_chat_template(e);
    CHECK(src && strstr(src, "<|im_start|>") && strstr(src, "messages"));
    CHECK_ST(mvm_engine_chat_format(e, "{\"role\":\"user\"}", NULL, 1, &prompt), MVM_ERR_INVALID);
    CHECK_ST(mvm_engine_chat_format(e, "[{\"role\":", NULL, 1, &prompt), MVM_ERR_INVALID);
    CHECK(prompt == NULL);
}

/* Logits of tokens[0..n) evaluated in sequence seq after `past` cached ones. */
static float *eval(mvm_engine *e, uint32_t seq, const int32_t *t, uint32_t n)
{
    uint32_t V = mvm_engine_n_vocab(e);
    float *l = malloc(V * sizeof *l);
    for (uint32_t i = 0; l && i < V; i++)
        l[i] = NAN; /* poisoned */
    CHECK_ST(mvm_engine_eval(e, seq, t, n, l), MVM_OK);
    return l;
}

static void test_sequences(mvm_engine *e)
{
    const int32_t t[12] = {11, 300, 42, 7, 99, 411, 5, 64, 77, 250, 13, 8};
    const uint32_t V = mvm_engine_n_vocab(e);
    mvm_engine_truncate(e, 0, 0), mvm_engine_truncate(e, 1, 0);
    float *whole = eval(e, 0, t, 12);
    float *half = eval(e, 1, t, 6);
    float *rest = eval(e, 1, t + 6, 6);
    CHECK(mvm_engine_n_past(e, 0) == 12 && mvm_engine_n_past(e, 1) == 12);
    CHECK(whole && rest && memcmp(whole, rest, V * sizeof *whole) == 0);
    /* the reuse of a cached prefix: cut back to 9, the last 3 again */
    mvm_engine_truncate(e, 0, 9);
    CHECK(mvm_engine_n_past(e, 0) == 9);
    float *again = eval(e, 0, t + 9, 3);
    CHECK(whole && again && memcmp(whole, again, V * sizeof *whole) == 0);
    /* greedy = the highest logit */
    mvm_sampler *s = NULL;
    CHECK_ST(mvm_sampler_create(&(mvm_sampler_params){.temperature = 0}, V, &s), MVM_OK);
    int32_t best = 0;
    for (uint32_t i = 1; whole && i < V; i++)
        best = whole[i] > whole[best] ? (int32_t)i : best;
    CHECK(s && whole && mvm_sampler_sample(s, whole, V) == best);
    mvm_sampler_free(s);
    /* failures leave the cache as it was */
    int32_t bad = (int32_t)V;
    CHECK_ST(mvm_engine_eval(e, 0, &bad, 1, NULL), MVM_ERR_INVALID);
    CHECK(mvm_engine_n_past(e, 0) == 12);
    CHECK_ST(mvm_engine_eval(e, 2, t, 1, NULL), MVM_ERR_RANGE);
    mvm_engine_info in;
    mvm_engine_get_info(e, &in);
    int32_t *many = calloc(in.n_ctx, sizeof *many);
    CHECK_ST(mvm_engine_eval(e, 0, many, in.n_ctx, NULL), MVM_ERR_RANGE);
    CHECK(mvm_engine_n_past(e, 0) == 12);
    free(many);
    mvm_engine_stats st;
    mvm_engine_get_stats(e, &st);
    CHECK(st.tokens == 12 + 6 + 6 + 3 && st.accesses > 0 && st.budget_bytes > 0);
    CHECK(st.hits <= st.accesses && st.resident_bytes <= st.budget_bytes);
    free(whole), free(half), free(rest), free(again);
}

/* mvm_engine_eval_batch: both sequences' tokens in one call give the logits each gets by
 * itself, in the batch's order for the tokens that ask; a bad batch keeps both as they were. */
static void test_batch(mvm_engine *e)
{
    const int32_t a[4] = {11, 300, 42, 7}, b[3] = {99, 411, 5};
    const uint32_t V = mvm_engine_n_vocab(e);
    mvm_engine_truncate(e, 0, 0), mvm_engine_truncate(e, 1, 0);
    float *alone_a = eval(e, 0, a, 4), *alone_b = eval(e, 1, b, 3);
    mvm_engine_truncate(e, 0, 0), mvm_engine_truncate(e, 1, 0);
    const mvm_engine_token batch[7] = {{11, 0, 0}, {99, 1, 0}, {300, 0, 0}, {411, 1, 0},
                                       {42, 0, 0}, {5, 1, 1},  {7, 0, 1}};
    float *got = malloc(3 * (size_t)V * sizeof *got);
    for (size_t i = 0; got && i < 3 * (size_t)V; i++)
        got[i] = NAN; /* poisoned: the third row must stay so */
    CHECK_ST(mvm_engine_eval_batch(e, batch, 7, got), MVM_OK);
    CHECK(mvm_engine_n_past(e, 0) == 4 && mvm_engine_n_past(e, 1) == 3);
    double err_b = 0, err_a = 0, norm_b = 0, norm_a = 0;
    int untouched = 1;
    for (uint32_t i = 0; got && alone_a && alone_b && i < V; i++) {
        err_b += (got[i] - alone_b[i]) * (double)(got[i] - alone_b[i]);
        err_a += (got[V + i] - alone_a[i]) * (double)(got[V + i] - alone_a[i]);
        norm_b += alone_b[i] * (double)alone_b[i];
        norm_a += alone_a[i] * (double)alone_a[i];
        untouched &= isnan(got[2 * V + i]);
    }
    CHECK(norm_a > 0 && norm_b > 0 && err_a <= 1e-10 * norm_a && err_b <= 1e-10 * norm_b);
    CHECK(untouched);
    const mvm_engine_token bad[2] = {{5, 0, 1}, {6, 2, 1}};
    CHECK_ST(mvm_engine_eval_batch(e, bad, 2, got), MVM_ERR_RANGE);
    CHECK(mvm_engine_n_past(e, 0) == 4 && mvm_engine_n_past(e, 1) == 3);
    free(alone_a), free(alone_b), free(got);
}

/* The budget of a model loaded with p (threads 2, 16 positions); ~0 when it fails. */
static uint64_t budget_of(mvm_engine_params p)
{
    p.n_ctx = 16;
    mvm_engine *e = load(p);
    mvm_engine_info in = {.budget_bytes = ~0ull};
    if (e)
        mvm_engine_get_info(e, &in);
    mvm_engine_free(e);
    return in.budget_bytes;
}

/* n_cpu_moe: the experts of all but N of the 2 layers on the device, a share of their pages
 * as gpu_budget gives it; N covering every layer, none: the CPU reads them at their homes,
 * and the model still computes. */
static void test_cpu_moe(void)
{
    uint64_t half = budget_of((mvm_engine_params){.gpu_budget = "50%"});
    uint64_t all = budget_of((mvm_engine_params){.gpu_budget = "100%"});
    CHECK(half > 0 && all == 2 * half);
    CHECK(budget_of((mvm_engine_params){.cpu_moe = 1, .n_cpu_moe = 1}) == half);
    CHECK(budget_of((mvm_engine_params){.cpu_moe = 1, .n_cpu_moe = 0}) == all);
    mvm_engine *e = load((mvm_engine_params){.n_ctx = 16, .cpu_moe = 1, .n_cpu_moe = 99});
    if (!e)
        return;
    mvm_engine_info in;
    mvm_engine_get_info(e, &in);
    const int32_t t[3] = {11, 300, 42};
    float *l = eval(e, 0, t, 3);
    mvm_engine_stats st;
    mvm_engine_get_stats(e, &st);
    CHECK(in.budget_bytes == 0 && st.budget_bytes == 0 && st.accesses > 0 && l && !isnan(l[0]));
    free(l);
    mvm_engine_free(e);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_api MOEVM_CLI WORKDIR\n");
        return 2;
    }
    snprintf(model, sizeof model, "%s/api-tiny-qwen3moe.gguf", argv[2]);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' mkmodel --preset tiny --arch qwen3moe -o "
             "'%s' >/dev/null", argv[2], argv[1], model);
    if (system(cmd) != 0) {
        fprintf(stderr, "test_api: %s failed\n", cmd);
        return 1;
    }
    setenv("MOEVM_BACKEND", "host", 1);
    RUN(test_load_errors);
    RUN(test_cpu_moe);
    mvm_engine *e = load((mvm_engine_params){.n_ctx = 64, .n_seq = 2, .gpu_budget = "30%"});
    if (e) {
        mvm_engine_info in;
        mvm_engine_get_info(e, &in);
        CHECK(in.n_seq == 2 && in.n_ctx == 64 && in.n_vocab >= 512 && strcmp(in.arch, "qwen3moe") == 0);
        CHECK(strcmp(in.backend, "cpu") == 0 && in.budget_bytes > 0 && in.n_expert_used > 0);
        test_text(e);
        test_sequences(e);
        test_batch(e);
    }
    mvm_engine_free(e);
    TEST_END();
}
