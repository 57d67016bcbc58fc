/*
 * llama.cpp's flags that moevm's commands have no row of their own for (tools/cli_llama.h):
 * what each becomes, so that a llama-cli, llama-server, llama-bench or llama-perplexity
 * command line pasted into moevm runs, or stops at once with a line that says what moevm
 * does instead, never with "unknown option" or a misreading ("-md x" as -m d). The names
 * and whether each takes a value are llama.cpp's (common/arg.cpp, tools/llama-bench), as of
 * the llama-cpp-python release bench/llamacpp/build.sh fetches.
 *
 * A flag that changes nothing a user could observe but speed, or asks for what moevm does
 * anyway, is accepted with a note said once; one whose meaning moevm cannot honour (another
 * model, a file to save, an endpoint moevm does not serve, a restriction it would not
 * enforce) is refused. Flags moevm computes (the sampling options, -c, --n-cpu-moe, ...)
 * are rows of the commands' tables, which come first.
 */
#include <stdio.h>
#include <string.h>

#include "tools/cli_llama.h"

enum { R = 1, C = 2, S = 4, B = 8, P = 16, GEN = R | C | S | P, ALL = GEN | B };
enum { NOTE, REFUSE };

static const char *const on_off_auto[] = {"on", "off", "auto", NULL};
static const char *const on_off[] = {"on", "off", NULL};
static const char *const numa_kinds[] = {"distribute", "isolate", "numactl", NULL};

#define THREADS                                                                                 \
    "moevm places its threads on the cores nearest the GPU itself (hwloc); -t says how many"
#define NO_CACHE_SAVE "moevm keeps no checkpoints or host copies of a slot's cache"
#define LOGS "moevm's messages go to stderr, their level set by MOEVM_LOG"
#define DRAFT "moevm has no speculative decoding"
#define DOWNLOAD "moevm reads a local GGUF file: download it, then -m FILE"
#define TEXT_ONLY "moevm computes text generation only"
#define ONE_MODEL "moevm serves the one model given with -m"

