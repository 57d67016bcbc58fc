/*
 * The loader's fuzz corpus, replayed through tests/fuzz/fuzz_load.c in `make test`:
 *
 *   load_corpus DIR [MUTANTS]
 *
 * writes the seed corpus into DIR — a tiny model of every architecture (f32, and q8_0 and
 * q4_K for two of them, whose experts are converted as they load), and the crafted cases the
 * loader once got wrong: block_count 2^32-1, a vocab_size that disagrees with token_embd,
 * general.alignment 1 with the tensors off a 4-byte boundary, files cut at the header, in
 * the metadata, at the data and one byte short — then feeds every file to the target, and
 * after them MUTANTS (default 100) seeded mutants of each model: a few metadata bytes
 * overwritten with boundary or random values, or the file cut short. The target traps on
 * a crash-free but broken outcome (a load that fails without one line naming the file);
 * the sanitizer builds catch the rest. The same inputs every run. The corpus doubles as
 * the seed corpus of a libFuzzer run of the target.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "engine/compute/pool.h"
#include "engine/synth/mkmodel.h"
#include "gguf_mutant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern unsigned long fuzz_load_opened, fuzz_load_refused;

static char dir[512];

static const char *in_dir(const char *name)
{
    static char path[8][640];
    static int next;
    char *p = path[next++ % 8];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    return p;
}

static uint8_t *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b = NULL;
    if (f && fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        rewind(f);
        if (n >= 0 && (b = malloc((size_t)n + 1)) && fread(b, 1, (size_t)n, f) != (size_t)n) {
            free(b);
            b = NULL;
        }
        *size = (size_t)n;
    }
    if (f)
        fclose(f);
    CHECK(b != NULL);
    return b;
}

static void write_bytes(const char *path, const uint8_t *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, n, f) == n && fclose(f) == 0);
}

/* Where the tensor data start in a seed: the mutants damage only what precedes it. */
static size_t metadata_bytes(const char *path)
{
    mvm_gguf *g;
    if (mvm_gguf_open(path, &g) != MVM_OK)
        return 0;
    size_t n = (size_t)mvm_gguf_data_offset(g);
    mvm_gguf_close(g);
    return n;
}

static const char *const arches[] = {"llama",     "qwen2moe", "qwen3moe",   "olmoe",
                                     "deepseek2", "glm4moe",  "minimax-m2", "gpt-oss"};
enum { N_ARCHES = sizeof arches / sizeof *arches };

static void write_corpus(mvm_pool *pool)
{
    char name[96];
    for (int a = 0; a < N_ARCHES; a++) {
        static const struct { enum mvm_wtype type; const char *tag; } types[] = {
            {MVM_W_F32, "f32"}, {MVM_W_Q8_0, "q8_0"}, {MVM_W_Q4_K, "q4_K"}};
        for (int t = 0; t < (a < 2 ? 3 : 1); t++) {
            mvm_model_spec s = mvm_preset_find("tiny", arches[a])->spec;
            s.type = types[t].type;
            s.seed = 7;
            snprintf(name, sizeof name, "model-%s-%s.gguf", arches[a], types[t].tag);
            CHECK_ST(mvm_mkmodel_write(&s, in_dir(name), pool, NULL, NULL), MVM_OK);
        }
    }
    const char *llama = in_dir("model-llama-f32.gguf"), *olmoe = in_dir("model-olmoe-f32.gguf");
    write_mutant(llama, in_dir("crafted-block-count.gguf"),
                 &(struct mutation){.key = "llama.block_count", .key_u32 = UINT32_MAX});
    write_mutant(olmoe, in_dir("crafted-vocab-size.gguf"),
                 &(struct mutation){.key = "olmoe.vocab_size", .key_u32 = 7});
    static const char *const pads[] = {"", "a", "ab", "abc"};
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "crafted-alignment-1-pad-%d.gguf", i);
        write_mutant(llama, in_dir(name), &(struct mutation){.key = "general.alignment",
                                                            .key_u32 = 1, .pad = pads[i]});
    }
    size_t size = 0, meta = metadata_bytes(llama);
    uint8_t *b = read_all(llama, &size);
    const size_t cuts[] = {0, 3, 24, meta / 2, meta, size - 1};
    for (size_t i = 0; b && i < sizeof cuts / sizeof *cuts; i++) {
        snprintf(name, sizeof name, "crafted-cut-at-%zu.gguf", cuts[i]);
        write_bytes(in_dir(name), b, cuts[i]);
    }
    free(b);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Feeds `b` to the target, then `mutants` damaged copies of it; whether `b` itself loaded. */
