/*
 * moevm's engine: load a GGUF MoE model whose experts live in a moevm space, tokenize,
 * evaluate, sample, apply the model's chat template. What `moevm run`, `moevm chat` and
 * `moevm serve` use; exported from libmoevm beside the memory API (moevm.h) so that an
 * application can embed the engine (`pkg-config --cflags --libs moevm`).
 *
 *     mvm_engine *e;
 *     mvm_engine_params p = {.model = "model.gguf"};
 *     if (mvm_engine_load(&p, &e) != MVM_OK) fprintf(stderr, "%s\n", mvm_last_error());
 *     int32_t toks[256]; size_t n;
 *     mvm_engine_tokenize(e, "Once upon a time", 16, 1, 0, toks, 256, &n);
 *     float *logits = malloc(mvm_engine_n_vocab(e) * sizeof *logits);
 *     mvm_engine_eval(e, 0, toks, n, logits);
 *     mvm_sampler *s; mvm_sampler_create(&(mvm_sampler_params){.temperature = 0}, ...);
 *     int32_t next = mvm_sampler_sample(s, logits, mvm_engine_n_vocab(e));
 *
 * An engine holds n_seq independent sequences (conversations, a server's requests), each
 * with its own positions in the KV cache, and one residency manager for all of them: their
 * routing decides together what stays on the GPU. Thread safety: an engine is used by one
 * thread at a time (a server serialises its requests through one engine thread); the
 * tokenizer and the template functions only read it and may run on any thread. Full
 * reference: docs/api.md.
 */
#ifndef MOEVM_ENGINE_H
#define MOEVM_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "moevm/moevm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mvm_engine mvm_engine;

/* llama.cpp's rotary-embedding options (--rope-scaling, --rope-scale, --rope-freq-base,
 * --yarn-*), each in place of the file's value, as its context parameters are: what stretches
 * a model's context past the length it was trained at (Qwen3's 32K to 128K with YaRN and 4).
 * A field left 0 (NULL) keeps the file's. */
typedef struct mvm_rope_params {
    const char *scaling;    /* "none", "linear" or "yarn" */
    float scale;            /* the context's extension factor (--rope-scale N; --rope-freq-scale F
                               is 1/F) */
    float freq_base;        /* --rope-freq-base */
    uint32_t yarn_orig_ctx; /* the context the model was trained at (else the file's
                               original_context_length, else context_length) */
    float yarn_beta_fast, yarn_beta_slow;
    int yarn_ext_set;       /* yarn_ext_factor given (its 0 is full interpolation) */
    float yarn_ext_factor;
} mvm_rope_params;

typedef struct mvm_engine_params {
    const char *model;      /* the GGUF file (the first of a split model) */
    uint32_t threads;       /* CPU threads; 0: MOEVM_THREADS, else the cores near the GPU */
    const char *gpu_budget; /* "8G", "25%", "auto"; NULL: MOEVM_GPU_BUDGET */
    uint32_t n_ctx;         /* positions of each sequence; 0: the training context, at most
                               4096 */
    uint32_t n_batch;       /* tokens per forward pass; 0: 512 */
    uint32_t n_seq;         /* sequences; 0: 1 */
    /* the KV cache's elements, "f16", "f32" or "q8_0" (on the GPU not for deepseek2's
     * latent rows); on the CPU backend also "bf16", "q4_0", "q4_1", "q5_0", "q5_1",
     * "iq4_nl" (llama.cpp's -ctk names); NULL: MOEVM_KV_TYPE */
    const char *kv_type;
    /* the policy modules, "name" or "name{k=v,...}" (docs/policies.md); NULL: MOEVM_* */
    const char *evict, *predict, *route, *config, *assign;
    const char *cost;       /* the cost model: a preset or a file; NULL: MOEVM_COST */
    /* progress of the load (bytes done of total), called a few times a second; NULL: none */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    /* llama.cpp's --n-cpu-moe, in place of gpu_budget when cpu_moe is set: the experts of
     * n_cpu_moe MoE layers stay in host memory, and the budget is that of the others',
     * (n_layer - n_cpu_moe) / n_layer of the experts' pages (the routing decides which
     * experts fill it). n_cpu_moe >= n_layer: no expert on the GPU; the model then computes
     * on the CPU, reading every expert in host memory (budget_bytes 0). */
    int cpu_moe;
    uint32_t n_cpu_moe;
    /* the "learned" predict module's weights: a `moevm train-predictor` file's bytes, read
     * while the engine loads; NULL: none */
    const void *predictor;
    size_t predictor_size;
    /* the "hot" config module's offline profile (PreScope's Counter): the tokens each
     * expert of each MoE layer processed in a profiling run, hot_counts[layer * hot_experts
     * + expert], over hot_tokens tokens (`moevm run --hot-profile` counts them from a
     * `--trace-out` trace); hot_layers and hot_experts must be the model's MoE layers and
     * experts. Read while the engine loads. NULL: the module profiles the run's first
     * tokens */
    const uint64_t *hot_counts;
    uint32_t hot_layers, hot_experts;
    uint64_t hot_tokens;
    /* llama.cpp's --override-kv: "KEY=TYPE:VALUE" (TYPE int, float, bool or str), each a
     * metadata value read in place of the file's (or added), in order; NULL: none */
    const char *const *kv_overrides;
    uint32_t n_kv_overrides;
    mvm_rope_params rope;   /* after kv_overrides: they win over an override of the same key */
} mvm_engine_params;

