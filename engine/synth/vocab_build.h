/*
 * A real vocabulary for `moevm mkmodel`, trained here because nothing can be downloaded:
 * deterministic BPE on a built-in English corpus (vocab_corpus.c: about 55 KiB of public-
 * domain prose, verse and a few numbers). Words come from the pre-tokenizer the vocabulary
 * names (GPT-2's for MVM_VOCAB_LLAMA), matching how it will be tokenized; the most frequent
 * adjacent pair is merged (ties: lowest symbol ids) until MVM_VOCAB_MAX_LEARNED tokens are
 * learned, the vocabulary is full, or no pair occurs twice.
 *
 * The corpus yields a few thousand tokens, while real shapes need 32000 (Mixtral),
 * 151936 (Qwen2-MoE) or 50304 (OLMoE) rows: the rest of the vocabulary is words, word
 * pieces and pairs of words built from the corpus (vocab_fill.h), NORMAL tokens that
 * print, which no merge makes (SentencePiece: scored below the others), so that a random-
 * weight model's reply is text rather than the nothing padding tokens decode to.
 *
 * Styles, each loading and tokenizing the same way in llama.cpp (see tokenizer.h):
 *  - MVM_VOCAB_LLAMA, SentencePiece-style (model "llama"): <unk> = 0 (UNKNOWN), <s> = 1 and
 *    </s> = 2 (CONTROL), the byte tokens <0x00>..<0xFF> (BYTE), the learned pieces with "▁"
 *    for a leading space and score -rank (NORMAL), then the characters of the corpus, "▁"
 *    first, then by frequency (NORMAL): like SentencePiece it keeps every character, and
 *    learned pieces get the room they leave; then [INST] and [/INST] (CONTROL, as Mistral's
 *    v3 tokenizers have them), which Mixtral's chat template writes. add_bos_token true.
 *  - MVM_VOCAB_QWEN2, byte-level BPE (model "gpt2", pre "qwen2"): the 256 byte symbols in
 *    GPT-2's order, the learned tokens, then <|endoftext|>, <|im_start|>, <|im_end|>
 *    (CONTROL). EOS, BOS and padding are <|endoftext|>, as in Qwen's base-model GGUFs, and
 *    no BOS is added (add_bos_token false); <|im_end|> also ends generation.
 *  - MVM_VOCAB_OLMO, byte-level BPE (model "gpt2", pre "olmo"): bytes, learned tokens, then
 *    <|endoftext|> (EOS and BOS, not added, as OLMoE), <|padding|> (padding) and the Tülu
 *    chat format's <|system|>, <|user|>, <|assistant|>.
 *  - MVM_VOCAB_DEEPSEEK and MVM_VOCAB_DEEPSEEK3, byte-level BPE (model "gpt2", pre
 *    "deepseek-llm" as DeepSeek-V2's files, or "deepseek-v3"): bytes, learned tokens, then
 *    <｜begin▁of▁sentence｜> (BOS, added), <｜end▁of▁sentence｜> (EOS and padding), then
 *    DeepSeek-V3's chat delimiters: <｜User｜>, <｜Assistant｜> and the tool calls' and
 *    outputs' begin/end/separator tokens.
 *  - MVM_VOCAB_KIMI, byte-level BPE (model "gpt2", pre "kimi-k2", as Kimi K2's files are
 *    converted from its tiktoken ranks): bytes, learned tokens, then [BOS] (BOS, not added,
 *    llama.cpp's default for kimi-k2), [EOS] (EOS and padding), <|im_end|>, and DeepSeek-V3's
 *    <｜end▁of▁sentence｜> (end of turn) and chat delimiters: the chat template every
 *    deepseek2 model carries writes them.
 *  - MVM_VOCAB_GLM4, byte-level BPE (model "gpt2", pre "glm4", as GLM-4.5's files): bytes,
 *    learned tokens, then <|endoftext|> (EOS and padding), [gMASK] (BOS, not added: GLM's
 *    chat template writes "[gMASK]<sop>" itself, and llama.cpp adds none for glm4), <sop>,
 *    and the roles <|system|>, <|user|> (end of turn), <|assistant|> and <|observation|>
 *    (end of message: a tool call's turn), as GLM-4.5's converted files mark them.
 *  - MVM_VOCAB_MINIMAX, byte-level BPE (model "gpt2", pre "minimax-m2", tiktoken's o200k
 *    regex, as MiniMax-M2's files): bytes, learned tokens, then ]~!b[ (BOS, not added:
 *    MiniMax-M2's chat template writes it first itself), [e~[ (EOS and padding), ]!d~[
 *    (its unknown-token text, unused by byte-level BPE) and ]~b] (a turn's start).
 *  - MVM_VOCAB_GPTOSS, byte-level BPE (model "gpt2", pre "gpt-4o", o200k_harmony's regex, as
 *    gpt-oss's files): bytes, learned tokens, then <|startoftext|> (BOS, not added: the
 *    harmony chat format starts with <|start|>), <|endoftext|> (padding), <|return|>
 *    (EOS, where a harmony reply ends), and the harmony format's <|start|>, <|message|>,
 *    <|end|> (a message's end, not the reply's), <|channel|> and <|call|> (a tool call's end).
 * Every style ends with the fill.
 */
