/*
 * jinja_render TEMPLATE_FILE VARS.json: the template rendered with the variables
 * (engine/chat/jinja.h) to stdout, exit 0; or the error to stderr, exit 1.
 * tests/ref/check_jinja.py compares it with Python's jinja2.
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine/chat/jinja.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += k;
        if (n == cap) {
            char *b = realloc(buf, 2 * cap + 1);
            if (!b)
                free(buf);
            buf = b;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    *len = n;
    return buf;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s TEMPLATE_FILE VARS.json\n", argv[0]);
        return 2;
    }
    size_t tlen, vlen;
    char *src = slurp(argv[1], &tlen), *json = slurp(argv[2], &vlen);
    if (!src || !json) {
        fprintf(stderr, "jinja_render: cannot read %s\n", !src ? argv[1] : argv[2]);
        return 2;
    }
    cJSON *vars = cJSON_ParseWithLength(json, vlen);
    if (!vars) {
        fprintf(stderr, "jinja_render: %s is not JSON\n", argv[2]);
        return 2;
    }
    mvm_jinja *t = NULL;
    char *out = NULL;
    size_t len = 0;
    mvm_status rc = mvm_jinja_parse(src, tlen, &t);
    if (rc == MVM_OK)
        rc = mvm_jinja_render(t, vars, &out, &len);
    if (rc != MVM_OK)
        fprintf(stderr, "%s: %s\n", mvm_status_name(rc), mvm_last_error());
    else
        fwrite(out, 1, len, stdout);
    free(out);
    mvm_jinja_free(t);
    cJSON_Delete(vars);
    free(src), free(json);
    return rc == MVM_OK ? 0 : 1;
}