/* Loads the model, makes its expert space and the inference context. MVM_ERR_INVALID for a
 * malformed file or parameter (the message names it), MVM_ERR_NOSPACE/NOMEM when it does
 * not fit, MVM_ERR_OPTION for a malformed MOEVM_* value. */
mvm_status mvm_engine_load(const mvm_engine_params *p, mvm_engine **out);
/* NULL is a no-op. */
void mvm_engine_free(mvm_engine *e);

typedef struct mvm_engine_info {
    const char *name;       /* general.name, or the file's */
    const char *arch;       /* general.architecture */
    const char *backend;    /* where it computes: "cpu" or "cuda" */
    uint32_t n_vocab, n_ctx, n_ctx_train, n_seq, n_batch;
    uint32_t n_layer, n_expert, n_expert_used; /* MoE layers */
    uint64_t expert_bytes;  /* of one expert */
    uint64_t budget_bytes;  /* device memory for experts; 0: read at their homes */
    int chat_template;      /* 1: the model's own; 0: ChatML stands in */
} mvm_engine_info;
void mvm_engine_get_info(const mvm_engine *e, mvm_engine_info *out);
uint32_t mvm_engine_n_vocab(const mvm_engine *e);

/* Tokenizes text[0..len) into out[0..cap), *n the count (MVM_ERR_RANGE when over cap; out
 * has the first cap). add_special: BOS/EOS where the vocabulary adds them; parse_special:
 * the texts of control tokens ("<|im_start|>") become those tokens, as in a chat
 * template's output. */
mvm_status mvm_engine_tokenize(const mvm_engine *e, const char *text, size_t len,
                               int add_special, int parse_special, int32_t *out, size_t cap,
                               size_t *n);
/* The bytes of token id into buf[0..cap) (no NUL); returns the full length. Control tokens
 * give nothing. */
size_t mvm_engine_token_piece(const mvm_engine *e, int32_t id, char *buf, size_t cap);
/* The same with a control token's text ("<|im_start|>"): llama_token_to_piece's special,
 * what a grammar matches a token against (so that a grammar's "<|im_start|>" is that
 * token, as in llama.cpp). */
size_t mvm_engine_token_piece_special(const mvm_engine *e, int32_t id, char *buf, size_t cap);
/* Whether id ends a reply (EOS, end of turn). */
int mvm_engine_is_eog(const mvm_engine *e, int32_t id);
/* Sets the logits of every end-of-generation token to -infinity, so that a reply runs to
 * its length limit (llama.cpp's --ignore-eos). */
void mvm_engine_mask_eog(const mvm_engine *e, float *logits);
/* A code model's fill-in-the-middle tokens (llama.cpp's server's /infill), -1 each where
 * the vocabulary has none: from the GGUF's tokenizer.ggml.fim_*_token_id, or the tokens
 * spelled as the model families spell them (<|fim_prefix|>, <fim_prefix>, <PRE>, ...). */
