/*
 * bench_tokenizer: how fast each built-in vocabulary style encodes text, and what its
 * pre-tokenizer alone costs. The text is the vocabulary corpus (about 55 KiB of English
 * with some numbers), encoded `rounds` times; each style's vocabulary is the size of its
 * real model's. Only ratios within one run mean anything on these machines.
 *
 * usage: bench_tokenizer [rounds]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/cpu/bench_util.h"
#include "engine/gguf/gguf_write.h"
#include "engine/synth/vocab_build.h"
#include "engine/tokenizer/tokenizer_impl.h"

static mvm_tokenizer *load(enum mvm_vocab_style style, uint32_t n_vocab)
{
    char path[] = "/tmp/bench_tokenizer_XXXXXX";
    int fd = mkstemp(path);
    mvm_vocab v;
    mvm_gguf_writer *w = NULL;
    mvm_gguf *g = NULL;
    mvm_tokenizer *t = NULL;
    if (fd < 0 || mvm_vocab_build(style, n_vocab, &v) != MVM_OK)
        goto out;
    if (mvm_gguf_writer_new(&w) == MVM_OK && mvm_vocab_write(&v, w) == MVM_OK &&
        mvm_gguf_writer_write(w, path) == MVM_OK && mvm_gguf_open(path, &g) == MVM_OK)
        mvm_tokenizer_load(g, &t);
    mvm_gguf_close(g);
    mvm_gguf_writer_free(w);
    mvm_vocab_free(&v);
out:
    if (fd >= 0)
        close(fd), unlink(path);
    if (!t)
        fprintf(stderr, "bench_tokenizer: %s\n", mvm_last_error());
    return t;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    if (rounds <= 0) {
        fprintf(stderr, "usage: bench_tokenizer [rounds > 0]\n");
        return 2;
    }
    static const struct {
        const char *name;
        enum mvm_vocab_style style;
        uint32_t n_vocab;
    } styles[] = {
        {"llama (SPM)", MVM_VOCAB_LLAMA, 32000},
        {"qwen2", MVM_VOCAB_QWEN2, 151936},
        {"olmo (gpt-2)", MVM_VOCAB_OLMO, 50304},
        {"deepseek-llm", MVM_VOCAB_DEEPSEEK, 102400},
        {"deepseek-v3", MVM_VOCAB_DEEPSEEK3, 129280},
        {"kimi-k2", MVM_VOCAB_KIMI, 163840},
    };
    size_t cap = 1 << 16, bytes = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    for (size_t p = 0; p < mvm_vocab_corpus_n; p++)
        bytes += strlen(mvm_vocab_corpus[p]);
    printf("%-13s %10s %12s %14s\n", "style", "tokens", "encode MB/s", "pre-tok MB/s");
    for (size_t s = 0; s < sizeof styles / sizeof *styles; s++) {
        mvm_tokenizer *t = load(styles[s].style, styles[s].n_vocab);
        if (!t || !ids)
            return 1;
        size_t tokens = 0, n;
        tok_pieces pieces = {0};
        double t0 = mvm_bench_wall_s();
        for (int r = 0; r < rounds; r++)
            for (size_t p = 0; p < mvm_vocab_corpus_n; p++) {
                const char *text = mvm_vocab_corpus[p];
                if (mvm_tokenizer_encode(t, text, strlen(text), 0, ids, cap, &n) != MVM_OK)
                    return 1;
                tokens += n;
            }
        double t1 = mvm_bench_wall_s();
        for (int r = 0; r < rounds && t->model == TOK_MODEL_BPE; r++)
            for (size_t p = 0; p < mvm_vocab_corpus_n; p++) {
                const char *text = mvm_vocab_corpus[p];
                if (tok_pretok_split(t->pre, (const uint8_t *)text, strlen(text), &pieces))
                    return 1;
            }
        double t2 = mvm_bench_wall_s(), mb = (double)bytes * rounds / 1e6;
        printf("%-13s %10zu %12.1f", styles[s].name, tokens / (size_t)rounds, mb / (t1 - t0));
        if (t->model == TOK_MODEL_BPE)
            printf(" %14.1f\n", mb / (t2 - t1));
        else
            printf(" %14s\n", "-");
        tok_pieces_free(&pieces);
        mvm_tokenizer_free(t);
    }
    free(ids);
    return 0;
}
