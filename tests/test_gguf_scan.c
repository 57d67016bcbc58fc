/*
 * interpose/gguf_scan.c, the interposer's scan of a GGUF file for its fused expert tensors,
 * against the engine's full reader (engine/gguf/gguf.c) as the reference: files written by
 * the engine's writer with random shapes, types, alignments, key sets (string arrays like a
 * vocabulary included) and tensor orders must give exactly the fused tensors the reader
 * finds, at the same file offsets, with their room up to the next tensor. Then every
 * truncation and a few thousand random corruptions of one file: the scan returns an
 * error with a reason or a table, never reads out of bounds (the sanitizer builds check).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_write.h"
#include "interpose/gguf_scan.h"

static int failures;
#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                   \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fputc('\n', stderr);                                                              \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

static uint32_t rng_state = 2463534242u;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 17, rng_state ^= rng_state << 5;
    return rng_state % n;
}

/* A random model-like file at `path`: some keys, then tensors of random kinds. */
static void write_random(const char *path, int round)
{
    static const char *const kinds[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
                                        "ffn_gate_up_exps", "attn_q", "ffn_gate_inp",
                                        "conv_exps"};
    mvm_gguf_writer *w = NULL;
    CHECK(mvm_gguf_writer_new(&w) == MVM_OK, "writer");
    mvm_gguf_writer_set_str(w, "general.architecture", "qwen3moe");
    if (round % 3)
        mvm_gguf_writer_set_u32(w, "general.alignment", 32u << rnd(6));
    const char *vocab[] = {"a", "bb", "", "dddd"};
    mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", vocab, 4);
    mvm_gguf_writer_set_u32(w, "qwen3moe.expert_count", 8);
    /* The experts a token routes to: a u32 the scan reads, a string it must ignore, or none;
     * and a key name longer than the scan keeps, ending the same way. */
    if (round % 4 == 1)
        mvm_gguf_writer_set_u32(w, "qwen3moe.expert_used_count", 1 + rnd(8));
    else if (round % 4 == 2)
        mvm_gguf_writer_set_str(w, "qwen3moe.expert_used_count", "eight");
    if (round % 5 == 0)
        mvm_gguf_writer_set_u32(w, "an.architecture.name.far.longer.than.sixty.four.bytes.of.key"
                                   ".expert_used_count", 99);
    int n = 1 + (int)rnd(12);
    void *data[16];
    for (int i = 0; i < n; i++) {
        char name[64];
        const char *kind = kinds[rnd(7)];
        snprintf(name, sizeof name, "blk.%d.%s.weight", i, kind);
        bool q8 = rnd(2);
        uint64_t ne[3] = {32u * (1 + rnd(4)), 1 + rnd(5), 2 + rnd(9)};
        uint32_t dims = strcmp(kind, "conv_exps") == 0 ? 2 : strstr(kind, "_exps") ? 3 : 2;
        uint64_t bytes = 0;
        mvm_ggml_row_bytes(q8 ? MVM_GGML_Q8_0 : MVM_GGML_F32, ne[0], &bytes);
        bytes *= ne[1] * (dims == 3 ? ne[2] : 1);
        data[i] = calloc(1, bytes);
        CHECK(mvm_gguf_writer_add_tensor(w, name, q8 ? MVM_GGML_Q8_0 : MVM_GGML_F32, dims, ne,
                                         data[i], bytes) == MVM_OK,
              "tensor %s", name);
    }
    CHECK(mvm_gguf_writer_write(w, path) == MVM_OK, "write %s", path);
    mvm_gguf_writer_free(w);
    for (int i = 0; i < n; i++)
        free(data[i]);
}