typedef struct mvm_engine_fim {
    int32_t pre, suf, mid, pad, rep, sep;
} mvm_engine_fim;
void mvm_engine_get_fim(const mvm_engine *e, mvm_engine_fim *out);
/* The vocabulary's spelling of id ("<|im_end|>"), NULL out of range. */
const char *mvm_engine_token_text(const mvm_engine *e, int32_t id);

/* Evaluates n tokens after sequence seq's cached positions; logits (n_vocab floats) of the
 * last one, or NULL. MVM_ERR_RANGE when they do not fit n_ctx or seq >= n_seq,
 * MVM_ERR_INVALID for a token outside the vocabulary; the cache is then as before. */
mvm_status mvm_engine_eval(mvm_engine *e, uint32_t seq, const int32_t *tokens, uint32_t n,
                           float *logits);
/* One token of a batch (mvm_engine_eval_batch). */
typedef struct mvm_engine_token {
    int32_t id;
    uint32_t seq;    /* the sequence it extends: after its cached positions and the batch's
                        earlier tokens of that sequence */
    int32_t logits;  /* nonzero: its logits are wanted */
} mvm_engine_token;

/* Evaluates n tokens of any sequences in one pass (continuous batching: each running
 * request's next token and a new request's prompt together): every weight is read once for
 * the batch, and the experts its tokens share are placed and run once. logits: n_vocab
 * floats for each token whose `logits` is set, in the batch's order, or NULL. Errors as
 * mvm_engine_eval's, MVM_ERR_RANGE for a sequence out of range; on failure every sequence
 * is as before. */
mvm_status mvm_engine_eval_batch(mvm_engine *e, const mvm_engine_token *tokens, uint32_t n,
                                 float *logits);
/* The positions cached in sequence seq (0 for seq out of range). */
uint32_t mvm_engine_n_past(const mvm_engine *e, uint32_t seq);
/* Keeps the first n positions of sequence seq (0: forget it all): a prompt that starts with
 * what is cached evaluates only what follows. It may keep fewer: none where a model's
 * sliding-window layers keep rings (gpt-oss) and more than a batch of positions past n
 * were cached, as those rows then hold later positions. mvm_engine_n_past says what it
 * kept, from which to evaluate. */
void mvm_engine_truncate(mvm_engine *e, uint32_t seq, uint32_t n);

/* The model's chat template applied to messages_json (a JSON array of {"role", "content",
 * ...} objects, as OpenAI's API and Hugging Face take them), the variables of extra_json (a
 * JSON object: tools, enable_thinking, ...; NULL: none) added; the prompt text into *out
 * (free it with free()), to be tokenized with add_special and parse_special. */
mvm_status mvm_engine_chat_format(const mvm_engine *e, const char *messages_json,
                                  const char *extra_json, int add_generation_prompt,
                                  char **out);

/* The Jinja source of the chat template in use (the model's, ChatML standing in for a
 * model without one, or the one set below); NULL when the model has no tokenizer. */
const char *mvm_engine_chat_template(const mvm_engine *e);

/* Replaces the model's chat template by the Jinja source src[0..len) (a user's
 * --chat-template-file). MVM_ERR_INVALID naming the line of a syntax error. */
mvm_status mvm_engine_set_chat_template(mvm_engine *e, const char *src, size_t len);

typedef struct mvm_engine_stats {
    uint64_t accesses;      /* experts the MoE steps asked for */
    uint64_t hits;          /* of them, resident on the device */
    uint64_t evictions, prefetches, prefetch_used;
    uint64_t bytes_moved;   /* host to device */
    uint64_t budget_bytes;  /* device memory for experts */
    uint64_t resident_bytes;
    uint64_t tokens;        /* evaluated, all sequences */
} mvm_engine_stats;
void mvm_engine_get_stats(const mvm_engine *e, mvm_engine_stats *out);

/* ---- sampling --------------------------------------------------------------------------- */

