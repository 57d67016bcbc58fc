/*
 * The string table (token texts, trained symbols) and the pair map (merges, the trainer's
 * pair counts): open addressing with linear probing, kept at most half full, so lookups
 * during encoding cost a hash and about one comparison.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer_impl.h"
#include "vmm/error.h"

/* FNV-1a: token texts are short, and this needs no alignment. */
static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

static void index_insert(uint32_t *slot, size_t mask, uint64_t h, uint32_t id)
{
    size_t i = (size_t)h & mask;
    while (slot[i])
        i = (i + 1) & mask;
    slot[i] = id + 1;
}

static mvm_status grow_index(tok_strtab *t)
{
    size_t slots = t->mask ? (t->mask + 1) * 2 : 64;
    uint32_t *slot = calloc(slots, sizeof *slot);
    if (!slot)
        return mvm_fail(MVM_ERR_NOMEM, "string table: no memory for %zu index slots", slots);
    for (size_t i = 0; t->mask && i <= t->mask; i++) {
        uint32_t id = t->slot[i];
        if (id)
            index_insert(slot, slots - 1, hash_bytes(tok_strtab_str(t, id - 1), t->len[id - 1]),
                         id - 1);
    }
    free(t->slot);
    t->slot = slot;
    t->mask = slots - 1;
    return MVM_OK;
}

static mvm_status reserve(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return MVM_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c = c > SIZE_MAX / 2 / elem ? need : c * 2;
    if (c > SIZE_MAX / elem)
        return mvm_fail(MVM_ERR_NOMEM, "string table: %zu elements are too many", need);
    void *q = realloc(*p, c * elem);
    if (!q)
        return mvm_fail(MVM_ERR_NOMEM, "string table: no memory for %zu elements", c);
    *p = q;
    *cap = c;
    return MVM_OK;
}

mvm_status tok_strtab_push(tok_strtab *t, const char *s, size_t n, int index)
{
    if (t->n >= UINT32_MAX - 1 || n >= UINT32_MAX)
        return mvm_fail(MVM_ERR_RANGE, "string table: more than 2^32 strings or bytes");
    if (n >= SIZE_MAX - t->used)
        return mvm_fail(MVM_ERR_NOMEM, "string table: %zu bytes are too many", n);
    size_t cap_n = t->cap_n, cap_len = t->cap_n;
    mvm_status st = reserve((void **)&t->buf, &t->cap, t->used + n + 1, 1);
    if (st == MVM_OK)
        st = reserve((void **)&t->off, &cap_n, t->n + 1u, sizeof *t->off);
    if (st == MVM_OK)
        st = reserve((void **)&t->len, &cap_len, t->n + 1u, sizeof *t->len);
    if (st != MVM_OK)
        return st;
    t->cap_n = (uint32_t)(cap_n < cap_len ? cap_n : cap_len);
    if (index && n > 0 && ((size_t)t->n_indexed + 1) * 2 > (t->mask ? t->mask + 1 : 0)) {
        st = grow_index(t);
        if (st != MVM_OK)
            return st;
    }
    if (n)
        memcpy(t->buf + t->used, s, n);
    t->buf[t->used + n] = 0;
    t->off[t->n] = t->used;
    t->len[t->n] = (uint32_t)n;
    t->used += n + 1;
    if (index && n > 0) {
        index_insert(t->slot, t->mask, hash_bytes(s, n), t->n);
        t->n_indexed++;
    }
    t->n++;
    return MVM_OK;
}

int32_t tok_strtab_find(const tok_strtab *t, const char *s, size_t n)
{
    if (!t->mask || n == 0)
        return -1;
    for (size_t i = (size_t)hash_bytes(s, n) & t->mask;; i = (i + 1) & t->mask) {
        uint32_t id = t->slot[i];
        if (!id)
            return -1;
        if (t->len[id - 1] == n && memcmp(tok_strtab_str(t, id - 1), s, n) == 0)
            return (int32_t)(id - 1);
    }
}

void tok_strtab_free(tok_strtab *t)
{
    free(t->buf);
    free(t->off);
    free(t->len);
    free(t->slot);
    memset(t, 0, sizeof *t);
}

/* splitmix64's finalizer: pair keys differ in few bits. */
static size_t hash_key(uint64_t k)
{
    k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
    k = (k ^ (k >> 27)) * 0x94d049bb133111ebull;
    return (size_t)(k ^ (k >> 31));
}

static mvm_status grow_map(tok_u64map *m)
{
    size_t slots = m->mask ? (m->mask + 1) * 2 : 64;
    uint64_t *key = malloc(slots * sizeof *key);
    uint32_t *val = malloc(slots * sizeof *val);
    if (!key || !val) {
        free(key);
        free(val);
        return mvm_fail(MVM_ERR_NOMEM, "pair map: no memory for %zu slots", slots);
    }
    memset(key, 0xFF, slots * sizeof *key);
    for (size_t i = 0; m->mask && i <= m->mask; i++) {
        if (m->key[i] == UINT64_MAX)
            continue;
        size_t j = hash_key(m->key[i]) & (slots - 1);
        while (key[j] != UINT64_MAX)
            j = (j + 1) & (slots - 1);
        key[j] = m->key[i];
        val[j] = m->val[i];
    }
    free(m->key);
    free(m->val);
    m->key = key;
    m->val = val;
    m->mask = slots - 1;
    return MVM_OK;
}

mvm_status tok_u64map_add(tok_u64map *m, uint64_t key, uint32_t val)
{
    if ((m->n + 1) * 2 > (m->mask ? m->mask + 1 : 0)) {
        mvm_status st = grow_map(m);
        if (st != MVM_OK)
            return st;
    }
    size_t i = hash_key(key) & m->mask;
    while (m->key[i] != UINT64_MAX) {
        if (m->key[i] == key)
            return MVM_OK;
        i = (i + 1) & m->mask;
    }
    m->key[i] = key;
    m->val[i] = val;
    m->n++;
    return MVM_OK;
}

uint32_t *tok_u64map_get(const tok_u64map *m, uint64_t key)
{
    if (!m->mask)
        return NULL;
    for (size_t i = hash_key(key) & m->mask; m->key[i] != UINT64_MAX; i = (i + 1) & m->mask)
        if (m->key[i] == key)
            return &m->val[i];
    return NULL;
}

void tok_u64map_free(tok_u64map *m)
{
    free(m->key);
    free(m->val);
    memset(m, 0, sizeof *m);
}