/* The scan against the reader on one file. */
static void compare(const char *path)
{
    mvm_gguf *g = NULL;
    CHECK(mvm_gguf_open(path, &g) == MVM_OK, "open %s", path);
    if (!g)
        return;
    mvm_gguf_fused *f = NULL;
    uint32_t n = 0;
    char err[160] = "";
    CHECK(mvm_gguf_scan_fused(path, &f, &n, err, sizeof err) == 0, "scan: %s", err);
    FILE *fp = fopen(path, "rb");
    fseek(fp, 0, SEEK_END);
    uint64_t size = (uint64_t)ftell(fp), base = mvm_gguf_data_offset(g);
    fclose(fp);
    uint32_t want = 0, used = 0;
    if (mvm_gguf_find_key(g, "qwen3moe.expert_used_count") >= 0 &&
        mvm_gguf_get_u32(g, "qwen3moe.expert_used_count", &used) != MVM_OK)
        used = 0; /* not a number: the scan ignores it */
    for (uint64_t i = 0; i < mvm_gguf_n_tensors(g); i++) {
        const mvm_gguf_tensor *t = mvm_gguf_tensor_at(g, i);
        if (t->n_dims != 3 || !strstr(t->name, "_exps"))
            continue;
        uint64_t at = base + t->offset, next = size;
        for (uint64_t j = 0; j < mvm_gguf_n_tensors(g); j++) {
            uint64_t o = base + mvm_gguf_tensor_at(g, j)->offset;
            if (o > at && o < next)
                next = o;
        }
        bool found = false;
        for (uint32_t k = 0; k < n; k++)
            if (f[k].offset == at) {
                found = true;
                CHECK(f[k].experts == t->ne[2] && f[k].room == next - at &&
                          f[k].room >= t->nbytes && f[k].used == used,
                      "%s: %u experts (%u used), room %llu (want %u used, %llu, %llu bytes)",
                      t->name, f[k].experts, f[k].used, (unsigned long long)f[k].room, used,
                      (unsigned long long)(next - at), (unsigned long long)t->nbytes);
            }
        CHECK(found, "%s at %llu not found", t->name, (unsigned long long)at);
        want++;
    }
    CHECK(n == want, "%u fused tensors, the reader has %u", n, want);
    for (uint32_t k = 1; k < n; k++)
        CHECK(f[k - 1].offset < f[k].offset, "sorted by offset");
    free(f);
    mvm_gguf_close(g);
}

/* Writes bytes[0, n) to `scratch` and scans it: a table whose tensors lie inside those n
 * bytes, or an error with a reason and no table. */
static void scan_bytes(const char *scratch, const unsigned char *bytes, size_t n,
                       const char *what, long which)
{
    FILE *o = fopen(scratch, "wb");
    fwrite(bytes, 1, n, o);
    fclose(o);
    mvm_gguf_fused *f = NULL;
    uint32_t k = 0;
    char err[160] = "";
    int rc = mvm_gguf_scan_fused(scratch, &f, &k, err, sizeof err);
    CHECK(rc == 0 || (err[0] && !f && k == 0), "%s %ld: no reason", what, which);
    for (uint32_t i = 0; rc == 0 && i < k; i++)
        CHECK(f[i].offset + f[i].room <= n && f[i].experts >= 2,
              "%s %ld: a tensor outside the file", what, which);
    free(f);
}

/* Every truncation of the header, and random byte changes in it, of the file at `path`. */
static void corrupt(const char *path, const char *scratch)
{
    FILE *fp = fopen(path, "rb");
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *bytes = malloc((size_t)size), *copy = malloc((size_t)size);
    CHECK(fread(bytes, 1, (size_t)size, fp) == (size_t)size, "read");
    fclose(fp);
    long header = size < 4096 ? size : 4096; /* the scan never reads past the infos */
    for (long cut = 0; cut < header; cut++)
        scan_bytes(scratch, bytes, (size_t)cut, "cut at", cut);
    /* The same cuts with the last byte left made large: a value read short must count for
     * nothing (a dimension count of 0xff.. half read once indexed past the dimensions). */
    for (long cut = 1; cut < header; cut++) {
        memcpy(copy, bytes, (size_t)cut);
        copy[cut - 1] = 0xff;
        scan_bytes(scratch, copy, (size_t)cut, "cut, last byte 0xff, at", cut);
    }
    for (long round = 0; round < 3000; round++) {
        memcpy(copy, bytes, (size_t)size);
        for (int k = 0, m = 1 + (int)rnd(4); k < m; k++)
            copy[rnd((uint32_t)header)] = (unsigned char)rnd(256);
        scan_bytes(scratch, copy, (size_t)size, "corruption", round);
    }
    free(bytes);
    free(copy);
}

int main(void)
{
    char dir[] = "/tmp/test_gguf_scan_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char path[128], scratch[128];
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    snprintf(scratch, sizeof scratch, "%s/bad.gguf", dir);
    for (int round = 0; round < 60; round++) {
        write_random(path, round);
        compare(path);
    }
    corrupt(path, scratch);
    char err[160] = "";
    mvm_gguf_fused *f = NULL;
    uint32_t n = 0;
    CHECK(mvm_gguf_scan_fused(dir, &f, &n, err, sizeof err) != 0 &&
              strstr(err, "not a regular file"),
          "a folder: %s", err);
    CHECK(mvm_gguf_scan_fused("/dev/null", &f, &n, err, sizeof err) != 0 &&
              strstr(err, "not a regular file"),
          "a device: %s", err);
    CHECK(mvm_gguf_scan_fused("/nonexistent.gguf", &f, &n, err, sizeof err) != 0 &&
              strstr(err, "cannot open"),
          "a missing file: %s", err);
    unlink(path);
    unlink(scratch);
    rmdir(dir);
    if (failures)
        return 1;
    printf("ok gguf_scan\n");
    return 0;
}
