/*
 * The KV cache's layout, shared by both backends: which rows of the cache hold each block's
 * positions (a row: kv_dim floats of keys, and as many of values, or MLA's latent row).
 *
 * A block that attends over every position keeps n_ctx rows, position p in row p. A block
 * with a window of w positions (gpt-oss's even blocks) only ever reads the last w positions
 * before its queries, so it keeps a ring of R = w + n_batch rows (a batch writes up to
 * n_batch positions while its first query still reads w - 1 older ones). Each position is
 * written twice, to row p % R and to row p % R + R, so that the positions of any window,
 * first .. first + w - 1, are consecutive rows from first % R: the attention (both backends'
 * kernels) reads them as it reads a full cache and never sees the wrap. That takes 2R rows,
 * so a block uses a ring only where 2R < n_ctx. gpt-oss-120b at 131072 positions: 18 of its
 * 36 blocks in 2 x (128 + 32) rows instead of 131072, half its 18 GiB cache (f32 K and V).
 *
 * The rows hold F16 (the default, as llama.cpp's cache: half the bytes, and half the reads
 * of a long context's attention), F32, or any other type llama.cpp's `-ctk`/`-ctv` take
 * (MOEVM_KV_TYPE, `moevm run --kv-type`; MVM_KV_TYPES). Keys, values and latents are
 * computed in F32 and rounded to nearest even as they are stored (F16, BF16), or quantized
 * by blocks of 32 as the weights of that type are (kernels/cpu/convert.c): Q8_0 34 bytes a
 * block, 53% of F16's, for a rounding error of about 0.4% of each block's largest element;
 * Q4_0 18 bytes (28%) for about 6%. A block type's heads must be whole blocks, so that each
 * head's part of a row starts a block: head_dim (MLA: the latent row, kv_lora + the rotary
 * part) a multiple of 32 (and at most the kernels' MVM_K_ATTN_ROW_MAX), as in every
 * released model; another is refused. Only the CPU backend reads types other than F16 and
 * F32 today.
 */
#ifndef MVM_ENGINE_FORWARD_KV_CACHE_H
#define MVM_ENGINE_FORWARD_KV_CACHE_H

#include <stdint.h>

#include "engine/model/model.h"
#include "kernels/blocks.h"

typedef struct mvm_kv_block {
    uint64_t row0;              /* the block's first row in the cache */
    uint32_t ring;              /* R, or 0: n_ctx rows, position p in row row0 + p */
} mvm_kv_block;

typedef struct mvm_kv_layout {
    mvm_kv_block *blocks;       /* [n_dense + n_layer]: the dense blocks, then the MoE ones,
                                   of the sequence selected (mvm_kv_layout_select) */
    mvm_kv_block *all;          /* [n_seq][n_blocks]: every sequence's; the allocation */
    uint32_t n_blocks, n_seq;
    uint64_t rows;              /* all blocks' of all sequences: what the backend allocates */
    uint64_t bytes;             /* of the cache: rows of keys and values (MLA: latent rows) */
    enum mvm_wtype type;        /* of its elements: one of MVM_KV_TYPES */
} mvm_kv_layout;

/* The cache's element types by the names llama.cpp's -ctk/-ctv take, MOEVM_KV_TYPE's
 * choices in this order (engine_options.c spells them out). */
#define MVM_KV_TYPES {"f16", "f32", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"}
#define MVM_KV_N_TYPES 9

/* The type named `name` (one of MVM_KV_TYPES); MVM_ERR_INVALID naming the choices for
 * another. */
mvm_status mvm_kv_type_parse(const char *name, enum mvm_wtype *out);

/* Bytes of n elements of the cache (n a multiple of 32 for a block type: a row, a head's
 * part, or whole rows, as the layout guarantees). */
static inline uint64_t mvm_kv_bytes(const mvm_kv_layout *l, uint64_t n)
{
    return mvm_k_row_bytes(l->type, n);
}

/* The layout of a context of n_ctx positions evaluated n_batch at a time, its elements of
 * type `type` (one of MVM_KV_TYPES; MVM_ERR_INVALID for another, or for a block type where
 * the model's heads are not whole blocks of 32). */
mvm_status mvm_kv_layout_make(const mvm_model *m, uint32_t n_ctx, uint32_t n_batch,
                              enum mvm_wtype type, mvm_kv_layout *out);
/* Makes room for n_seq independent sequences (a server's requests): each gets rows of its
 * own, after the previous one's, so the backends read and write whichever is selected
 * through `blocks` without knowing there are several. Sequence 0 is selected.
 * MVM_ERR_NOMEM, MVM_ERR_INVALID for n_seq 0. */
mvm_status mvm_kv_layout_seqs(mvm_kv_layout *l, uint32_t n_seq);
/* Points `blocks` at sequence s's rows (s < n_seq). */
static inline void mvm_kv_layout_select(mvm_kv_layout *l, uint32_t s)
{
    l->blocks = l->all + (size_t)s * l->n_blocks;
}
void mvm_kv_layout_free(mvm_kv_layout *l);

/* Block blk's rows of sequence s's cache (whichever is selected): for a backend that takes
 * the tokens of several sequences in one batch. */
static inline const mvm_kv_block *mvm_kv_seq_block(const mvm_kv_layout *l, uint32_t s,
                                                   uint32_t blk)
{
    return &l->all[(size_t)s * l->n_blocks + blk];
}

/* The row of position p, the first of its window's consecutive rows when it starts one. */
static inline uint64_t mvm_kv_row(const mvm_kv_block *b, uint32_t p)
{
    return b->row0 + (b->ring ? p % b->ring : p);
}

/* Where positions pos0 .. pos0 + n - 1 (n <= n_batch) are written: runs of n_rows
 * consecutive rows from `row` taking the batch's tokens i0 .. i0 + n_rows - 1. One run for a
 * full block; for a ring, the batch's part before the wrap and after it, each twice. */
typedef struct mvm_kv_run {
    uint64_t row;
    uint32_t i0, n_rows;
} mvm_kv_run;
#define MVM_KV_MAX_RUNS 4

/* Fills runs, returns how many. */
uint32_t mvm_kv_runs(const mvm_kv_block *b, uint32_t pos0, uint32_t n,
                     mvm_kv_run runs[MVM_KV_MAX_RUNS]);

#endif
