/*
 * A model's metadata as the user puts it (engine/gguf/gguf_override.c, engine/model/
 * model_meta.c): llama.cpp's --override-kv specs parsed and refused as they should be, an
 * override reading back as the file's own value would, and, through the engine, the RoPE
 * options and an expert count computing exactly what a file that says so computes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine/compute/pool.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_write.h"
#include "engine/synth/mkmodel.h"
#include "moevm/engine.h"

/* ---- the spec ---------------------------------------------------------------------------- */

static void test_parse(void)
{
    mvm_gguf_override o;
    CHECK_ST(mvm_gguf_override_parse("qwen3moe.expert_used_count=int:10", &o), MVM_OK);
    CHECK(!strcmp(o.key, "qwen3moe.expert_used_count") && o.type == MVM_GGUF_I64 && o.i == 10);
    CHECK_ST(mvm_gguf_override_parse("k=int:-9223372036854775808", &o), MVM_OK);
    CHECK(o.i == INT64_MIN);
    CHECK_ST(mvm_gguf_override_parse("a.rope.freq_base=float:1e6", &o), MVM_OK);
    CHECK(o.type == MVM_GGUF_F32 && o.f == 1e6f);
    CHECK_ST(mvm_gguf_override_parse("tokenizer.ggml.add_bos_token=bool:false", &o), MVM_OK);
    CHECK(o.type == MVM_GGUF_BOOL && o.b == 0);
    CHECK_ST(mvm_gguf_override_parse("b=bool:true", &o), MVM_OK);
    CHECK(o.b == 1);
    /* a string keeps everything after the type, '=' and ':' included, and may be empty */
    CHECK_ST(mvm_gguf_override_parse("general.name=str:a=b:c d", &o), MVM_OK);
    CHECK(o.type == MVM_GGUF_STR && !strcmp(o.s, "a=b:c d"));
    CHECK_ST(mvm_gguf_override_parse("general.name=str:", &o), MVM_OK);
    CHECK(!strcmp(o.s, ""));

    static const struct {
        const char *spec, *says;
    } bad[] = {
        {"", "no '='"},
        {"key", "no '='"},
        {"=int:1", "no key"},
        {"a b=int:1", "no space"},
        {"a\tb=int:1", "no space"},
        {"k=int", "no ':'"},
        {"k=integer:1", "not int, float"},
        {"k=:1", "not int, float"},
        {"k=int:", "not a 64-bit integer"},
        {"k=int:10k", "not a 64-bit integer"},
        {"k=int: 1", "not a 64-bit integer"},
        {"k=int:9223372036854775808", "not a 64-bit integer"},
        {"k=int:1.5", "not a 64-bit integer"},
        {"k=float:", "not a finite float"},
        {"k=float:nan", "not a finite float"},
        {"k=float:inf", "not a finite float"},
        {"k=float:1e39", "not a finite float"},
        {"k=float:0x", "not a finite float"},
        {"k=bool:yes", "true or false"},
        {"k=bool:", "true or false"},
        {"k=bool:True", "true or false"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mvm_status st = mvm_gguf_override_parse(bad[i].spec, &o);
        CHECK(st == MVM_ERR_INVALID);
        if (st != MVM_ERR_INVALID || !strstr(mvm_last_error(), bad[i].says) ||
            strchr(mvm_last_error(), '\n'))
            fprintf(stderr, "spec '%s': %s\n", bad[i].spec, mvm_last_error());
        CHECK(strstr(mvm_last_error(), bad[i].says) && !strchr(mvm_last_error(), '\n'));
    }
    char key[MVM_GGUF_OVERRIDE_KEY + 16];
    memset(key, 'k', sizeof key);
    strcpy(key + MVM_GGUF_OVERRIDE_KEY, "=int:1");
    CHECK_ST(mvm_gguf_override_parse(key, &o), MVM_OK); /* the longest key */
    memset(key, 'k', sizeof key);
    strcpy(key + MVM_GGUF_OVERRIDE_KEY + 1, "=int:1");
    CHECK_ST(mvm_gguf_override_parse(key, &o), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "longer than 255"));

    /* random bytes: a spec parses or is refused in one printable line, never more */
    uint64_t x = 88172645463325252ull;
    static const char alphabet[] = "k=:intfloatboolstr.0123456789-+eE \t\x01\x7f\xff\"";
    for (int n = 0; n < 20000; n++) {
        char s[24];
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const size_t len = x % (sizeof s - 1);
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            s[i] = alphabet[x % (sizeof alphabet - 1)];
        }
        s[len] = '\0';
        if (mvm_gguf_override_parse(s, &o) != MVM_OK) {
            const char *m = mvm_last_error();
            int printable = 1;
            for (const char *c = m; *c; c++)
                printable &= (unsigned char)*c >= ' ' && *c != 0x7f;
            CHECK(printable && !strncmp(m, "--override-kv '", 15));
        } else {
            CHECK(o.key[0] && strlen(o.key) < (size_t)len);
        }
    }
}

/* ---- on a file ----------------------------------------------------------------------------- */

