/*
 * The sampler (declared in include/moevm/engine.h, which says what it does): an engine
 * API that the commands, the server and embedding applications share.
 */
#ifndef MVM_ENGINE_FORWARD_SAMPLER_H
#define MVM_ENGINE_FORWARD_SAMPLER_H

#include "moevm/engine.h"

#endif