/*
 * Sampling: the next token from a row of logits, as llama.cpp's sampler chain takes it
 * (common/sampling.cpp), its steps in its default order:
 *
 *   0. penalties over the last repeat_last_n previous tokens: the logit of every token
 *      among them divided by repeat_penalty when positive, multiplied by it when not (once,
 *      however often it was seen), then frequency_penalty subtracted once per time it was
 *      seen and presence_penalty once; then DRY (mvm_sampler_set_dry_breakers): a token
 *      that would extend a sequence repeated from earlier in the last dry_last_n tokens
 *      beyond dry_allowed_length loses dry_multiplier * dry_base^(length - allowed),
 *   1. keep the tokens within top_n_sigma standard deviations of the highest logit,
 *   2. keep the top_k highest logits (0: all),
 *   3. locally typical: keep the tokens whose surprise is nearest the entropy until their
 *      probability sums past typical_p,
 *   4. keep the fewest highest whose probability sums to at least top_p (1: all),
 *   5. keep those with probability at least min_p times the highest (0: all),
 *   6. XTC: with probability xtc_probability, drop every token of probability at least
 *      xtc_threshold but the least probable of them,
 *   7. draw from softmax(logit / temperature) over what is left; with dynatemp_range, the
 *      temperature goes from max(0, temperature - range) to temperature + range as the
 *      entropy of what is left over its maximum, raised to dynatemp_exponent, goes from 0
 *      to 1.
 *
 * Steps 1 to 6 judge the untempered distribution, and 3 to 6 keep at least min_keep tokens.
 * `order` runs the steps in another order (llama.cpp's --samplers), each as often as it is
 * named and those not named not at all: a step after the temperature judges the tempered
 * distribution, one after a penalty the penalised one; without the temperature the draw is
 * from the untempered softmax.
 * mirostat 1 or 2 replaces steps 0 to 7, as in llama.cpp: the logits divided by the
 * temperature, then Mirostat (Basu et al. 2021) holds the surprise of the tokens drawn
 * near mirostat_tau, learning at mirostat_eta (its state is the sampler's).
 *
 * temperature 0 is greedy: the highest logit after step 0 (where the order has its steps),
 * ties to the lowest id, whatever the other parameters (where llama.cpp's chain still runs
 * the steps the order puts before its temperature, XTC and a dynamic one among them).
 * Ties elsewhere also order by id, so a seed reproduces a run exactly. NaN logits are never
 * picked; a +inf logit wins outright. Every parameter left 0 is off (or its default, said
 * below), so a zeroed struct samples from the plain softmax.
 */
/* The steps, as `order` names them. */
enum {
    MVM_SAMPLER_PENALTIES = 1, MVM_SAMPLER_DRY, MVM_SAMPLER_TOP_N_SIGMA, MVM_SAMPLER_TOP_K,
    MVM_SAMPLER_TYPICAL, MVM_SAMPLER_TOP_P, MVM_SAMPLER_MIN_P, MVM_SAMPLER_XTC,
    MVM_SAMPLER_TEMPERATURE, MVM_SAMPLER_STEP_END
};
#define MVM_SAMPLER_MAX_STEPS 16

typedef struct mvm_sampler_params {
    float temperature; /* >= 0; 0 = greedy */
    int32_t top_k;     /* >= 0; 0 = off */
    float top_p;       /* [0, 1]; 1 = off, and 0 (unset) is off too */
    float min_p;       /* [0, 1]; 0 = off */
    uint64_t seed;     /* the random stream (splitmix64) */
    float repeat_penalty;   /* > 0; 1 = off, and 0 (unset) is off too */
    uint32_t repeat_last_n; /* previous tokens the penalties look back over; 0 = off */
    float frequency_penalty; /* any number; 0 = off */
    float presence_penalty;  /* any number; 0 = off */
    float dry_multiplier;    /* >= 0; 0 = off */
    float dry_base;          /* >= 1; 0 (unset) = 1.75, llama.cpp's */
    uint32_t dry_allowed_length; /* a repetition this long goes unpenalised (llama.cpp: 2) */
    uint32_t dry_last_n;     /* previous tokens DRY scans; 0 = all it is given */
    float top_n_sigma;       /* > 0; 0 or negative = off */
    float typical_p;         /* [0, 1]; 1 = off, and 0 (unset) is off too */
    float xtc_probability;   /* [0, 1]; 0 = off */
    float xtc_threshold;     /* [0, 1]; over 0.5 = off */
    float dynatemp_range;    /* >= 0; 0 = off */
    float dynatemp_exponent; /* > 0; 0 (unset) = 1 */
    int32_t mirostat;        /* 0 = off, 1 = Mirostat, 2 = Mirostat 2.0 */
    float mirostat_tau;      /* >= 0; 0 (unset) = 5, llama.cpp's */
    float mirostat_eta;      /* >= 0; 0 (unset) = 0.1, llama.cpp's */
    uint32_t min_keep;       /* steps 3 to 6 keep at least this many; 0 = 1 */
    uint8_t order[MVM_SAMPLER_MAX_STEPS]; /* MVM_SAMPLER_* up to the first 0; all 0 (unset):
                                             the order above */
} mvm_sampler_params;