static mvm_gguf *small_file(char *path)
{
    mvm_gguf_writer *w = NULL;
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    const int32_t arr[3] = {1, 2, 3};
    CHECK_ST(mvm_gguf_writer_set_u32(w, "a.count", 7), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_f32(w, "a.base", 1.5f), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_str(w, "a.name", "file"), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_bool(w, "a.flag", 1), MVM_OK);
    CHECK_ST(mvm_gguf_writer_set_arr_i32(w, "a.list", arr, 3), MVM_OK);
    CHECK_ST(mvm_gguf_writer_write(w, path), MVM_OK);
    mvm_gguf_writer_free(w);
    mvm_gguf *g = NULL;
    CHECK_ST(mvm_gguf_open(path, &g), MVM_OK);
    return g;
}

static mvm_status apply(mvm_gguf *g, const char *spec)
{
    mvm_gguf_override o;
    mvm_status st = mvm_gguf_override_parse(spec, &o);
    return st == MVM_OK ? mvm_gguf_override_apply(g, &o) : st;
}

static void test_apply(void)
{
    char path[] = "/tmp/moevm_meta_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    mvm_gguf *g = small_file(path);
    if (!g)
        return;
    uint32_t u = 0;
    float f = 0;
    int b = -1;
    mvm_gguf_str s;
    /* in place of the file's: an int over a u32, read by the u32 getter */
    CHECK_ST(apply(g, "a.count=int:12"), MVM_OK);
    CHECK_ST(mvm_gguf_get_u32(g, "a.count", &u), MVM_OK);
    CHECK(u == 12);
    CHECK_ST(apply(g, "a.count=int:-1"), MVM_OK);
    CHECK_ST(mvm_gguf_get_u32(g, "a.count", &u), MVM_ERR_RANGE); /* a value the key cannot take */
    CHECK_ST(apply(g, "a.base=float:0.25"), MVM_OK);
    CHECK_ST(mvm_gguf_get_f32(g, "a.base", &f), MVM_OK);
    CHECK(f == 0.25f);
    CHECK_ST(apply(g, "a.flag=bool:false"), MVM_OK);
    CHECK_ST(mvm_gguf_get_bool(g, "a.flag", &b), MVM_OK);
    CHECK(b == 0);
    CHECK_ST(apply(g, "a.name=str:given, with a comma"), MVM_OK);
    CHECK_ST(mvm_gguf_get_str(g, "a.name", &s), MVM_OK);
    CHECK(s.len == 19 && !memcmp(s.ptr, "given, with a comma", 19));
    /* another kind than the file's value, or an array: refused, naming both, unchanged */
    CHECK_ST(apply(g, "a.count=float:2"), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "a.count") && strstr(mvm_last_error(), "i64") &&
          strstr(mvm_last_error(), "float"));
    CHECK_ST(apply(g, "a.base=int:2"), MVM_ERR_INVALID);
    CHECK_ST(apply(g, "a.name=bool:true"), MVM_ERR_INVALID);
    CHECK_ST(apply(g, "a.list=int:2"), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "arr[i32]"));
    CHECK_ST(mvm_gguf_get_f32(g, "a.base", &f), MVM_OK);
    CHECK(f == 0.25f);
    /* keys the file lacks, many, so that the table and its index grow: every key, old and
     * new, found again */
    const uint64_t before = mvm_gguf_n_keys(g);
    for (int i = 0; i < 100; i++) {
        char spec[64];
        snprintf(spec, sizeof spec, "new.key%d=int:%d", i, i * 3);
        CHECK_ST(apply(g, spec), MVM_OK);
    }
    CHECK(mvm_gguf_n_keys(g) == before + 100);
    int found = 0;
    for (int i = 0; i < 100; i++) {
        char key[32];
        snprintf(key, sizeof key, "new.key%d", i);
        found += mvm_gguf_get_u32(g, key, &u) == MVM_OK && u == (uint32_t)i * 3;
    }
    CHECK(found == 100);
    CHECK_ST(mvm_gguf_get_bool(g, "a.flag", &b), MVM_OK);
    CHECK(mvm_gguf_find_key(g, "a.list") >= 0 && mvm_gguf_find_key(g, "new.key100") < 0);
    mvm_gguf_close(g);
    unlink(path);
    if (fd >= 0)
        close(fd);
}

/* ---- through the engine ------------------------------------------------------------------ */

static void write_model(const mvm_model_spec *spec, char *path)
{
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    mvm_pool *pool = NULL;
    CHECK_ST(mvm_pool_create(1, NULL, &pool), MVM_OK);
    CHECK_ST(mvm_mkmodel_write(spec, path, pool, NULL, NULL), MVM_OK);
    mvm_pool_destroy(pool);
}

/* The logits of the last of `n` prompt tokens, positions far enough in for the context
 * extension to matter; NULL when the load fails (its message in mvm_last_error). */
