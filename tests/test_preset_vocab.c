/*
 * Every mkmodel preset's vocabulary, as the model file carries it (mvm_spec_vocab):
 *  - it prints: nearly every token's piece is visible text, so that `moevm run` on a
 *    random-weight model shows a reply (the realistic shapes were ~97% padding tokens that
 *    decode to nothing); a tiny preset's 512 tokens are half byte tokens, which stand for
 *    bytes rather than text, so less is asked of those;
 *  - each special token its chat template writes (checked to be in the template) is one
 *    CONTROL token of the vocabulary, and those that end a turn end generation.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_write.h"
#include "engine/synth/mkmodel.h"
#include "engine/tokenizer/tokenizer_impl.h"

static char path[128];

#define DS(name) "<\xEF\xBD\x9C" name "\xEF\xBD\x9C>"
#define SP "\xE2\x96\x81"

/* The special texts each architecture's template writes; `ends` lists those that end a
 * turn, `not_ends` those that must not (gpt-oss's <|end|> ends a message, not the reply). */
static const struct family {
    const char *arch;
    const char *specials[16], *ends[3], *not_ends[2];
} families[] = {
    {"llama", {"[INST]", "[/INST]"}, {"</s>"}, {"[INST]"}},
    {"qwen2moe", {"<|im_start|>", "<|im_end|>"}, {"<|im_end|>"}, {"<|im_start|>"}},
    {"qwen3moe", {"<|im_start|>", "<|im_end|>"}, {"<|im_end|>"}, {"<|im_start|>"}},
    {"olmoe", {"<|system|>", "<|user|>", "<|assistant|>"}, {"<|endoftext|>"}, {"<|user|>"}},
    {"deepseek2",
     {DS("User"), DS("Assistant"), DS("end" SP "of" SP "sentence"),
      DS("tool" SP "calls" SP "begin"), DS("tool" SP "calls" SP "end"),
      DS("tool" SP "call" SP "begin"), DS("tool" SP "call" SP "end"), DS("tool" SP "sep"),
      DS("tool" SP "outputs" SP "begin"), DS("tool" SP "outputs" SP "end"),
      DS("tool" SP "output" SP "begin"), DS("tool" SP "output" SP "end")},
     {DS("end" SP "of" SP "sentence")}, {DS("User")}},
    {"glm4moe", {"[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"},
     {"<|user|>", "<|observation|>"}, {"<|assistant|>"}},
    {"minimax-m2", {"]~!b[", "]~b]", "[e~["}, {"[e~["}, {"]~b]"}},
    {"gpt-oss", {"<|start|>", "<|message|>", "<|end|>", "<|channel|>", "<|call|>", "<|return|>"},
     {"<|return|>", "<|call|>"}, {"<|end|>", "<|start|>"}},
};

static mvm_tokenizer *load(const mvm_vocab *v)
{
    mvm_gguf_writer *w;
    mvm_tokenizer *t = NULL;
    mvm_gguf *g;
    CHECK_ST(mvm_gguf_writer_new(&w), MVM_OK);
    CHECK_ST(mvm_vocab_write(v, w), MVM_OK);
    CHECK_ST(mvm_gguf_writer_write(w, path), MVM_OK);
    mvm_gguf_writer_free(w);
    mvm_status st = mvm_gguf_open(path, &g);
    CHECK(st == MVM_OK);
    if (st == MVM_OK) {
        CHECK_ST(mvm_tokenizer_load(g, &t), MVM_OK);
        mvm_gguf_close(g);
    }
    unlink(path);
    return t;
}

/* Valid UTF-8 with something to see: a character that is not a space or a control. */
static int visible(const unsigned char *s, size_t n)
{
    int seen = 0;
    for (size_t i = 0; i < n;) {
        size_t k = s[i] < 0x80 ? 1 : (s[i] >> 5) == 6 ? 2 : (s[i] >> 4) == 14 ? 3
                 : (s[i] >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n)
            return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80)
                return 0;
        seen |= k > 1 || (s[i] > 0x20 && s[i] < 0x7F);
        i += k;
    }
    return seen;
}

static double visible_share(const mvm_tokenizer *t)
{
    uint32_t n = mvm_tokenizer_n_vocab(t), shown = 0;
    for (uint32_t id = 0; id < n; id++) {
        unsigned char buf[256];
        size_t len = mvm_tokenizer_piece(t, (int32_t)id, (char *)buf, sizeof buf);
        shown += len <= sizeof buf && visible(buf, len);
    }
    return (double)shown / n;
}

/* Each of the family's special texts is in the template and encodes as one CONTROL token;
 * the ends end generation, the others do not. */
static void check_specials(const mvm_preset *p, const mvm_tokenizer *t)
{
    const char *tmpl = mvm_chat_template_for(&p->spec);
    const struct family *f = NULL;
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (strcmp(families[i].arch, p->spec.arch) == 0)
            f = &families[i];
    CHECK(f && tmpl);
    if (!f || !tmpl)
        return;
    for (int i = 0; i < 16 && f->specials[i]; i++) {
        const char *s = f->specials[i];
        int32_t ids[8];
        size_t n = 0;
        CHECK_ST(mvm_tokenizer_encode_special(t, s, strlen(s), 0, ids, 8, &n), MVM_OK);
        int ok = strstr(tmpl, s) && n == 1 && t->type[ids[0]] == MVM_TOKEN_CONTROL;
        if (!ok)
            fprintf(stderr, "  %s %s: '%s' is %zu tokens or not in the template\n", p->name,
                    p->spec.arch, s, n);
        CHECK(ok);
    }
    for (int i = 0; i < 3 && f->ends[i]; i++) {
        int32_t id = tok_strtab_find(&t->text, f->ends[i], strlen(f->ends[i]));
        CHECK(id >= 0 && mvm_tokenizer_is_eog(t, id));
    }
    for (int i = 0; i < 2 && f->not_ends[i]; i++) {
        int32_t id = tok_strtab_find(&t->text, f->not_ends[i], strlen(f->not_ends[i]));
        CHECK(id >= 0 && !mvm_tokenizer_is_eog(t, id));
    }
}

static void test_presets(void)
{
    const mvm_preset *p;
    for (size_t i = 0; (p = mvm_preset_at(i)) != NULL; i++) {
        mvm_vocab v;
        CHECK_ST(mvm_spec_vocab(&p->spec, &v), MVM_OK);
        mvm_tokenizer *t = v.tokens ? load(&v) : NULL;
        if (t) {
            double share = visible_share(t);
            fprintf(stderr, "  %-18s %-10s %6u tokens, %5.1f%% visible\n", p->name,
                    p->spec.arch, p->spec.n_vocab, 100 * share);
            CHECK(share >= (p->spec.n_vocab > 1000 ? 0.95 : 0.6));
            check_specials(p, t);
            mvm_tokenizer_free(t);
        }
        mvm_vocab_free(&v);
    }
}

int main(void)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/test_preset_vocab.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(path, sizeof path, "%s/vocab.gguf", dir);
    RUN(test_presets);
    rmdir(dir);
    TEST_END();
}
