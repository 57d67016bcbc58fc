/*
 * The KV cache's layout (kv_cache.h): a ring of twice-written rows for the windowed blocks
 * where that is smaller than n_ctx rows, n_ctx rows for the others.
 */
#include "engine/forward/kv_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "vmm/error.h"

mvm_status mvm_kv_layout_make(const mvm_model *m, uint32_t n_ctx, uint32_t n_batch,
                              enum mvm_wtype type, mvm_kv_layout *out)
{
    const mvm_hparams *hp = &m->hp;
    const uint32_t n_blocks = hp->n_dense + hp->n_layer;
    *out = (mvm_kv_layout){.type = type, .n_blocks = n_blocks, .n_seq = 1};
    enum mvm_wtype known;
    mvm_status st = mvm_kv_type_parse(mvm_k_wtype_name(type), &known);
    if (st != MVM_OK)
        return st;
    /* a type the attention converts as it reads (BF16, the block types): a head's part of a
     * row (MLA's one head: the latent row) at most the kernels' buffer, and whole blocks */
    const uint32_t head = hp->kv_lora ? hp->kv_lora + hp->rope.n_rot : hp->head_dim;
    if (mvm_k_block_elems(type) > 1 && (head % MVM_QBLOCK || head > MVM_K_ATTN_ROW_MAX))
        return mvm_fail(MVM_ERR_INVALID, "a %s KV cache needs heads of whole blocks of %d "
                        "elements, at most %d; this model's are %u: use f16",
                        mvm_k_wtype_name(type), MVM_QBLOCK, MVM_K_ATTN_ROW_MAX, head);
    if (type == MVM_W_BF16 && head > MVM_K_ATTN_ROW_MAX)
        return mvm_fail(MVM_ERR_INVALID, "a bf16 KV cache needs heads of at most %d elements; "
                        "this model's are %u: use f16", MVM_K_ATTN_ROW_MAX, head);
    out->all = out->blocks = calloc(n_blocks ? n_blocks : 1, sizeof *out->blocks);
    if (!out->all)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the KV cache's layout");
    for (uint32_t b = 0; b < n_blocks; b++) {
        const mvm_layer *L = b < hp->n_dense ? &m->dense[b] : &m->layers[b - hp->n_dense];
        const uint64_t ring = L->swa ? (uint64_t)L->swa + n_batch : 0;
        out->blocks[b].row0 = out->rows;
        out->blocks[b].ring = ring && 2 * ring < n_ctx ? (uint32_t)ring : 0;
        out->rows += out->blocks[b].ring ? 2 * ring : n_ctx;
    }
    /* MLA keeps one latent row per position, [kv_lora, rope]; the others keys and values */
    const uint64_t row = hp->kv_lora ? (uint64_t)hp->kv_lora + hp->rope.n_rot
                                     : 2 * (uint64_t)hp->n_head_kv * hp->head_dim;
    out->bytes = out->rows * mvm_kv_bytes(out, row);
    return MVM_OK;
}

mvm_status mvm_kv_type_parse(const char *name, enum mvm_wtype *out)
{
    static const char *const names[MVM_KV_N_TYPES] = MVM_KV_TYPES;
    for (int i = 0; i < MVM_KV_N_TYPES; i++)
        for (int t = 0; !strcmp(name, names[i]) && t < MVM_W_COUNT; t++)
            if (!strcmp(name, mvm_k_wtype_name((enum mvm_wtype)t))) {
                *out = (enum mvm_wtype)t;
                return MVM_OK;
            }
    char list[128] = "";
    for (int i = 0; i < MVM_KV_N_TYPES; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", names[i],
                 i + 2 < MVM_KV_N_TYPES ? ", " : i + 1 < MVM_KV_N_TYPES ? " or " : "");
    return mvm_fail(MVM_ERR_INVALID, "KV cache type '%s': use %s", name, list);
}

mvm_status mvm_kv_layout_seqs(mvm_kv_layout *l, uint32_t n_seq)
{
    if (n_seq == 0)
        return mvm_fail(MVM_ERR_INVALID, "a KV cache of 0 sequences");
    const uint64_t rows = l->rows / l->n_seq, bytes = l->bytes / l->n_seq;
    mvm_kv_block *all = calloc((size_t)n_seq * (l->n_blocks ? l->n_blocks : 1), sizeof *all);
    if (!all)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the KV cache's layout of %u "
                        "sequences", n_seq);
    for (uint32_t s = 0; s < n_seq; s++)
        for (uint32_t b = 0; b < l->n_blocks; b++)
            all[(size_t)s * l->n_blocks + b] = (mvm_kv_block){l->all[b].row0 + s * rows,
                                                              l->all[b].ring};
    free(l->all);
    l->all = l->blocks = all;
    l->n_seq = n_seq;
    l->rows = rows * n_seq;
    l->bytes = bytes * n_seq;
    return MVM_OK;
}

void mvm_kv_layout_free(mvm_kv_layout *l)
{
    free(l->all);
    l->all = l->blocks = NULL;
}

uint32_t mvm_kv_runs(const mvm_kv_block *b, uint32_t pos0, uint32_t n,
                     mvm_kv_run runs[MVM_KV_MAX_RUNS])
{
    if (!b->ring) {
        runs[0] = (mvm_kv_run){b->row0 + pos0, 0, n};
        return 1;
    }
    /* n <= n_batch < R: the batch wraps at most once */
    const uint32_t s = pos0 % b->ring, before = n < b->ring - s ? n : b->ring - s;
    uint32_t k = 0;
    for (uint32_t copy = 0; copy < 2; copy++) {
        const uint64_t base = b->row0 + (uint64_t)copy * b->ring;
        runs[k++] = (mvm_kv_run){base + s, 0, before};
        if (before < n)
            runs[k++] = (mvm_kv_run){base, before, n - before};
    }
    return k;
}