static const mvm_cli_llama_flag flags[] = {
    /* placement and the machine */
    {{"-fa", "--flash-attn"}, ALL, 1, on_off_auto, NOTE,
     "moevm picks its attention kernels itself (MOEVM_ATTN_MMA)"},
    {{"--no-mmap"}, ALL, 0, NULL, NOTE,
     "moevm copies the weights out of the file; nothing stays mapped"},
    {{"--mlock"}, ALL, 0, NULL, NOTE, "the experts' homes are pinned (locked) host memory already"},
    {{"-mmp", "--mmap"}, B, 1, NULL, NOTE,
     "moevm copies the weights out of the file; nothing stays mapped"},
    {{"-ot", "--override-tensor"}, ALL, 1, NULL, REFUSE,
     "moevm places the weights itself: attention and the dense weights on the GPU, the experts "
     "by a byte budget (--cpu-moe: every expert on the CPU; --n-cpu-moe N; --gpu-budget)"},
    {{"-ncffn", "--n-cpu-ffn"}, ALL, 1, NULL, REFUSE,
     "the dense weights go with attention; the experts have a byte budget (--n-cpu-moe, "
     "--gpu-budget)"},
    {{"-ts", "--tensor-split", "-sm", "--split-mode"}, ALL, 1, NULL, REFUSE,
     "moevm computes on one GPU a process (MOEVM_DEVICE); mpirun spreads the experts over "
     "several (docs/distributed.md)"},
    {{"-mg", "--main-gpu"}, ALL, 1, NULL, REFUSE, "the GPU is chosen with MOEVM_DEVICE=N"},
    {{"-dev", "--device"}, ALL, 1, NULL, REFUSE,
     "the GPU is chosen with MOEVM_DEVICE=N, none with MOEVM_BACKEND=host"},
    {{"--list-devices"}, ALL, 0, NULL, REFUSE, "`moevm info` names the GPU moevm would use"},
    {{"--rpc"}, ALL, 1, NULL, REFUSE,
     "mpirun spreads the experts over machines (docs/distributed.md)"},
    {{"-fit", "--fit", "-fitp", "--fit-print"}, ALL, 1, on_off, NOTE,
     "moevm fits the experts' budget to the GPU's free memory itself (--gpu-budget auto)"},
    {{"-fitt", "--fit-target", "-fitc", "--fit-ctx"}, ALL, 1, NULL, NOTE,
     "moevm fits the experts' budget to the GPU's free memory itself (--gpu-budget auto)"},
    {{"--check-tensors"}, ALL, 0, NULL, NOTE,
     "moevm checks every tensor's shape, type and bounds as it loads"},
    {{"--repack", "-nr", "--no-repack", "--no-host"}, ALL, 0, NULL, NOTE,
     "moevm lays the weights out for its kernels itself"},
    {{"--op-offload", "--no-op-offload"}, ALL, 0, NULL, NOTE,
     "moevm decides where each product runs itself"},
    {{"-lm", "--load-mode", "-lzm", "--lazy-mode"}, ALL, 1, NULL, NOTE,
     "moevm reads the file once and converts the experts as it loads"},
    {{"--numa"}, ALL, 1, numa_kinds, NOTE,
     "moevm binds the experts' homes and its threads to the GPU's NUMA node itself "
     "(without a GPU, the homes interleaved over every node)"},
    {{"-tb", "--threads-batch"}, ALL, 1, NULL, NOTE, "moevm's threads (-t) compute prompts too"},
    {{"-C", "--cpu-mask", "-Cr", "--cpu-range", "--cpu-strict", "--prio"}, ALL, 1, NULL, NOTE,
     THREADS},
    {{"--poll", "-Cb", "--cpu-mask-batch", "-Crb", "--cpu-range-batch"}, ALL, 1, NULL, NOTE,
     THREADS},
    {{"--cpu-strict-batch", "--prio-batch", "--poll-batch"}, ALL, 1, NULL, NOTE, THREADS},
    {{"--delay"}, B, 1, NULL, NOTE, "moevm bench runs its tests back to back"},
    {{"--progress"}, B, 0, NULL, NOTE, "moevm bench shows its progress on a terminal"},
    {{"-oe", "--output-err"}, B, 1, NULL, NOTE, "moevm bench writes one format, on stdout"},
    {{"-pg"}, B, 1, NULL, REFUSE,
     "moevm bench times prompts (-p) and generation (-n) apart; -d N measures either after N "
     "tokens of context"},
    {{"-embd", "--embeddings"}, B, 1, NULL, REFUSE, TEXT_ONLY},
    /* the cache and the batches */
    {{"-ub", "--ubatch-size"}, ALL, 1, NULL, NOTE,
     "moevm's passes take -b tokens; there is no smaller physical batch"},
    {{"-nkvo", "--no-kv-offload", "-kvo", "--kv-offload"}, GEN, 0, NULL, NOTE,
     "the KV cache stays beside attention, on the GPU where there is one"},
    {{"-nkvo", "--no-kv-offload"}, B, 1, NULL, NOTE,
     "the KV cache stays beside attention, on the GPU where there is one"},
    {{"-dt", "--defrag-thold"}, ALL, 1, NULL, NOTE, "moevm's cache needs no defragmenting"},
    {{"--keep"}, GEN, 1, NULL, NOTE, "moevm shifts no context, so there are no tokens to keep"},
    {{"--no-context-shift"}, GEN, 0, NULL, NOTE,
     "moevm shifts no context: a reply ends where the context does"},
    {{"--context-shift"}, GEN, 0, NULL, REFUSE,
     "moevm shifts no context: a reply ends where the context does (a larger -c)"},
    {{"--swa-full"}, GEN, 0, NULL, NOTE, "moevm sizes the windowed layers' cache itself"},
    {{"-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified"}, GEN, 0, NULL, NOTE,
     "each slot has its own positions in moevm's cache"},
    {{"--kv-unified-per-slot"}, S, 1, NULL, NOTE,
     "each slot has its own positions in moevm's cache"},
    {{"-ctxcp", "--ctx-checkpoints", "--swa-checkpoints", "-cms", "--checkpoint-min-step"}, C | S,
     1, NULL, NOTE, NO_CACHE_SAVE},
    {{"-cram", "--cache-ram"}, C | S, 1, NULL, NOTE, NO_CACHE_SAVE},
    {{"--cache-idle-slots", "--no-cache-idle-slots"}, S, 0, NULL, NOTE, NO_CACHE_SAVE},
    {{"--cache-reuse"}, S, 1, NULL, NOTE,
     "a slot reuses the prefix its cache shares with a request (cache_prompt), not shifted "
     "chunks"},
    {{"--cache-prompt"}, S, 0, NULL, NOTE, "the default: a request's cache_prompt decides"},
    {{"-sps", "--slot-prompt-similarity"}, S, 1, NULL, NOTE, "moevm picks a request's slot itself"},
    {{"-gan", "--grp-attn-n", "-gaw", "--grp-attn-w"}, GEN, 1, NULL, REFUSE,
     "moevm has no self-extend; the RoPE options (--rope-scaling) extend a context"},
    /* the program's own output */
    {{"--warmup", "--no-warmup"}, ALL, 0, NULL, NOTE, "moevm runs no warm-up pass before timing"},
    {{"--perf", "--no-perf", "--show-timings", "--no-show-timings"}, GEN, 0, NULL, NOTE,
     "moevm says its timings at the end"},
    {{"--log-disable", "--log-prefix", "--no-log-prefix", "--log-timestamps",
      "--no-log-timestamps"}, ALL, 0, NULL, NOTE, LOGS},
    {{"--log-jsonl", "--no-log-jsonl"}, ALL, 0, NULL, NOTE, LOGS},
    {{"--log-file", "--log-colors", "--log-prompts-dir"}, ALL, 1, NULL, NOTE, LOGS},
    {{"-v", "--verbose", "--log-verbose"}, ALL, 0, NULL, NOTE, LOGS},
    {{"-lv", "--verbosity", "--log-verbosity"}, ALL, 1, NULL, NOTE, LOGS},
    {{"--offline"}, ALL, 0, NULL, NOTE, "moevm never downloads"},
    {{"-co", "--color"}, R | C, 1, on_off_auto, NOTE, "moevm writes plain text"},
    {{"--simple-io", "-mli", "--multiline-input"}, R | C, 0, NULL, NOTE,
     "moevm chat reads a line a turn from its input"},
    {{"--verbose-prompt"}, R, 0, NULL, NOTE,
     "moevm run writes the prompt's text; `moevm tokenize` lists its tokens"},
    {{"-sp", "--special"}, C | S | P, 0, NULL, NOTE,
     "a reply keeps control tokens' texts where its chat syntax needs them (moevm run takes "
     "--special)"},
    {{"-bs", "--backend-sampling"}, GEN, 0, NULL, NOTE, "moevm samples on the CPU"},
    {{"-r", "--reverse-prompt"}, C | S, 1, NULL, REFUSE,
     "a reply ends at its end-of-turn token; a request's stop gives more (serve); moevm run "
     "takes -r"},
    {{"-l", "--logit-bias"}, GEN, 1, NULL, REFUSE,
     "a request's logit_bias biases tokens (moevm serve); the command line has none"},
    /* what moevm does not have */
    {{"-mu", "--model-url", "-hf", "-hfr", "--hf-repo"}, ALL, 1, NULL, REFUSE, DOWNLOAD},
    {{"-hff", "--hf-file", "-hft", "--hf-token", "-dr", "--docker-repo"}, ALL, 1, NULL, REFUSE,
     DOWNLOAD},
    {{"--gpt-oss-20b-default", "--gpt-oss-120b-default", "--fim-qwen-30b-default",
      "--spec-default", "--embd-gemma-default"}, ALL, 0, NULL, REFUSE, DOWNLOAD},
    {{"--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled",
      "--control-vector-layer-range"}, ALL, 1, NULL, REFUSE,
     "moevm computes the model as the file has it, without adapters"},
    {{"--lora-init-without-apply"}, S, 0, NULL, REFUSE,
     "moevm computes the model as the file has it, without adapters"},
    {{"-md", "--model-draft", "--spec-draft-model", "--spec-type", "-lcs",
      "--lookup-cache-static"}, GEN, 1, NULL, REFUSE, DRAFT},
    {{"--draft", "--draft-n", "--draft-max", "--draft-min", "--draft-n-min", "--draft-p-min"},
     GEN, 1, NULL, REFUSE, DRAFT},
    {{"-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "-devd", "--device-draft",
      "-lcd"}, GEN, 1, NULL, REFUSE, DRAFT},
    {{"-td", "--threads-draft", "-ctkd", "--cache-type-k-draft", "-ctvd",
      "--cache-type-v-draft"}, GEN, 1, NULL, REFUSE, DRAFT},
    {{"--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min", "--draft-p-split",
      "--spec-draft-ngl", "--lookup-cache-dynamic"}, GEN, 1, NULL, REFUSE, DRAFT},
    {{"-mm", "--mmproj", "-mmu", "--mmproj-url", "--image", "--audio"}, GEN, 1, NULL, REFUSE,
     TEXT_ONLY},
    {{"--video"}, GEN, 1, NULL, REFUSE, TEXT_ONLY},
    {{"--mmproj-auto", "--no-mmproj", "--no-mmproj-auto", "--mmproj-offload",
      "--no-mmproj-offload"}, GEN, 0, NULL, NOTE, "moevm loads no projector"},
    {{"--embedding", "--embeddings", "--rerank", "--reranking"}, S, 0, NULL, REFUSE, TEXT_ONLY},
    {{"--pooling", "--embd-normalize"}, S, 1, NULL, REFUSE, TEXT_ONLY},
    {{"--adaptive-target", "--adaptive-decay"}, GEN, 1, NULL, REFUSE,
     "moevm has no adaptive-p sampler"},
    {{"--prompt-cache", "-bf", "--binary-file", "-ptc", "--print-token-count"}, R, 1, NULL,
     REFUSE, "moevm run reads a text prompt (-p, -f, --tokens) and saves no prompt cache"},
    {{"--prompt-cache-all", "--prompt-cache-ro"}, R, 0, NULL, REFUSE,
     "moevm run reads a text prompt (-p, -f, --tokens) and saves no prompt cache"},
    {{"-cnv", "--conversation", "-i", "--interactive", "-if", "--interactive-first"}, R, 0,
     NULL, REFUSE, "`moevm chat` is the conversation"},
    {{"-no-cnv", "--no-conversation"}, R, 0, NULL, NOTE, "moevm run is not a conversation"},
    {{"-st", "--single-turn"}, C, 0, NULL, NOTE,
     "moevm chat ends at the end of its input (echo 'Hi' | moevm chat ...: one turn)"},
    {{"--in-prefix", "--in-suffix"}, R, 1, NULL, REFUSE, "`moevm chat` is the conversation"},
    {{"--in-prefix-bos"}, R, 0, NULL, REFUSE, "`moevm chat` is the conversation"},
    {{"--hellaswag", "--winogrande", "--multiple-choice"}, P, 0, NULL, REFUSE,
     "moevm perplexity scores perplexity and KL divergence only"},
    {{"--hellaswag-tasks", "--winogrande-tasks", "--multiple-choice-tasks", "--ppl-stride",
      "--ppl-output-type"}, P, 1, NULL, REFUSE,
     "moevm perplexity scores perplexity and KL divergence only"},
    /* the server's */
    {{"--jinja"}, GEN, 0, NULL, NOTE,
     "moevm always renders the chat template with its Jinja interpreter"},
    {{"--no-jinja"}, GEN, 0, NULL, REFUSE,
     "moevm always renders the chat template with its Jinja interpreter"},
    {{"-cb", "--cont-batching", "-nocb", "--no-cont-batching"}, S, 0, NULL, NOTE,
     "moevm batches the slots' tokens together"},
    {{"--metrics"}, S, 0, NULL, NOTE, "GET /metrics is always served"},
    {{"--slots"}, S, 0, NULL, NOTE, "GET /slots is always served"},
    {{"--no-slots"}, S, 0, NULL, REFUSE, "GET /slots is always served"},
    {{"--props"}, S, 0, NULL, NOTE,
     "POST /props is refused: the properties are the command line's"},
    {{"--slot-save-path"}, S, 1, NULL, REFUSE, "moevm saves no slots (POST /slots)"},
    {{"--no-webui", "--no-ui", "-no-ag", "--no-agent"}, S, 0, NULL, NOTE,
     "moevm serves the API, no web page"},
    {{"--webui", "--ui", "-ag", "--agent"}, S, 0, NULL, REFUSE,
     "moevm serves the API, no web page"},
    {{"--path", "--ui-config", "--webui-config", "--ui-config-file", "--webui-config-file"}, S,
     1, NULL, REFUSE, "moevm serves the API, no web page"},
    {{"--tools", "--tools-runtime", "--mcp-servers-config", "--mcp-servers-json"}, S, 1, NULL,
     REFUSE, "moevm runs no tools itself: a request's tools go to the model, their calls back "
     "to the client"},
    {{"--models-dir", "--models-preset", "--models-max", "--media-path"}, S, 1, NULL, REFUSE,
     ONE_MODEL},
    {{"--models-autoload", "--no-models-autoload"}, S, 0, NULL, REFUSE, ONE_MODEL},
    {{"--spm-infill"}, S, 0, NULL, REFUSE, "moevm lays out /infill's prompt prefix first"},
    {{"--ssl-key-file", "--ssl-cert-file"}, S, 1, NULL, REFUSE,
     "moevm serves plain HTTP: put a TLS proxy in front"},
    {{"--cors-origins", "--cors-methods", "--cors-headers"}, S, 1, NULL, REFUSE,
     "moevm answers every origin, llama-server's default: put a proxy in front to restrict it"},
    {{"--cors-credentials", "--no-cors-credentials"}, S, 0, NULL, REFUSE,
     "moevm answers every origin, llama-server's default: put a proxy in front to restrict it"},
    {{"--reuse-port"}, S, 0, NULL, REFUSE, "moevm listens alone on its port"},
    {{"--threads-http"}, S, 1, NULL, NOTE, "moevm serves each connection on a thread of its own"},
    {{"--sse-ping-interval", "--sleep-idle-seconds", "--tags"}, S, 1, NULL, NOTE,
     "moevm has no such setting"},
    {{"--skip-chat-parsing", "--no-skip-chat-parsing", "--prefill-assistant",
      "--no-prefill-assistant", "--reasoning-preserve", "--no-reasoning-preserve"}, C | S, 0,
     NULL, NOTE, "moevm has no such setting"},
};

