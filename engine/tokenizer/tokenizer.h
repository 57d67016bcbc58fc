/*
 * Tokenizers for GGUF vocabularies, following llama.cpp (src/llama-vocab.cpp) so that a file
 * tokenizes the same way here and there:
 *
 *  - tokenizer.ggml.model "llama": SentencePiece-style BPE over scores. Spaces become U+2581
 *    ("▁"), a "▁" is prepended (tokenizer.ggml.add_space_prefix, default true), the text is
 *    split into UTF-8 characters and the adjacent pair whose concatenation is a vocabulary
 *    token of the highest score is merged until none is left (ties: the leftmost pair).
 *    Pieces that are not tokens fall back to <0xXX> byte tokens, else to the one-byte token,
 *    else to the unknown token.
 *  - "gpt2": byte-level BPE. The text is cut by the pre-tokenizer regexes tokenizer.ggml.pre
 *    names (tok_regex.c: GPT-2's, llama.cpp's "default", Qwen2's, Llama 3's, DeepSeek-LLM's,
 *    DeepSeek-Coder's, DeepSeek-V3's, Kimi K2's and o200k, under the names llama.cpp gives
 *    them),
 *    each piece's bytes become GPT-2's byte-level symbols and tokenizer.ggml.merges are
 *    applied lowest rank first (ties: the leftmost pair). Llama 3's names also take a piece
 *    that is a token as that token (llama.cpp's ignore_merges) and add BOS by default.
 *
 * Loading validates the whole vocabulary (MVM_ERR_INVALID, or MVM_ERR_UNSUPPORTED for an
 * unknown model or pre-tokenizer, with a one-line message naming the key), so that nothing
 * later can read out of bounds: array types and lengths agree with tokenizer.ggml.tokens,
 * token types are 0..6, special token ids are in range, token texts are unique (llama.cpp
 * asserts this too), every merge is "left right" with left, right and left+right all tokens,
 * and "llama" byte tokens are spelled <0xXX>. The handle copies what it needs: the GGUF file
 * may be closed after loading.
 *
 * Where this differs from llama.cpp, on purpose:
 *  - Text is always plain text (llama.cpp's parse_special = false), and USER_DEFINED token
 *    texts in it are not split out first (llama.cpp does that even with parse_special =
 *    false; the vocabularies moevm builds have no such tokens).
 *  - Invalid UTF-8 round-trips. BPE: each invalid byte is one code point of class symbol
 *    (what llama.cpp's U+FFFD replacement is) but keeps its own byte instead of becoming
 *    EF BF BD, so the split points agree with llama.cpp and only the bytes differ. SPM: an
 *    invalid sequence is cut into single bytes, where llama.cpp cuts by the lead byte and
 *    can swallow the escape of a following space (see tok_spm.c).
 *  - llama.cpp warns about, and ignores, an out-of-range special token id; here it is an
 *    error. Likewise an unknown token type (llama.cpp: UNDEFINED) and a merge whose parts or
 *    result are not tokens (llama.cpp: a merge that can never apply).
 *  - tokenizer.ggml.pre "gpt2" is accepted as a spelling of llama.cpp's "gpt-2" (which
 *    llama.cpp takes for "default", with a warning); any other unknown name is an error
 *    where llama.cpp falls back to "default".
 *  - The DeepSeek regexes use Unicode's classes, as the models' own tokenizers do, where
 *    llama.cpp runs them through std::regex on a text collapsed to one byte per class; the
 *    one ASCII difference is '~', a symbol here and nothing there (tok_regex.c).
 *  - Kimi K2 ("kimi-k2") is Moonshot's regex as tiktoken runs it: words are cut at their
 *    capitals ("getUserName" is three pieces) where llama.cpp's matcher keeps any letters
 *    together. It also ignores merges, as tiktoken takes a piece that is a token as that
 *    token (llama.cpp applies the merges, which the converter derived from the same ranks).
 *  - o200k ("gpt-4o", "llama4", "minimax-m2": gpt-oss, Llama 4, MiniMax-M2) is tiktoken's
 *    regex with Unicode's letter cases, where llama.cpp's rewrite takes "a letter but A-Z"
 *    as lower case and "a letter but a-z" as upper case: they differ only on cased letters
 *    outside ASCII ("aÉ" is "a", "É" here and in tiktoken, one piece in llama.cpp).
 *  - A BPE token character outside the byte-level alphabet decodes to its own UTF-8 bytes
 *    (llama.cpp writes "[UNK_BYTE_0x..]").
 *  - Code points are classified by tables generated from Unicode 14.0 (llama.cpp's are
 *    newer: characters added since differ), see tok_unicode.c.
 *
 * Why a table rather than glibc's iswalpha_l/iswdigit_l/iswspace_l in a "C.UTF-8" locale:
 * glibc's classes are not Unicode's. It files combining marks and every non-ASCII decimal
 * digit under alpha (so "٣" would join a word instead of being a number), superscripts and
 * fractions ("²", "½") under neither letter nor digit, and does not count NO-BREAK SPACE as
 * a space: over 3000 code points would split differently from llama.cpp. And C.UTF-8 is not
 * installed on every system. The tables cost 12 KiB and a few binary searches above U+007F.
 */
#ifndef MVM_ENGINE_TOKENIZER_TOKENIZER_H
#define MVM_ENGINE_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf/gguf.h"
#include "moevm/moevm.h"

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum mvm_token_type {
    MVM_TOKEN_UNDEFINED = 0,
    MVM_TOKEN_NORMAL = 1,
    MVM_TOKEN_UNKNOWN = 2,
    MVM_TOKEN_CONTROL = 3,
    MVM_TOKEN_USER_DEFINED = 4,
    MVM_TOKEN_UNUSED = 5,
    MVM_TOKEN_BYTE = 6,
};

