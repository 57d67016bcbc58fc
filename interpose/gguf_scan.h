/*
 * The fused expert tensors of a GGUF file, as the interposer needs them: where each one's
 * data lies in the file and how many experts it holds. A scan of the header only (keys are
 * skipped, tensor data never read), with plain stdio, so that the preload library needs
 * nothing of the engine (interpose/ and engine/ are siblings; engine/gguf/ is the full
 * reader, and tests/test_gguf_scan.c checks this scan against it).
 */
#ifndef MVM_INTERPOSE_GGUF_SCAN_H
#define MVM_INTERPOSE_GGUF_SCAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A fused expert tensor: a name with "_exps" (llama.cpp's blk.N.ffn_{gate,up,down,gate_up}
 * _exps.weight) and three dimensions, the experts the outermost. Its data starts at file
 * offset `offset`; `room` bytes follow before the next tensor's data or the end of the
 * file (its size plus the alignment padding). `used` is the experts a token routes to, the
 * file's `<arch>.expert_used_count` (a u32; 0 when the file has none). */
/* ggml's largest general.alignment: the padding after a tensor's bytes is shorter. */
#define MVM_GGUF_MAX_ALIGNMENT (1u << 20)

typedef struct mvm_gguf_fused {
    uint64_t offset, room;
    uint32_t experts, used;
} mvm_gguf_fused;

/* Scans the GGUF file at `path` (versions 2 and 3): *out (malloc'd, sorted by offset; NULL
 * when there are none) and *n. Returns 0, or -1 with a one-line reason in err when the path
 * is no regular file, or the file no GGUF or malformed (what ggml's reader would refuse in
 * the parts scanned). */
int mvm_gguf_scan_fused(const char *path, mvm_gguf_fused **out, uint32_t *n, char *err,
                        size_t cap);
/* The same over an open stream of `size` bytes from its start (the fuzzer's fmemopen). */
int mvm_gguf_scan_fused_stream(FILE *f, uint64_t size, mvm_gguf_fused **out, uint32_t *n,
                               char *err, size_t cap);

#endif