typedef struct mvm_sampler mvm_sampler;

/* Checks the parameters (MVM_ERR_INVALID with a message naming the bad one) and reserves
 * what sampling rows of up to n_vocab logits needs (MVM_ERR_NOMEM). */
mvm_status mvm_sampler_create(const mvm_sampler_params *p, uint32_t n_vocab,
                              mvm_sampler **out);
/* NULL is a no-op. */
void mvm_sampler_free(mvm_sampler *s);

/* The token picked from logits[0..n); -1 when n is 0 or over the n_vocab reserved, or no
 * logit is a number (under a grammar: no token that fits). Allocates nothing but a
 * grammar's scratch; the logits are left as they are. No previous tokens: no repetition
 * penalty. */
int32_t mvm_sampler_sample(mvm_sampler *s, float *logits, uint32_t n);
/* The same after the tokens prev[0..n_prev), oldest first (the prompt's and those
 * generated): the last repeat_last_n of them are penalised, DRY reads the last dry_last_n;
 * ids outside [0, n) are ignored. */
int32_t mvm_sampler_sample_after(mvm_sampler *s, float *logits, uint32_t n,
                                 const int32_t *prev, uint32_t n_prev);
/* Step 0's penalties (not DRY) alone, of parameters p: out[i] = logits[i] penalised or
 * not, every i < n; out must not overlap logits. MVM_ERR_NOMEM (out as logits) when the
 * frequency or presence penalty finds no memory to count the tokens in. */
mvm_status mvm_sampler_penalize(const mvm_sampler_params *p, const float *logits, uint32_t n,
                                const int32_t *prev, uint32_t n_prev, float *out);
/* DRY's sequence breakers (llama.cpp's --dry-sequence-breaker; its defaults "\n", ":", "\"",
 * "*"): a repetition does not reach back across one. Each breaker is found in e's
 * vocabulary as llama.cpp finds it (a token that holds it, or that ends with its start and
 * is followed by the rest's tokens), cut to 40 bytes; at most 16 of them. Made once (a scan
 * of the vocabulary), shared by any number of samplers. MVM_ERR_INVALID for an empty
 * breaker, too many, or a model without a vocabulary; MVM_ERR_NOMEM. */
typedef struct mvm_dry_breakers mvm_dry_breakers;
mvm_status mvm_dry_breakers_create(const mvm_engine *e, const char *const *breakers, size_t n,
                                   mvm_dry_breakers **out);
/* NULL is a no-op. */
void mvm_dry_breakers_free(mvm_dry_breakers *b);
/* The breakers s's DRY reads (b must outlive s; NULL: none, the default). */
void mvm_sampler_set_dry_breakers(mvm_sampler *s, const mvm_dry_breakers *b);

/* The distribution the last draw was made from, after every step (llama.cpp's server's
 * post_sampling_probs): its k most probable tokens (at most MVM_SAMPLER_MAX_PROBS), most
 * probable first, ties to the lower id, into ids[0..) and probs[0..) - their count, only
 * tokens of a probability above 0 (a greedy draw: one, 1) - and the drawn token's
 * probability into *chosen. 0 and *chosen 0 before the first draw. */
#define MVM_SAMPLER_MAX_PROBS 64
uint32_t mvm_sampler_last_probs(const mvm_sampler *s, uint32_t k, int32_t *ids, float *probs,
                                float *chosen);