static bool replay(const uint8_t *b, size_t size, size_t meta, int mutants, uint64_t *x)
{
    static const uint8_t edge[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    unsigned long refused = fuzz_load_refused;
    LLVMFuzzerTestOneInput(b, size);
    bool loaded = fuzz_load_refused == refused;
    uint8_t *mut = malloc(size + 1);
    for (int i = 0; mut && meta && i < mutants; i++) {
        memcpy(mut, b, size);
        size_t len = size;
        if (xorshift(x) % 8 == 0) {
            len = (size_t)(xorshift(x) % size);
        } else {
            for (uint64_t k = 1 + xorshift(x) % 4; k > 0; k--) {
                size_t at = (size_t)(xorshift(x) % meta);
                uint64_t r = xorshift(x);
                mut[at] = r % 2 ? edge[(r >> 8) % sizeof edge] : (uint8_t)(r >> 16);
            }
        }
        LLVMFuzzerTestOneInput(mut, len);
    }
    free(mut);
    return loaded;
}

/* The corpus of an earlier build goes first: its crafted cuts were at that build's model
 * sizes, which change when the models do (a chat template added), and would count twice. */
static void clear_corpus(void)
{
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, "crafted-", 8) || !strncmp(e->d_name, "model-", 6)) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%.255s", dir, e->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: load_corpus DIR [MUTANTS]\n");
        return 2;
    }
    int mutants = argc > 2 ? atoi(argv[2]) : 100;
    snprintf(dir, sizeof dir, "%s", argv[1]);
    mkdir(dir, 0777);
    clear_corpus();
    mvm_pool *pool = NULL;
    CHECK_ST(mvm_pool_create(1, NULL, &pool), MVM_OK);
    write_corpus(pool);
    mvm_pool_destroy(pool);

    DIR *d = opendir(dir);
    CHECK(d != NULL);
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.' && (names = realloc(names, (n + 1) * sizeof *names)))
            names[n++] = strdup(e->d_name);
    if (d)
        closedir(d);
    qsort(names, n, sizeof *names, by_name);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    unsigned long seeds = 0, crafted = 0, crafted_refused = 0;
    for (size_t i = 0; i < n; i++) {
        const char *path = in_dir(names[i]);
        size_t size = 0;
        uint8_t *b = read_all(path, &size);
        bool model = strncmp(names[i], "model-", 6) == 0;
        bool loaded =
            b && replay(b, size, model ? metadata_bytes(path) : 0, model ? mutants : 0, &x);
        if (model && !loaded) /* every model of the corpus loads */
            fprintf(stderr, "load_corpus: %s does not load\n", names[i]);
        CHECK(loaded || !model);
        if (strncmp(names[i], "crafted-", 8) == 0)
            crafted++, crafted_refused += !loaded;
        seeds++;
        free(b);
        free(names[i]);
    }
    free(names);
    /* The crafted cases are all refused, but the alignment pad that happens to put the
     * tensors on a 4-byte boundary. */
    CHECK(seeds == 24 && crafted == 12 && crafted_refused == 11);
    fprintf(stderr, "load_corpus: %lu seeds and their mutants: %lu loaded, %lu refused\n", seeds,
            fuzz_load_opened, fuzz_load_refused);
    TEST_END();
}
