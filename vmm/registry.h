/*
 * The set of live handles (spaces and moves), so that destroying a space twice or releasing
 * a move twice is an MVM_ERR_INVALID instead of a use-after-free. A handle is added when
 * created and removed exactly once; the removal that finds it absent is the double free.
 */
#ifndef MVM_VMM_REGISTRY_H
#define MVM_VMM_REGISTRY_H

#include <stdbool.h>

/* Returns false if out of memory. */
bool mvm_registry_add(const void *handle);
/* Returns true if the handle was live (and now is not). */
bool mvm_registry_remove(const void *handle);
bool mvm_registry_contains(const void *handle);

#endif
