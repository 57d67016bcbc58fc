/*
 * libFuzzer target for the whole path from bytes to a loaded model: the GGUF reader, the
 * hyper-parameters, the tensors bound and the experts copied into an expert space (host
 * backend), the tokenizer built from the metadata and run on a few strings. Whatever the
 * bytes, the load succeeds or fails with one line that names the file; a broken promise
 * traps. tests/fuzz/load_corpus.c replays a corpus through it in `make test` (every build,
 * under the sanitizers of each); a libFuzzer build links it as it is.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/compute/pool.h"
#include "engine/model/model.h"
#include "engine/plan/plan.h"
#include "engine/tokenizer/tokenizer.h"
#include "moevm/moevm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

unsigned long fuzz_load_opened, fuzz_load_refused; /* for the replay's summary */

static void require(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_load: %s (error: %s)\n", what, mvm_last_error());
        __builtin_trap();
    }
}

/* Encodes and decodes a few texts: the vocabulary came from the file. */
static void use_tokenizer(const mvm_tokenizer *t)
{
    static const char *texts[] = {"Hello, world! 123", " <|im_end|>\n\n\xe4\xb8\xad caf\xc3\xa9",
                                  "\xff\xfe broken utf-8 \xc3"};
    int32_t ids[256];
    char piece[64];
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        size_t n = 0;
        mvm_status st = mvm_tokenizer_encode(t, texts[i], strlen(texts[i]), 1, ids, 256, &n);
        require(st == MVM_OK || st == MVM_ERR_RANGE || st == MVM_ERR_NOMEM, "encode failed");
        for (size_t k = 0; st == MVM_OK && k < n; k++) {
            require(ids[k] >= 0 && (uint32_t)ids[k] < mvm_tokenizer_n_vocab(t),
                    "encode gave an id out of the vocabulary");
            mvm_tokenizer_piece(t, ids[k], piece, sizeof piece);
            mvm_tokenizer_is_eog(t, ids[k]);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    static mvm_pool *pool;
    if (fd < 0) {
        fd = memfd_create("fuzz_load.gguf", 0);
        require(fd >= 0, "memfd_create failed");
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        require(mvm_pool_create(1, NULL, &pool) == MVM_OK, "no thread pool");
    }
    require(ftruncate(fd, 0) == 0 && pwrite(fd, data, size, 0) == (ssize_t)size,
            "cannot write the input to its memfd");
    mvm_space_desc d;
    mvm_space_desc_init(&d);
    d.backend = MVM_BACKEND_HOST;
    d.page_size = 4096;
    d.device_budget = 16 * 4096; /* some experts resident, most at home */
    mvm_model *m = NULL;
    mvm_status st = mvm_model_load(path, &(mvm_load_args){.desc = &d, .pool = pool}, &m);
    if (st != MVM_OK) {
        const char *e = mvm_last_error();
        require(m == NULL, "a failed load returned a model");
        require(strstr(e, path) != NULL, "the error does not name the file");
        require(strchr(e, '\n') == NULL, "the error is more than one line");
        fuzz_load_refused++;
        return 0;
    }
    mvm_tokenizer *t = NULL;
    if (mvm_tokenizer_load(m->gguf, &t) == MVM_OK) {
        use_tokenizer(t);
        mvm_tokenizer_free(t);
    }
    mvm_model_free(m);
    fuzz_load_opened++;
    return 0;
}
