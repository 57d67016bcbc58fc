"""The lattice-grid weight types of llama.cpp (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
IQ1_M) dequantized with NumPy, for gguf_read.py: written from ggml's block layouts and its
dequantize_row_iq* formulas, apart from the engine's C (kernels/iqgrid.h). The grids are data
(scripts/gen_iq_grids.py took them from llama.cpp's gguf package); this module reads them from
the file the C includes, kernels/iq_grids.inc, and selftest.py compares the whole decoding with
the gguf package's where that is installed.

Every type's super-block holds 256 elements in 8 chunks c of 32, each of 4 groups l of 8 (IQ3:
8 grid entries k of 4, two a group). Where 7 sign bits are stored for a group of 8, the eighth
makes the count of set bits even (ggml's ksigns_iq2xs)."""

import os
import re

import numpy as np

GGML_IQ2_XXS, GGML_IQ2_XS, GGML_IQ3_XXS, GGML_IQ1_S = 16, 17, 18, 19
GGML_IQ3_S, GGML_IQ2_S, GGML_IQ1_M = 21, 22, 29
# type -> (name, block bytes)
TYPES = {
    GGML_IQ2_XXS: ("IQ2_XXS", 66),  # { f16 d; u16 qs[32]; }
    GGML_IQ2_XS: ("IQ2_XS", 74),    # { f16 d; u16 qs[32]; u8 scales[8]; }
    GGML_IQ2_S: ("IQ2_S", 82),      # { f16 d; u8 qs[64]; u8 qh[8]; u8 scales[8]; }
    GGML_IQ3_XXS: ("IQ3_XXS", 98),  # { f16 d; u8 qs[96]; }
    GGML_IQ3_S: ("IQ3_S", 110),     # { f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]; }
    GGML_IQ1_S: ("IQ1_S", 50),      # { f16 d; u8 qs[32]; u16 qh[8]; }
    GGML_IQ1_M: ("IQ1_M", 56),      # { u8 qs[32]; u8 qh[16]; u16 scales[4]; }
}

_INC = os.path.join(os.path.dirname(__file__), "..", "..", "kernels", "iq_grids.inc")
_GRIDS = None


def grids():
    """{name: (entries, values) int array} of kernels/iq_grids.inc: entry i's values are the
    bytes of its little-endian word, signed."""
    global _GRIDS
    if _GRIDS is None:
        text = open(_INC).read()
        _GRIDS = {}
        for ctype, name, n, body in re.findall(
                r"MVM_K_GRID\((\w+), (\w+), (\d+)\) = \{([^}]*)\}", text):
            words = np.array([int(w, 16) for w in re.findall(r"0x[0-9a-f]+", body)],
                             dtype="<u8" if ctype == "uint64_t" else "<u4")
            assert len(words) == int(n), name
            _GRIDS[name] = words.view(np.int8).reshape(int(n), -1).astype(np.int64)
    return _GRIDS


def _f16(b):
    return b.copy().view("<f2").astype(np.float64)


def _bits(v, n=8):
    """The low n bits of v, a new last axis, bit 0 first."""
    return (v[..., None] >> np.arange(n)) & 1


def _ksigns(s7):
    """The 8 sign bits (new last axis) that 7 stored bits stand for."""
    b7 = _bits(s7, 7)
    return np.concatenate([b7, b7.sum(axis=-1, keepdims=True) & 1], axis=-1)


def _signed(g, bits):
    return g * (1 - 2 * bits)


