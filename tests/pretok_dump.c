/*
 * The pre-tokenizers' cuts and the character classes, for tests/ref/check_pretok.py to
 * compare with Python's re running the regexes themselves:
 *
 *   pretok_dump PRE FILE    FILE holds records "<length>\n<bytes>"; prints, per record, one
 *                           line of the pieces' lengths in bytes; PRE is a tokenizer.ggml.pre
 *                           name, mapped as loading maps it
 *   pretok_dump --classes   prints the class (enum tok_class, a digit) of every code point
 *                           from U+0000 to U+10FFFF, one character each
 *   pretok_dump --cases     the same for a letter's case (1 Lu/Lt, 2 Ll, 3 Lm/Lo, 0 not a
 *                           letter), plus 4 for the Han script
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer_impl.h"

static int classes(void)
{
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++)
        putchar('0' + tok_cp_class(cp));
    return 0;
}

static int cut(enum tok_pre pre, FILE *f)
{
    tok_pieces p = {0};
    uint8_t *buf = NULL;
    size_t len;
    int rc = 0;
    while (fscanf(f, "%zu", &len) == 1 && fgetc(f) == '\n') {
        uint8_t *grown = realloc(buf, len + 1);
        if (!grown || fread(grown, 1, len, f) != len) {
            fprintf(stderr, "pretok_dump: short record of %zu bytes\n", len);
            buf = grown ? grown : buf;
            rc = 1;
            break;
        }
        buf = grown;
        if (tok_pretok_split(pre, buf, len, &p) != MVM_OK) {
            rc = 1;
            break;
        }
        for (size_t i = 0, start = 0; i < p.n; start = p.end[i++])
            printf(i ? " %zu" : "%zu", p.end[i] - start);
        putchar('\n');
    }
    tok_pieces_free(&p);
    free(buf);
    return rc;
}

static int cases(void)
{
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        int c = tok_cp_class(cp) == TOK_LETTER ? 1 + (int)tok_letter_case(cp) : 0;
        putchar('0' + c + 4 * tok_cp_is_han(cp));
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--classes") == 0)
        return classes();
    if (argc == 2 && strcmp(argv[1], "--cases") == 0)
        return cases();
    for (size_t i = 0; argc == 3 && i < tok_pre_names_n; i++) {
        if (strcmp(argv[1], tok_pre_names[i].name) != 0)
            continue;
        FILE *f = fopen(argv[2], "rb");
        if (!f) {
            perror(argv[2]);
            return 1;
        }
        int rc = cut(tok_pre_names[i].pre, f);
        fclose(f);
        return rc;
    }
    fprintf(stderr, "usage: pretok_dump PRE FILE | pretok_dump --classes | --cases\n");
    return 2;
}