/* Log-probabilities as llama.cpp's server and OpenAI's API report them: of the model's
 * distribution softmax(logits[0..n)), before any penalty, filter or temperature. The k
 * most probable tokens, highest first (ties to the lower id), into top_id[0..k) and
 * top_lp[0..k) (k at most n); NaN and -inf logits have no probability, and where fewer
 * than k tokens have one the rest get id -1. Returns log Σ exp(logit), so token i's log-probability is logits[i] minus it;
 * -INFINITY when no logit is a number. */
float mvm_sampler_logprobs(const float *logits, uint32_t n, uint32_t k, int32_t *top_id,
                           float *top_lp);

/*
 * Grammar-constrained sampling (engine/grammar/): the tokens sampled spell a sentence of a
 * GBNF grammar, llama.cpp's format (its grammars/README.md), or of a JSON Schema turned
 * into one. As llama.cpp does: the sampler draws as usual, and only when the token drawn
 * does not fit does it mask every token that does not and draw again from the same
 * distribution; an end-of-generation token fits only where the grammar is complete; a
 * control token fits by its text (mvm_engine_token_piece_special).
 */
typedef struct mvm_grammar mvm_grammar;

/* Parses GBNF text (start rule `root`) for e's vocabulary, which it reads: free it before
 * e. MVM_ERR_INVALID with the line and column of the fault (an undefined rule, left
 * recursion, a bad escape...). The first grammar of an engine decodes its vocabulary (tens
 * of milliseconds for 150k tokens), kept for the next; any thread may make one. */
mvm_status mvm_grammar_create(const mvm_engine *e, const char *gbnf, mvm_grammar **out);
/* NULL is a no-op. */
void mvm_grammar_free(mvm_grammar *g);
/* A JSON Schema (text[0..len)) as a GBNF grammar whose sentences are the JSON texts the
 * schema validates, written as llama.cpp's json-schema-to-grammar writes it, into a
 * malloc'd string (*gbnf). MVM_ERR_INVALID naming what is malformed or not supported. */
mvm_status mvm_json_schema_to_grammar(const char *schema, size_t len, char **gbnf);

/* Whether token id may come next (0 for ids outside the vocabulary). */
int mvm_grammar_allows(const mvm_grammar *g, int32_t id);
/* Sets logits[i] to -infinity for every token i < n the grammar does not allow next
 * (MVM_ERR_NOMEM: some may be left). */
mvm_status mvm_grammar_apply(const mvm_grammar *g, float *logits, uint32_t n);
/* Advances the grammar past token id; MVM_ERR_INVALID (the state unchanged) when the
 * grammar does not allow it. */
mvm_status mvm_grammar_accept(mvm_grammar *g, int32_t id);
/* Whether the grammar is finished: nothing but an end-of-generation token may follow, so a
 * caller that masks those (--ignore-eos) stops here. */
int mvm_grammar_finished(const mvm_grammar *g);

/* A lazy grammar's triggers (mvm_grammar_set_lazy). */
typedef struct mvm_grammar_triggers {
    const char *const *words; /* the words that start the grammar's sentence */
    size_t n_words;
    const char *quiet_open;   /* words between these do not count (a reasoning block: */
    const char *quiet_close;  /* "<think>", "</think>"); NULL, NULL: none */
    int quiet_start;          /* the text starts inside that block (the prompt opened it) */
} mvm_grammar_triggers;
/* Makes g lazy, as llama.cpp's lazy grammars (how a chat's tool calls are held to their
 * tools under tool_choice "auto"): every token fits, and is only watched, until the text of
 * those accepted shows a trigger word; from that word's first byte on, the text is held to
 * g, whose sentences begin with one. A word whose sequel g refuses (in the same token) is
 * passed over. Before the first token; MVM_ERR_INVALID for no words or an empty one. */
mvm_status mvm_grammar_set_lazy(mvm_grammar *g, const mvm_grammar_triggers *t);

/* Constrains s's draws to g (borrowed: it must outlive its use; NULL: no constraint) and
 * advances g past each token drawn. A draw where no token fits returns -1.
 * MVM_ERR_NOMEM when the scratch row cannot be reserved (s then unconstrained). */
mvm_status mvm_sampler_set_grammar(mvm_sampler *s, mvm_grammar *g);

#ifdef __cplusplus
}
#endif
#endif /* MOEVM_ENGINE_H */
