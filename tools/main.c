/* `moevm`: the command-line front end. One subcommand per file (tools/cmd_*.c). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "engine/forward/engine_options.h"
#include "interpose/options.h"
#include "moevm/moevm.h"
#include "policy/policy_options.h"
#include "tools/cli.h"
#include "vmm/options.h"

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *help;
} commands[] = {
    {"info", mvm_cmd_info, "topology, backend, page size, budget and options in effect"},
    {"run", mvm_cmd_run, "generate text with a GGUF MoE model (experts through the space)"},
    {"chat", mvm_cmd_chat, "a conversation in the model's chat template"},
    {"serve", mvm_cmd_serve, "an HTTP server: OpenAI's and llama-server's APIs, streaming"},
    {"bench", mvm_cmd_bench,
     "prompt and generation speed (llama-bench's pp/tg) over thread counts and budgets"},
    {"calibrate", mvm_cmd_calibrate,
     "measure this machine's costs with a model: a cost file for --cost / MOEVM_COST"},
    {"mkmodel", mvm_cmd_mkmodel, "write a GGUF MoE model with random weights from a preset"},
    {"tokenize", mvm_cmd_tokenize, "a GGUF model's tokenizer on a text, token by token"},
    {"perplexity", mvm_cmd_perplexity, "a model's perplexity on a text (llama-perplexity's)"},
    {"sim", mvm_cmd_sim, "replay a routing trace through the policy modules (modelled time)"},
    {"trace", mvm_cmd_trace, "generate synthetic routing traces, or summarise one"},
    {"train-predictor", mvm_cmd_train_predictor,
     "train the learned expert predictor on a trace with hidden states"},
    {"demo", mvm_cmd_demo, "a short routed workload on an expert space, with statistics"},
    {"options", mvm_cmd_options, "the MOEVM_* options (--markdown: as docs/options.md)"},
};

int mvm_cmd_options(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--markdown") == 0)
        mvm_options_print_markdown(stdout);
    else if (argc > 1) {
        fprintf(stderr, "moevm options: unknown argument '%s' (try --markdown)\n", argv[1]);
        return 2;
    } else
        mvm_options_print_effective(stdout);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: moevm <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`moevm <command> --help` for a command's options; tuning through MOEVM_* "
               "variables (`moevm options`).\n");
}

/* A command's output that did not reach its file (a full disk, /dev/full) is a failure, or
 * a script would take a missing result for a success. */
static int flush_output(const char *cmd, int rc)
{
    errno = 0;
    int failed = fflush(stdout) != 0;
    if (!failed && !ferror(stdout))
        return rc;
    fprintf(stderr, "moevm %s: writing standard output failed%s%s\n", cmd, errno ? ": " : "",
            errno ? strerror(errno) : "");
    return rc ? rc : 1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("moevm %s\n", mvm_version());
        return 0;
    }
    /* The CLI reads every layer's options, the interposer's only to list them. */
    mvm_options_register(&mvm_engine_options);
    mvm_options_register(&mvm_policy_options);
    mvm_options_register(&mvm_interpose_options);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        /* Options are validated up front, so a typo fails here with its name rather than
         * deep inside a run. */
        if (mvm_options_check() != MVM_OK)
            return mvm_cli_error(commands[i].name, "environment");
        return flush_output(commands[i].name, commands[i].run(argc - 1, argv + 1));
    }
    fprintf(stderr, "moevm: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
