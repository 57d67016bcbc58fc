/* Live-handle set: open addressing with linear probing and backward-shift deletion. */
#include "vmm/registry.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const void **slots;
static size_t capacity, count; /* capacity is a power of two */

static size_t slot_of(const void *p)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (capacity - 1);
}

static size_t find(const void *p)
{
    size_t i = slot_of(p);
    while (slots[i] && slots[i] != p)
        i = (i + 1) & (capacity - 1);
    return i;
}

static bool grow(void)
{
    size_t old_cap = capacity;
    const void **old = slots;
    size_t cap = old_cap ? old_cap * 2 : 64;
    const void **fresh = calloc(cap, sizeof *fresh);
    if (!fresh)
        return false;
    slots = fresh;
    capacity = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i])
            slots[find(old[i])] = old[i];
    free(old);
    return true;
}

bool mvm_registry_add(const void *handle)
{
    pthread_mutex_lock(&lock);
    bool ok = (count + 1) * 2 <= capacity || grow();
    if (ok) {
        size_t i = find(handle);
        if (!slots[i]) {
            slots[i] = handle;
            count++;
        }
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

bool mvm_registry_remove(const void *handle)
{
    pthread_mutex_lock(&lock);
    bool found = capacity && slots[find(handle)] == handle;
    if (found) {
        size_t i = find(handle);
        slots[i] = NULL;
        count--;
        /* Shift later members of the probe chain back so lookups stay correct. */
        for (size_t j = (i + 1) & (capacity - 1); slots[j]; j = (j + 1) & (capacity - 1)) {
            size_t home = slot_of(slots[j]);
            bool between = i <= j ? (home <= i || home > j) : (home <= i && home > j);
            if (between) {
                slots[i] = slots[j];
                slots[j] = NULL;
                i = j;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

bool mvm_registry_contains(const void *handle)
{
    pthread_mutex_lock(&lock);
    bool found = capacity && slots[find(handle)] == handle;
    pthread_mutex_unlock(&lock);
    return found;
}