typedef struct mvm_tokenizer mvm_tokenizer;

/*
 * Reads tokenizer.ggml.*: model, tokens, scores (required for "llama", optional for
 * "gpt2"), token_type (optional: all NORMAL), merges ("gpt2"), pre ("gpt2"), the optional
 * bos/eos/unknown/padding/eot/eom_token_id (defaults as llama.cpp: "llama" 1/2/0, "gpt2"
 * 11/11/none — each dropped when the vocabulary is too small for it), add_bos_token
 * (default: true for "llama", false for "gpt2"), add_eos_token (default false) and
 * add_space_prefix ("llama", default true).
 */
mvm_status mvm_tokenizer_load(const mvm_gguf *g, mvm_tokenizer **out);
/* NULL is a no-op. */
void mvm_tokenizer_free(mvm_tokenizer *t);

uint32_t mvm_tokenizer_n_vocab(const mvm_tokenizer *t);
/* Token `id` as the vocabulary spells it (tokenizer.ggml.tokens, NUL-terminated: "Ġworld",
 * "<|im_end|>"), or NULL for an id out of range. */
const char *mvm_tokenizer_text(const mvm_tokenizer *t, int32_t id);
/* The BOS / EOS token, -1 when there is none. */
int32_t mvm_tokenizer_bos(const mvm_tokenizer *t);
int32_t mvm_tokenizer_eos(const mvm_tokenizer *t);
/* The fill-in-the-middle tokens of a code model (llama.cpp's server's /infill). */
enum mvm_fim { MVM_FIM_PRE, MVM_FIM_SUF, MVM_FIM_MID, MVM_FIM_PAD, MVM_FIM_REP, MVM_FIM_SEP,
               MVM_FIM_COUNT };
/* Its id: tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id (or the older prefix_,
 * suffix_, middle_token_id), else, as llama.cpp finds them, the token spelled as a family
 * spells it (<|fim_prefix|> Qwen, <fim_prefix> StarCoder and Granite, <｜fim▁begin｜>
 * DeepSeek, <PRE> CodeLlama, <|code_prefix|> GLM-4.5, ...), made CONTROL; -1: none. */
int32_t mvm_tokenizer_fim(const mvm_tokenizer *t, enum mvm_fim which);
/* Whether encoding with add_special puts a BOS first (add_bos_token, and a BOS exists). */
int mvm_tokenizer_adds_bos(const mvm_tokenizer *t);
/* Whether `id` ends generation: as llama.cpp, the EOS, EOT and EOM tokens and the tokens
 * spelled <|eot_id|>, <|im_end|>, <|end|> (not beside gpt-oss's <|return|>), <end_of_turn>,
 * <|endoftext|>, <|eom_id|>, <|return|>, <|call|>, <EOT>
 * or like a FIM pad, repository or file separator (<|fim_pad|>, <|repo_name|>,
 * <|file_sep|>...), which also become CONTROL tokens, as llama.cpp makes them. 0 for ids
 * out of range. */
int mvm_tokenizer_is_eog(const mvm_tokenizer *t, int32_t id);

#define MVM_TOKENIZER_MAX_TEXT (INT32_MAX / 4) /* bytes one encode call takes */

/*
 * Tokenizes text[0..len) (any bytes, NUL included; len <= MVM_TOKENIZER_MAX_TEXT, else
 * MVM_ERR_RANGE) into out[0..cap). add_special adds BOS and EOS where the vocabulary asks
 * for them (add_bos_token, add_eos_token). *n_out is the number of tokens; when it exceeds
 * cap the call returns MVM_ERR_RANGE and out holds the first cap of them. MVM_ERR_NOMEM.
 * The handle is only read: encoding may run on several threads at once.
 */
mvm_status mvm_tokenizer_encode(const mvm_tokenizer *t, const char *text, size_t len,
                                int add_special, int32_t *out, size_t cap, size_t *n_out);
/* The same, with the texts of the CONTROL and USER_DEFINED tokens in text encoded as those
 * tokens, the longest where several start at one place (llama.cpp's parse_special): how a
 * chat template's output ("<|im_start|>user\n...") is read. The text between them is
 * encoded piece by piece as above. */
mvm_status mvm_tokenizer_encode_special(const mvm_tokenizer *t, const char *text, size_t len,
                                        int add_special, int32_t *out, size_t cap,
                                        size_t *n_out);

/*
 * The bytes token `id` stands for, written to buf up to cap bytes (no NUL is added; buf
 * may be NULL when cap is 0); returns the full length even when it is larger than cap. NORMAL tokens: "llama" turns
 * "▁" into a space, "gpt2" maps the byte-level alphabet back to bytes. BYTE tokens of
 * "llama": their byte. USER_DEFINED tokens: their text. Everything else (CONTROL, UNKNOWN,
 * UNUSED, UNDEFINED, ids out of range): nothing. So for text x without USER_DEFINED token
 * texts in it, concatenating the pieces of encode(x) gives x back — for "llama", " " + x
 * when x is not empty and add_space_prefix is on, and provided x has no U+2581 ("▁"),
 * which SentencePiece cannot tell from an escaped space.
 */
size_t mvm_tokenizer_piece(const mvm_tokenizer *t, int32_t id, char *buf, size_t cap);
/* The same with a CONTROL token's text ("<|im_start|>"), as llama.cpp's token_to_piece
 * with special set: what grammars match a token against. */
size_t mvm_tokenizer_piece_special(const mvm_tokenizer *t, int32_t id, char *buf, size_t cap);

#endif
