/* `moevm tokenize`: a GGUF file's tokenizer on a text, token by token (llama.cpp's
 * llama-tokenize), to compare with the model's own tokenizer or to feed `moevm run
 * --tokens`. Only the vocabulary is read: the weights are not loaded. Pieces are printed
 * quoted with C escapes, control tokens (which stand for no bytes) by their names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tools/cli.h"
#include "vmm/error.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moevm tokenize -m MODEL.gguf (-p TEXT | -f FILE) [--ids] [--no-bos]\n"
            "  -m, --model FILE   a GGUF model (or its first split part)\n"
            "  -p, --prompt TEXT  the text to tokenize\n"
            "  -f, --file FILE    read the text from FILE ('-': standard input)\n"
            "  --ids              print only the ids, comma-separated (moevm run --tokens)\n"
            "  --no-bos           leave out the BOS/EOS the vocabulary adds\n"
            "Prints one line per token: its id and the bytes it stands for, quoted with C\n"
            "escapes (a control token such as BOS: its name, unquoted).\n");
}

/* A piece in quotes: whole UTF-8 characters as they are, anything else (control bytes, a
 * byte of a character the next token finishes) as a C escape. */
static void print_quoted(const char *piece, size_t n)
{
    const unsigned char *s = (const unsigned char *)piece;
    putchar('\'');
    for (size_t i = 0; i < n;) {
        size_t len = s[i] >= 0x80 ? mvm_cli_utf8_char(s + i, n - i) : 1;
        if (len > 1)
            fwrite(s + i, 1, len, stdout);
        else if (s[i] == '\n')
            fputs("\\n", stdout);
        else if (s[i] == '\t')
            fputs("\\t", stdout);
        else if (s[i] == '\'' || s[i] == '\\')
            printf("\\%c", s[i]);
        else if (s[i] < 0x20 || s[i] >= 0x7F)
            printf("\\x%02X", s[i]);
        else
            putchar(s[i]);
        i += len ? len : 1;
    }
    putchar('\'');
}

static int tokenize(const char *model, const char *text, size_t len, int ids_only, int special)
{
    mvm_gguf *g;
    mvm_tokenizer *t = NULL;
    if (mvm_gguf_open(model, &g) != MVM_OK)
        return mvm_cli_error("tokenize", NULL);
    mvm_status st = mvm_tokenizer_load(g, &t);
    mvm_gguf_close(g);
    if (st != MVM_OK)
        return mvm_cli_error("tokenize", model);
    size_t n = 0, cap = len + 8;
    int32_t *ids = malloc(cap * sizeof *ids);
    st = ids ? mvm_tokenizer_encode(t, text, len, special, ids, cap, &n) : MVM_ERR_NOMEM;
    if (st == MVM_ERR_RANGE) { /* a vocabulary that needs more tokens than bytes */
        int32_t *bigger = realloc(ids, n * sizeof *ids);
        st = bigger ? mvm_tokenizer_encode(t, text, len, special, bigger, n, &n) : MVM_ERR_NOMEM;
        ids = bigger ? bigger : ids;
    }
    if (st == MVM_ERR_NOMEM)
        (void)mvm_fail(st, "no memory for the tokens of %zu bytes", len);
    if (st != MVM_OK) {
        free(ids);
        mvm_tokenizer_free(t);
        return mvm_cli_error("tokenize", NULL);
    }
    char piece[256];
    for (size_t i = 0; i < n; i++) {
        if (ids_only) {
            printf(i ? ",%d" : "%d", ids[i]);
            continue;
        }
        size_t pn = mvm_tokenizer_piece(t, ids[i], piece, sizeof piece);
        printf("%6d ", ids[i]);
        if (pn == 0) /* a control token (BOS): no bytes, so its name */
            fputs(mvm_tokenizer_text(t, ids[i]), stdout);
        else
            print_quoted(piece, pn < sizeof piece ? pn : sizeof piece);
        putchar('\n');
    }
    if (ids_only)
        putchar('\n');
    else
        fprintf(stderr, "%zu tokens for %zu bytes\n", n, len);
    free(ids);
    mvm_tokenizer_free(t);
    return 0;
}

int mvm_cmd_tokenize(int argc, char **argv)
{
    enum { O_MODEL = 1, O_PROMPT, O_FILE, O_IDS, O_NO_BOS };
    static const mvm_cli_opt opts[] = {
        {"model", 'm', 1, O_MODEL}, {"prompt", 'p', 1, O_PROMPT}, {"file", 'f', 1, O_FILE},
        {"ids", 0, 0, O_IDS},       {"no-bos", 0, 0, O_NO_BOS},   {0}};
    const char *model = NULL, *prompt = NULL, *file = NULL;
    int ids_only = 0, special = 1, next;
    mvm_cli_iter it = {.cmd = "tokenize", .usage = usage, .opts = opts, .argc = argc,
                       .argv = argv};
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION) {
        switch (it.id) {
        case O_MODEL: model = it.value; break;
        case O_PROMPT: prompt = it.value; break;
        case O_FILE: file = it.value; break;
        case O_IDS: ids_only = 1; break;
        case O_NO_BOS: special = 0; break;
        }
    }
    if (next != MVM_CLI_END)
        return next;
    if (!model || !prompt == !file) {
        fprintf(stderr, "moevm tokenize: needs -m MODEL and one of -p TEXT or -f FILE "
                        "(see --help)\n");
        return 2;
    }
    size_t len = prompt ? strlen(prompt) : 0;
    char *text = prompt ? NULL : mvm_cli_read_text("tokenize", file, &len);
    if (file && !text)
        return 1;
    int rc = tokenize(model, prompt ? prompt : text, len, ids_only, special);
    free(text);
    return rc;
}