/* The command's bit, from its name. */
static unsigned command_bit(const char *cmd)
{
    static const char *const names[] = {"run", "chat", "serve", "bench", "perplexity"};
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(cmd, names[i]))
            return 1u << i;
    return 0;
}

const mvm_cli_llama_flag *mvm_cli_llama_at(size_t i)
{
    return i < sizeof flags / sizeof *flags ? &flags[i] : NULL;
}

const mvm_cli_llama_flag *mvm_cli_llama_find(const char *cmd, const char *typed, size_t len)
{
    const unsigned bit = command_bit(cmd);
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
        for (int n = 0; n < MVM_CLI_LLAMA_NAMES && flags[i].names[n]; n++)
            if ((flags[i].cmds & bit) && strlen(flags[i].names[n]) == len &&
                !strncmp(flags[i].names[n], typed, len))
                return &flags[i];
    return NULL;
}

int mvm_cli_llama_apply(const char *cmd, const mvm_cli_llama_flag *f, const char *typed,
                        const char *value)
{
    static unsigned char said[sizeof flags / sizeof *flags];
    if (f->refuse) {
        fprintf(stderr, "moevm %s: %s: llama.cpp's, not taken: %s\n", cmd, typed, f->say);
        return 2;
    }
    int choice;
    if (f->choices && mvm_cli_choice(cmd, typed, value, f->choices, &choice))
        return 2;
    if (!said[f - flags]++)
        fprintf(stderr, "moevm %s: %s: llama.cpp's, accepted and ignored: %s\n", cmd, typed,
                f->say);
    return 0;
}
