#!/usr/bin/env python3
"""The bytes of weights one decode token reads from a GGUF MoE model, for the bandwidth bound
of issue "Kernels at the hardware's limits" (bw_frac = tok/s x these bytes / the GPU's
measured read rate):

    python3 bench/gpu/active_bytes.py MODEL.gguf      -> one integer, bytes

Every tensor is read whole, except the token embeddings (one row a token: left out) and the
routed experts' tensors (names ending in _exps), of which a token reads expert_used_count of
expert_count experts in each layer. Shared experts (_shexp) and the output head are dense."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "ref"))
import gguf_read  # noqa: E402


def active_bytes(path):
    f = gguf_read.GGUFFile(path)
    arch = f.metadata["general.architecture"]
    used = f.metadata[f"{arch}.expert_used_count"]
    experts = f.metadata[f"{arch}.expert_count"]
    total = 0
    for t in f.tensors.values():
        if t.name == "token_embd.weight":
            continue
        n = t.nbytes()
        if ".ffn_" in t.name and t.name.split(".")[-2].endswith("_exps"):
            n = n * used // experts
        total += n
    return total


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: active_bytes.py MODEL.gguf")
    try:
        print(active_bytes(sys.argv[1]))
    except (OSError, KeyError, gguf_read.GGUFError) as e:
        sys.exit(f"active_bytes.py: {sys.argv[1]}: {e}")
