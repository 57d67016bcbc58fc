/*
 * Rendering: the JSON variables become values (only those the template names), the
 * globals fill the names the variables leave, and the template's statements write the
 * output. Everything a render made is released before it returns, the namespaces that
 * hold each other included.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja_impl.h"

/* A JSON value as a template value: numbers are ints when integral (cJSON keeps no text to
 * tell 1 from 1.0) and within 2^53, floats otherwise. */
static mvm_status from_json(jx *st, const cJSON *j, jv *out)
{
    if (cJSON_IsString(j))
        return jx_strv(st, j->valuestring, strlen(j->valuestring), out);
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        *out = d == floor(d) && fabs(d) <= 9007199254740992.0 ? jv_int((int64_t)d) : jv_float(d);
        return MVM_OK;
    }
    if (cJSON_IsBool(j)) {
        *out = jv_bool(cJSON_IsTrue(j));
        return MVM_OK;
    }
    if (cJSON_IsArray(j)) {
        jlist *l = jlist_new(JL_LIST, (size_t)cJSON_GetArraySize(j));
        if (!l)
            return jx_nomem();
        *out = jv_of_list(l);
        for (const cJSON *c = j->child; c; c = c->next) {
            jv v;
            mvm_status rc = from_json(st, c, &v);
            if (rc == MVM_OK)
                rc = jlist_push(st, l, v);
            if (rc != MVM_OK) {
                jv_drop(*out);
                *out = jv_none();
                return rc;
            }
        }
        return MVM_OK;
    }
    if (cJSON_IsObject(j)) {
        jdict *d = jdict_new();
        if (!d)
            return jx_nomem();
        *out = jv_of_dict(d);
        for (const cJSON *c = j->child; c; c = c->next) {
            jv k, v;
            const char *key = c->string ? c->string : "";
            mvm_status rc = jx_strv(st, key, strlen(key), &k);
            if (rc == MVM_OK) {
                rc = from_json(st, c, &v);
                if (rc == MVM_OK)
                    rc = jdict_set(st, d, k, v);
                else
                    jv_drop(k);
            }
            if (rc != MVM_OK) {
                jv_drop(*out);
                *out = jv_none();
                return rc;
            }
        }
        return MVM_OK;
    }
    *out = jv_none();
    return MVM_OK;
}

/* What each of the template's names is before the template sets it: the variable of that
 * name, else the global. */
static mvm_status context(jx *st, const cJSON *vars)
{
    static const struct { const char *name; int id; } globals[] = {
        {"range", JF_RANGE}, {"namespace", JF_NAMESPACE}, {"dict", JF_DICT},
        {"raise_exception", JF_RAISE}, {"strftime_now", JF_STRFTIME}};
    const mvm_jinja *t = st->t;
    for (int32_t i = 0; i < t->nsym; i++) {
        const cJSON *j = vars ? cJSON_GetObjectItemCaseSensitive(vars, t->syms[i]) : NULL;
        mvm_status rc = MVM_OK;
        if (j) {
            rc = from_json(st, j, &st->ctx[i]);
        } else {
            for (size_t g = 0; g < sizeof globals / sizeof *globals; g++)
                if (strcmp(t->syms[i], globals[g].name) == 0)
                    rc = jx_funcv(globals[g].id, jv_none(), &st->ctx[i]);
        }
        if (rc != MVM_OK)
            return rc;
    }
    return MVM_OK;
}

mvm_status mvm_jinja_render(const mvm_jinja *t, const cJSON *vars, char **out, size_t *out_len)
{
    if (!t || !out)
        return mvm_fail(MVM_ERR_INVALID, "mvm_jinja_render: NULL argument");
    *out = NULL;
    if (vars && !cJSON_IsObject(vars))
        return mvm_fail(MVM_ERR_INVALID, "mvm_jinja_render: the variables are not a JSON object");
    jx st = {.t = t, .line = 1};
    jframe root = {0};
    jbuf b = {0};
    st.root = st.cur = &root;
    st.out = &b;
    st.ctx = calloc(t->nsym ? (size_t)t->nsym : 1, sizeof *st.ctx);
    mvm_status rc = st.ctx ? context(&st, vars) : jx_nomem();
    if (rc == MVM_OK)
        rc = jbuf_put(&st, &b, "", 0);
    int flow = JX_NEXT;
    if (rc == MVM_OK)
        rc = mvm_jinja_exec(&st, t->root, &flow);
    for (size_t i = 0; i < root.n; i++)
        jv_drop(root.val[i]);
    free(root.sym), free(root.val);
    for (int32_t i = 0; st.ctx && i < t->nsym; i++)
        jv_drop(st.ctx[i]);
    free(st.ctx);
    mvm_jinja_ns_release_all(&st);
    if (rc != MVM_OK) {
        free(b.p);
        return rc;
    }
    *out = b.p;
    if (out_len)
        *out_len = b.n;
    return MVM_OK;
}