def dequantize(ggml_type, raw, n):
    """n elements of a lattice-grid type from their bytes, as float64."""
    nb = n // 256
    blocks = raw.reshape(nb, TYPES[ggml_type][1])
    G = grids()
    l4 = np.arange(4)
    if ggml_type == GGML_IQ1_M:
        sc = blocks[:, 48:56].copy().view("<u2").astype(np.int64)               # (nb, 4)
        d = ((sc[:, 0] >> 12) | (sc[:, 1] >> 12) << 4 | (sc[:, 2] >> 12) << 8 |
             (sc[:, 3] >> 12) << 12).astype("<u2").view("<f2").astype(np.float64)
        ls16 = ((sc[:, :, None] >> (3 * l4)) & 7).reshape(nb, 8, 2)             # [c, half]
        qh = blocks[:, 32:48].reshape(nb, 8, 2).astype(np.int64)
        h = ((qh[:, :, :, None] >> (4 * np.arange(2))) & 15).reshape(nb, 8, 4)  # [c, l]
        idx = blocks[:, 0:32].reshape(nb, 8, 4).astype(np.int64) | (h & 7) << 8
        delta = np.where(h & 8, -0.125, 0.125)
        ls = ls16[:, :, l4 // 2]                                                # (nb, 8, 4)
        y = (d[:, None, None] * (2 * ls + 1))[..., None] * (G["iq1s"][idx] + delta[..., None])
        return y.reshape(n)
    d = _f16(blocks[:, 0:2])[:, :, None, None]                                  # (nb, 1, 1, 1)
    if ggml_type in (GGML_IQ2_XXS, GGML_IQ3_XXS):
        if ggml_type == GGML_IQ2_XXS:
            q = blocks[:, 2:66].reshape(nb, 8, 8)
            idx, a = q[:, :, 0:4], q[:, :, 4:8].copy().view("<u4")[:, :, 0]
            g = G["iq2xxs"][idx.astype(np.int64)]                               # (nb, 8, 4, 8)
        else:
            a = blocks[:, 66:98].copy().view("<u4")                             # (nb, 8)
            g = G["iq3xxs"][blocks[:, 2:66].astype(np.int64)].reshape(nb, 8, 4, 8)
        a = a.astype(np.int64)
        signs = _ksigns((a[:, :, None] >> (7 * l4)) & 127)                      # (nb, 8, 4, 8)
        ls = (a >> 28)[:, :, None, None]
        step = 0.25 if ggml_type == GGML_IQ2_XXS else 0.5
        return (d * (ls + 0.5) * step * _signed(g, signs)).reshape(n)
    if ggml_type in (GGML_IQ2_XS, GGML_IQ2_S):
        if ggml_type == GGML_IQ2_XS:
            qs = blocks[:, 2:66].copy().view("<u2").reshape(nb, 8, 4).astype(np.int64)
            g, signs = G["iq2xs"][qs & 511], _ksigns(qs >> 9)
            scales = blocks[:, 66:74]
        else:
            qh = blocks[:, 66:74].astype(np.int64)[:, :, None]
            idx = blocks[:, 2:34].reshape(nb, 8, 4).astype(np.int64) | ((qh >> (2 * l4)) & 3) << 8
            g, signs = G["iq2s"][idx], _bits(blocks[:, 34:66].reshape(nb, 8, 4).astype(np.int64))
            scales = blocks[:, 74:82]
        scales = scales.astype(np.int64)
        ls = np.stack([scales & 15, scales & 15, scales >> 4, scales >> 4], axis=2)[..., None]
        return (d * (ls + 0.5) * 0.25 * _signed(g, signs)).reshape(n)
    if ggml_type == GGML_IQ3_S:
        qh = blocks[:, 66:74].astype(np.int64)[:, :, None]
        idx = blocks[:, 2:66].reshape(nb, 8, 8).astype(np.int64) | ((qh >> np.arange(8)) & 1) << 8
        g = G["iq3s"][idx].reshape(nb, 8, 4, 8)
        signs = _bits(blocks[:, 74:106].reshape(nb, 8, 4).astype(np.int64))
        sc = blocks[:, 106:110].astype(np.int64)
        c = np.arange(8)
        ls = ((sc[:, c // 2] >> (4 * (c % 2))) & 15)[:, :, None, None]
        return (d * (2 * ls + 1) * _signed(g, signs)).reshape(n)
    if ggml_type == GGML_IQ1_S:
        qh = blocks[:, 34:50].copy().view("<u2").astype(np.int64)               # (nb, 8)
        qs = blocks[:, 2:34].reshape(nb, 8, 4).astype(np.int64)
        idx = qs | ((qh[:, :, None] >> (3 * l4)) & 7) << 8
        ls = ((qh >> 12) & 7)[:, :, None, None]
        delta = np.where(qh & 0x8000, -0.125, 0.125)[:, :, None, None]
        return (d * (2 * ls + 1) * (G["iq1s"][idx] + delta)).reshape(n)
    raise ValueError(f"ggml type {ggml_type} is not a lattice-grid type")