static float *logits_of(const mvm_engine_params *p, mvm_engine_info *info)
{
    mvm_engine *e = NULL;
    if (mvm_engine_load(p, &e) != MVM_OK)
        return NULL;
    mvm_engine_get_info(e, info);
    enum { N = 40 };
    int32_t toks[N];
    for (int i = 0; i < N; i++)
        toks[i] = (int32_t)((i * 7919 + 13) % (info->n_vocab - 300) + 256);
    float *logits = malloc(info->n_vocab * sizeof *logits);
    for (uint32_t i = 0; logits && i < info->n_vocab; i++)
        logits[i] = NAN; /* poisoned: every one must be written */
    CHECK_ST(mvm_engine_eval(e, 0, toks, N, logits), MVM_OK);
    mvm_engine_free(e);
    return logits;
}

static int same(const float *a, const float *b, uint32_t n)
{
    if (!a || !b)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (!(a[i] == b[i]))
            return 0;
    return 1;
}

static void test_engine(void)
{
    setenv("MOEVM_BACKEND", "host", 1);
    mvm_model_spec plain = mvm_preset_find("tiny", "qwen3moe")->spec;
    plain.seed = 11;
    plain.n_ctx = 16; /* a short training context, so that positions 16..39 extend it */
    mvm_model_spec yarn = plain, topk = plain;
    snprintf(yarn.rope_scaling, sizeof yarn.rope_scaling, "yarn");
    yarn.rope_factor = 4, yarn.rope_orig_ctx = 8;
    topk.n_expert_used = plain.n_expert_used + 2;
    char p_plain[] = "/tmp/moevm_meta_plain_XXXXXX", p_yarn[] = "/tmp/moevm_meta_yarn_XXXXXX",
         p_topk[] = "/tmp/moevm_meta_topk_XXXXXX";
    write_model(&plain, p_plain);
    write_model(&yarn, p_yarn);
    write_model(&topk, p_topk);

    mvm_engine_info ip, iy, io, it, ik;
    const mvm_engine_params base = {.model = p_plain, .threads = 1, .n_ctx = 64};
    float *lp = logits_of(&base, &ip);
    float *ly = logits_of(&(mvm_engine_params){.model = p_yarn, .threads = 1, .n_ctx = 64}, &iy);
    mvm_engine_params opt = base;
    opt.rope = (mvm_rope_params){.scaling = "yarn", .scale = 4, .yarn_orig_ctx = 8};
    float *lo = logits_of(&opt, &io);
    CHECK(lp && ly && lo);
    /* the options compute what the file that says so computes, and differ from the plain */
    CHECK(same(ly, lo, ip.n_vocab));
    CHECK(!same(lp, lo, ip.n_vocab));
    CHECK(iy.n_ctx_train == 32 && io.n_ctx_train == 32 && ip.n_ctx_train == 16);
    /* --rope-scaling none over a file's YaRN: the plain model's */
    mvm_engine_params none = {.model = p_yarn, .threads = 1, .n_ctx = 64};
    none.rope.scaling = "none";
    float *ln = logits_of(&none, &io);
    CHECK(same(lp, ln, ip.n_vocab));

    /* an expert count as an override: the file with that count */
    char spec[64];
    snprintf(spec, sizeof spec, "qwen3moe.expert_used_count=int:%u", topk.n_expert_used);
    const char *kv[] = {"general.name=str:renamed", spec};
    mvm_engine_params over = base;
    over.kv_overrides = kv, over.n_kv_overrides = 2;
    float *lk = logits_of(&(mvm_engine_params){.model = p_topk, .threads = 1, .n_ctx = 64}, &ik);
    float *lv = logits_of(&over, &it);
    CHECK(lk && lv && it.n_expert_used == topk.n_expert_used);
    CHECK(same(lk, lv, ip.n_vocab));
    CHECK(!same(lp, lv, ip.n_vocab));

    /* refusals, one line each, naming what was wrong */
    const char *wrong[][2] = {{"qwen3moe.expert_used_count=float:4", "type u32, not float"},
                              {"qwen3moe.expert_used_count=int:0", "expert_used_count 0"},
                              {"qwen3moe.expert_used_count=int:999", "expert_used_count 999"},
                              {"general.architecture=str:gpt2", "'gpt2' is not supported"},
                              {"noequals", "no '='"}};
    for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++) {
        mvm_engine_params w = base;
        w.kv_overrides = &wrong[i][0], w.n_kv_overrides = 1;
        mvm_engine *e = NULL;
        CHECK(mvm_engine_load(&w, &e) != MVM_OK && !e);
        CHECK(strstr(mvm_last_error(), wrong[i][1]) && !strchr(mvm_last_error(), '\n'));
        if (!strstr(mvm_last_error(), wrong[i][1]))
            fprintf(stderr, "override '%s': %s\n", wrong[i][0], mvm_last_error());
    }
    mvm_engine_params w = base;
    w.rope = (mvm_rope_params){.scaling = "yarn", .scale = 0.5f};
    mvm_engine *e = NULL;
    CHECK(mvm_engine_load(&w, &e) != MVM_OK && strstr(mvm_last_error(), "YaRN needs 1"));
    free(lp), free(ly), free(lo), free(ln), free(lk), free(lv);
    unlink(p_plain), unlink(p_yarn), unlink(p_topk);
}

int main(void)
{
    RUN(test_parse);
    RUN(test_apply);
    RUN(test_engine);
    TEST_END();
}
