/*
 * What is certain of a JSON value still being written: the text cJSON_PrintUnformatted
 * prints for the whole value begins with it, whatever the rest turns out to be. A stream
 * sends a tool call's arguments this way, piece by piece, as llama.cpp's server does (it
 * "heals" a partial JSON text and cuts the print at a marker; the same idea without a
 * marker that could collide with the text).
 *
 * The certain part ends at the last point where the text, closed by what it still owes
 * (a string's quote, the open containers' brackets), prints as a prefix of every
 * completion's print: after an opening bracket, after a whole member value or element, or
 * inside a value string after a whole character (not a key: a member is printed from its
 * key on only once its value begins to be certain). A number is certain once something
 * follows it, a literal once it is spelt out; an escape once whole (a high surrogate with
 * its low one), a UTF-8 character once all its bytes are in.
 */
#ifndef MVM_ENGINE_CHAT_JSON_PREFIX_H
#define MVM_ENGINE_CHAT_JSON_PREFIX_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* text[0..n) (leading whitespace allowed) as the beginning of one JSON value:
 *   1  it holds the whole value: *printed its cJSON_PrintUnformatted text, *end the byte
 *      after it (what follows is not read);
 *   0  a beginning only: *printed the certain part's print (malloc'd), or NULL when nothing
 *      is certain yet (a scalar, or not even the first bracket);
 *  -1  it cannot begin a JSON value, or out of memory (*printed NULL).
 * Containers deeper than MVM_JSON_PREFIX_DEPTH say nothing beyond their opening until the
 * whole value is in. */
enum { MVM_JSON_PREFIX_DEPTH = 64 };
int mvm_json_prefix(const char *text, size_t n, char **printed, size_t *end);

/* The same reading as a tree, for a caller that wants a part of the value: *tree the
 * certain part closed (the whole value when 1; NULL when nothing is certain or on -1),
 * *owed how many characters its print ends with that the text has not written (the
 * closers: a quote, then one bracket for each open container, innermost first). */
int mvm_json_heal(const char *text, size_t n, cJSON **tree, size_t *owed, size_t *end);

#endif