#ifndef MVM_ENGINE_SYNTH_VOCAB_BUILD_H
#define MVM_ENGINE_SYNTH_VOCAB_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf/gguf_write.h"
#include "moevm/moevm.h"

enum mvm_vocab_style {
    MVM_VOCAB_LLAMA,
    MVM_VOCAB_QWEN2,
    MVM_VOCAB_OLMO,
    MVM_VOCAB_DEEPSEEK,
    MVM_VOCAB_DEEPSEEK3,
    MVM_VOCAB_KIMI,
    MVM_VOCAB_GLM4,
    MVM_VOCAB_MINIMAX,
    MVM_VOCAB_GPTOSS,
};

#define MVM_VOCAB_MAX_LEARNED 8000

typedef struct mvm_vocab {
    const char *model;       /* tokenizer.ggml.model */
    const char *pre;         /* tokenizer.ggml.pre */
    uint32_t n_tokens;
    const char **tokens;     /* NUL-terminated texts */
    float *scores;           /* NULL for the byte-level styles, which have none */
    int32_t *types;          /* enum mvm_token_type */
    uint32_t n_merges;
    const char **merges;     /* "left right"; NULL for MVM_VOCAB_LLAMA */
    int32_t bos, eos, unk, pad; /* -1: none */
    int32_t eot, eom;        /* end of turn and of message where not the EOS, -1: none */
    int add_bos;
    uint32_t n_learned;      /* tokens learned from the corpus */
    struct mvm_vocab_store *store;
} mvm_vocab;

/* Builds a vocabulary of exactly n_vocab tokens. MVM_ERR_INVALID when n_vocab cannot hold
 * the byte and special tokens (262 for LLAMA, counting "▁"; 256 and the style's specials
 * for the others: 259 for QWEN2, 260 MINIMAX, 261 OLMO, 263 GLM4, 264 GPTOSS, 269 DEEPSEEK
 * and DEEPSEEK3, 271 KIMI) or is over MVM_GGUF_MAX_ARRAY; MVM_ERR_NOMEM. On failure *out
 * needs no freeing. */
mvm_status mvm_vocab_build(enum mvm_vocab_style style, uint32_t n_vocab, mvm_vocab *out);
/* Sets every tokenizer.ggml.* key llama.cpp reads: model, pre, tokens, scores (LLAMA),
 * token_type, merges (byte-level), bos/eos/unknown/padding/eot/eom_token_id (those that exist),
 * add_bos_token, add_eos_token (false). */
mvm_status mvm_vocab_write(const mvm_vocab *v, mvm_gguf_writer *w);
/* Frees what build allocated; a zeroed struct is a no-op. */
void mvm_vocab_free(mvm_vocab *v);

/* The training corpus: paragraphs, NUL-terminated, in no particular order of importance. */
extern const char *const mvm_vocab_corpus[];
extern const size_t mvm_vocab_corpus_n;

#endif
