"""A minimal GGUF v2/v3 reader in pure Python + NumPy, the test reference's own.

Written from the public GGUF specification (gguf.md in ggml's docs), independently of the
engine's C reader, so that a misreading in one is not silently shared by the other.

File layout (all little-endian):
    u32 magic "GGUF", u32 version (2 or 3; v1 used 32-bit counts and is not read),
    u64 n_tensors, u64 n_kv,
    n_kv   x { string key, u32 value_type, value }
    n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
    padding to `general.alignment` (default 32), then the data section; each tensor's
    offset is relative to the data section's start and a multiple of the alignment.
A string is { u64 length, UTF-8 bytes without a terminator }; an array is
{ u32 element_type, u64 count, elements } and may nest.

Tensors come back dequantized to float64 in NumPy order: ggml's ne[0] is the innermost
(contiguous) dimension, so ne = [a, b] reads as shape (b, a) and ne = [a, b, c] as (c, b, a).
"""

import math
import struct

import numpy as np

import iq_dequant

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types -> struct format of a scalar (STRING and ARRAY are special).
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL = range(8)
T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(8, 13)
_SCALAR_DTYPE = {
    T_UINT8: "<u1", T_INT8: "<i1", T_UINT16: "<u2", T_INT16: "<i2",
    T_UINT32: "<u4", T_INT32: "<i4", T_FLOAT32: "<f4", T_BOOL: "<u1",
    T_UINT64: "<u8", T_INT64: "<i8", T_FLOAT64: "<f8",
}

# ggml tensor types this reader dequantizes: type -> (name, elements per block, block bytes).
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_BF16 = 0, 1, 2, 8, 30
GGML_Q4_1, GGML_Q5_0, GGML_Q5_1, GGML_IQ4_NL, GGML_MXFP4 = 3, 6, 7, 20, 39
GGML_Q2_K, GGML_Q3_K = 10, 11
GGML_Q4_K, GGML_Q5_K, GGML_Q6_K = 12, 13, 14
GGML_IQ4_XS = 23
GGML_TYPES = {
    GGML_F32: ("F32", 1, 4),
    GGML_F16: ("F16", 1, 2),
    GGML_BF16: ("BF16", 1, 2),
    GGML_Q8_0: ("Q8_0", 32, 34),  # { f16 d; int8 qs[32]; }
    GGML_Q4_0: ("Q4_0", 32, 18),  # { f16 d; uint8 qs[16]; }
    GGML_Q4_1: ("Q4_1", 32, 20),  # { f16 d, m; uint8 qs[16]; }
    GGML_Q5_0: ("Q5_0", 32, 22),  # { f16 d; uint8 qh[4]; uint8 qs[16]; }
    GGML_Q5_1: ("Q5_1", 32, 24),  # { f16 d, m; uint8 qh[4]; uint8 qs[16]; }
    GGML_IQ4_NL: ("IQ4_NL", 32, 18),  # { f16 d; uint8 qs[16]; } indexing IQ4_NL_VALUES
    GGML_MXFP4: ("MXFP4", 32, 17),    # { u8 e; uint8 qs[16]; } indexing MXFP4_VALUES
    # The K-quants' super-blocks (ggml-common.h):
    GGML_Q2_K: ("Q2_K", 256, 84),   # { u8 scales[16]; u8 qs[64]; f16 d, dmin; }
    GGML_Q3_K: ("Q3_K", 256, 110),  # { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; }
    GGML_Q4_K: ("Q4_K", 256, 144),  # { f16 d, dmin; u8 scales[12]; u8 qs[128]; }
    GGML_Q5_K: ("Q5_K", 256, 176),  # { f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }
    GGML_Q6_K: ("Q6_K", 256, 210),  # { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }
    GGML_IQ4_XS: ("IQ4_XS", 256, 136),  # { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; }
    # and the lattice-grid types, iq_dequant.py's
    **{t: (name, 256, size) for t, (name, size) in iq_dequant.TYPES.items()},
}
# The types whose products take Q8_K activations (ggml's vec_dot_type): the K-quants, IQ4_XS
# and the lattice-grid types.
Q8_K_ACT = (GGML_Q2_K, GGML_Q3_K, GGML_Q4_K, GGML_Q5_K, GGML_Q6_K, GGML_IQ4_XS,
            *iq_dequant.TYPES)
# ggml-common.h's kvalues_iq4nl: IQ4_NL's quant values, indexed by the nibble.
IQ4_NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10,
                          1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float64)
# ggml-common.h's kvalues_mxfp4: the E2M1 values doubled, indexed by the nibble (bit 3 the
# sign); hence MXFP4's scale is half its E8M0 exponent's, 2^(e - 128).
MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12,
                         0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float64)
# The 32-element types with 4- or 5-bit quants (IQ4_NL and MXFP4 aside).
Q45 = (GGML_Q4_0, GGML_Q4_1, GGML_Q5_0, GGML_Q5_1)


class GGUFError(Exception):
    pass


class _Cursor:
    """Sequential little-endian reads from a byte buffer, with bounds checks."""

    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError(f"truncated: need {n} bytes at offset {self.pos}, "
                            f"file has {len(self.buf)}")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def scalar(self, vtype):
        dt = np.dtype(_SCALAR_DTYPE[vtype])
        v = np.frombuffer(self.take(dt.itemsize), dt)[0]
        return bool(v) if vtype == T_BOOL else v.item()

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        # surrogateescape: a vocabulary entry that is not valid UTF-8 still round-trips.
        return bytes(self.take(self.u64())).decode("utf-8", "surrogateescape")

    def value(self, vtype):
        if vtype == T_STRING:
            return self.string()
        if vtype == T_ARRAY:
            etype, count = self.u32(), self.u64()
            if etype in _SCALAR_DTYPE:
                # Numeric arrays (token scores, types) in one vectorised read.
                dt = np.dtype(_SCALAR_DTYPE[etype])
                if count > len(self.buf):  # before multiplying: a corrupt count
                    raise GGUFError(f"array of {count} elements exceeds the file")
                arr = np.frombuffer(self.take(count * dt.itemsize), dt)
                return [bool(x) for x in arr] if etype == T_BOOL else arr.tolist()
            if etype in (T_STRING, T_ARRAY):
                return [self.value(etype) for _ in range(count)]
            raise GGUFError(f"unknown array element type {etype}")
        if vtype in _SCALAR_DTYPE:
            return self.scalar(vtype)
        raise GGUFError(f"unknown metadata value type {vtype}")


class TensorInfo:
    def __init__(self, name, ne, ggml_type, offset):
        self.name = name
        self.ne = tuple(ne)            # ggml order, ne[0] innermost
        self.shape = tuple(reversed(ne))  # NumPy order
        self.ggml_type = ggml_type
        self.offset = offset           # relative to the data section
        self.n_elements = math.prod(ne)  # Python ints: no overflow on corrupt dims

    @property
    def type_name(self):
        return GGML_TYPES[self.ggml_type][0]

    def nbytes(self):
        _, blk, size = GGML_TYPES[self.ggml_type]
        return self.n_elements // blk * size


class GGUFFile:
    """A parsed GGUF file: .version, .metadata (dict), .tensors (name -> TensorInfo),
    .data_offset; .tensor(name) dequantizes one tensor to float64."""

    def __init__(self, path):
        self.path = path
        self._map = np.memmap(path, dtype=np.uint8, mode="r")
        cur = _Cursor(self._map)
        magic = bytes(cur.take(4))
        if magic != GGUF_MAGIC:
            raise GGUFError(f"{path}: bad magic {magic!r}, expected {GGUF_MAGIC!r}")
        self.version = cur.u32()
        if self.version not in (2, 3):
            raise GGUFError(f"{path}: GGUF version {self.version} not supported (2 or 3)")
        n_tensors, n_kv = cur.u64(), cur.u64()

        self.metadata = {}
        for _ in range(n_kv):
            key = cur.string()
            if key in self.metadata:
                raise GGUFError(f"{path}: duplicate key {key!r}")
            self.metadata[key] = cur.value(cur.u32())

        self.alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(self.alignment, int) or self.alignment <= 0 or \
                self.alignment & (self.alignment - 1):
            raise GGUFError(f"{path}: general.alignment {self.alignment!r} "
                            f"is not a power of two")

        self.tensors = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.u32()
            if not 1 <= n_dims <= 4:  # GGML_MAX_DIMS
                raise GGUFError(f"{path}: tensor {name!r} has {n_dims} dimensions")
            ne = [cur.u64() for _ in range(n_dims)]
            ggml_type, offset = cur.u32(), cur.u64()
            if name in self.tensors:
                raise GGUFError(f"{path}: duplicate tensor {name!r}")
            self.tensors[name] = TensorInfo(name, ne, ggml_type, offset)

        self.data_offset = _align(cur.pos, self.alignment)
        for t in self.tensors.values():
            self._check(t)

    def _check(self, t):
        if t.ggml_type not in GGML_TYPES:
            raise GGUFError(f"{self.path}: tensor {t.name!r} has ggml type {t.ggml_type}, "
                            f"not one of {sorted(GGML_TYPES)} that this reader dequantizes")
        blk = GGML_TYPES[t.ggml_type][1]
        if t.ne[0] % blk:
            raise GGUFError(f"{self.path}: tensor {t.name!r}: ne[0] = {t.ne[0]} is not a "
                            f"multiple of the {t.type_name} block ({blk})")
        if t.offset % self.alignment:
            raise GGUFError(f"{self.path}: tensor {t.name!r}: offset {t.offset} is not "
                            f"aligned to {self.alignment}")
        end = self.data_offset + t.offset + t.nbytes()
        if end > len(self._map):
            raise GGUFError(f"{self.path}: tensor {t.name!r} ends at byte {end}, "
                            f"past the end of the file ({len(self._map)})")

    def raw(self, name):
        """The tensor's bytes as a uint8 array (a view of the mapped file)."""
        t = self.tensors[name]
        start = self.data_offset + t.offset
        return self._map[start:start + t.nbytes()]

    def tensor(self, name):
        """The tensor dequantized to float64, in NumPy order."""
        t = self.tensors[name]
        return dequantize(t.ggml_type, self.raw(name), t.n_elements).reshape(t.shape)


def _align(x, a):
    return (x + a - 1) // a * a


def dequantize(ggml_type, raw, n):
    """n elements of ggml_type stored in the bytes `raw` -> float64 array of n.

    Quantized blocks never straddle rows (ne[0] is a multiple of the block size), so a
    whole tensor dequantizes as one flat run of blocks."""
    raw = np.asarray(raw, dtype=np.uint8)
    if ggml_type == GGML_F32:
        return raw.view("<f4").astype(np.float64)
    if ggml_type == GGML_F16:
        return raw.view("<f2").astype(np.float64)
    if ggml_type == GGML_BF16:
        # BF16 is the upper half of an IEEE float32.
        return (raw.view("<u2").astype(np.uint32) << 16).view("<f4").astype(np.float64)
    if ggml_type == GGML_Q8_0:
        blocks = raw.reshape(n // 32, 34)
        d = blocks[:, :2].copy().view("<f2").astype(np.float64)        # (nb, 1)
        q = blocks[:, 2:].view(np.int8).astype(np.float64)             # (nb, 32)
        return (d * q).reshape(n)
    if ggml_type in Q45:
        return _dequantize_q45(ggml_type, raw, n)
    if ggml_type == GGML_IQ4_NL:
        blocks = raw.reshape(n // 32, 18)
        qs = blocks[:, 2:].astype(np.int64)
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1)
        return (_f16(blocks[:, 0:2]) * IQ4_NL_VALUES[q]).reshape(n)
    if ggml_type == GGML_MXFP4:
        # Exact in float64, as ggml's F32 is for e <= 252 (past that, 12 x 2^(e-128) overflows).
        blocks = raw.reshape(n // 32, 17)
        qs = blocks[:, 1:].astype(np.int64)
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1)
        d = np.ldexp(1.0, blocks[:, 0:1].astype(np.int64) - 128)            # (nb, 1)
        return (d * MXFP4_VALUES[q]).reshape(n)
    if ggml_type in (GGML_Q2_K, GGML_Q3_K):
        return _dequantize_q23_k(raw, n, ggml_type == GGML_Q3_K)
    if ggml_type in (GGML_Q4_K, GGML_Q5_K):
        return _dequantize_q45_k(raw, n, ggml_type == GGML_Q5_K)
    if ggml_type == GGML_Q6_K:
        return _dequantize_q6_k(raw, n)
    if ggml_type == GGML_IQ4_XS:
        return _dequantize_iq4_xs(raw, n)
    if ggml_type in iq_dequant.TYPES:
        return iq_dequant.dequantize(ggml_type, raw, n)
    raise GGUFError(f"ggml type {ggml_type} is not supported by this reader")


def _f16(b):
    return b.copy().view("<f2").astype(np.float64)


def _dequantize_q45(ggml_type, raw, n):
    """Q4_0 / Q4_1 / Q5_0 / Q5_1: each block is its f16 d, Q4_1/Q5_1's f16 min m, Q5's
    fifth bits (a little-endian u32, bit j for element j), then qs[16], whose low nibbles are
    elements 0..15 and high nibbles 16..31. x = d * (q - 8 or 16) without a min, d * q + m
    with one."""
    size = GGML_TYPES[ggml_type][2]
    with_min, five = ggml_type in (GGML_Q4_1, GGML_Q5_1), ggml_type in (GGML_Q5_0, GGML_Q5_1)
    blocks = raw.reshape(n // 32, size)
    d = _f16(blocks[:, 0:2])                                                  # (nb, 1)
    qs = blocks[:, size - 16:].astype(np.int64)                               # (nb, 16)
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1)                          # (nb, 32)
    if five:
        at = 4 if with_min else 2
        qh = blocks[:, at:at + 4].copy().view("<u4").astype(np.int64)         # (nb, 1)
        q = q + 16 * ((qh >> np.arange(32)[None, :]) & 1)
    if with_min:
        return (d * q + _f16(blocks[:, 2:4])).reshape(n)
    return (d * (q - (16 if five else 8))).reshape(n)


def _dequantize_q23_k(raw, n, three):
    """Q2_K / Q3_K: element 128h + 32j + l (j < 4, l < 32) takes bits 2j, 2j+1 of
    qs[32h + l]; it is in sub-block (128h + 32j + l) // 16. Q2_K: x = d * (sc & 15) * q -
    dmin * (sc >> 4), sc = scales[sub-block]. Q3_K: q's third bit is bit 4h + j of hmask[l]
    (q - 4 where it is clear), x = d * (s - 32) * that, s the 6-bit scale whose low 4 bits
    are the low (sub-block < 8) or high nibble of scales[sub-block % 8] and whose top 2 bits
    are bits 2 (sub-block // 4) of scales[8 + sub-block % 4]."""
    nb = n // 256
    blocks = raw.reshape(nb, 110 if three else 84)
    qs = blocks[:, 32:96] if three else blocks[:, 16:80]
    qs = qs.reshape(nb, 2, 1, 32).astype(np.int64)                            # [h, -, l]
    j = np.arange(4)[None, None, :, None]
    q = ((qs >> (2 * j)) & 3).reshape(nb, 256)                                # element order
    if not three:
        sc = blocks[:, 0:16].astype(np.int64)
        sc_e, m_e = np.repeat(sc & 15, 16, axis=1), np.repeat(sc >> 4, 16, axis=1)
        return (_f16(blocks[:, 80:82]) * sc_e * q - _f16(blocks[:, 82:84]) * m_e).reshape(n)
    hm = blocks[:, 0:32].astype(np.int64)[:, None, None, :]                   # [-, -, l]
    h = np.arange(2)[None, :, None, None]
    hbit = ((hm >> (4 * h + j)) & 1).reshape(nb, 256)
    s8 = blocks[:, 96:108].astype(np.int64)
    i = np.arange(16)
    low = np.where(i < 8, s8[:, i % 8] & 15, s8[:, i % 8] >> 4)
    s = (low | ((s8[:, 8 + i % 4] >> (2 * (i // 4))) & 3) << 4) - 32        # (nb, 16)
    return (_f16(blocks[:, 108:110]) * np.repeat(s, 16, axis=1) * (q - 4 * (1 - hbit))).reshape(n)


def _dequantize_q45_k(raw, n, five):
    """Q4_K / Q5_K: 8 sub-blocks of 32, x = d * sc[j] * q - dmin * m[j]. The 6-bit scales
    and mins of sub-blocks 0..3 are the low 6 bits of bytes j and j+4 of scales[12]; those
    of 4..7 are the nibbles of byte j+4 with their top 2 bits in the top bits of bytes j-4
    (scale) and j (min). Sub-blocks 2k and 2k+1 are the low and high nibbles of qs[32k..];
    Q5_K's fifth bit of element l of sub-block j is bit j of qh[l]."""
    nb = n // 256
    blocks = raw.reshape(nb, 176 if five else 144)
    d, dmin = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])                     # (nb, 1)
    sc8 = blocks[:, 4:16].astype(np.int64)
    lo4, hi4 = sc8[:, 0:4], sc8[:, 4:8]
    scale = np.concatenate([lo4 & 63, (sc8[:, 8:12] & 15) | ((lo4 >> 6) << 4)], axis=1)
    mins = np.concatenate([hi4 & 63, (sc8[:, 8:12] >> 4) | ((hi4 >> 6) << 4)], axis=1)
    qs = blocks[:, 48:176] if five else blocks[:, 16:144]
    qs = qs.reshape(nb, 4, 32).astype(np.int64)
    q = np.stack([qs & 15, qs >> 4], axis=2).reshape(nb, 8, 32)               # sub-block j
    if five:
        qh = blocks[:, 16:48].astype(np.int64)                                 # (nb, 32)
        q = q + 16 * ((qh[:, None, :] >> np.arange(8)[None, :, None]) & 1)
    y = d[:, :, None] * scale[:, :, None] * q - dmin[:, :, None] * mins[:, :, None]
    return y.reshape(n)


def _dequantize_q6_k(raw, n):
    """Q6_K: element 128h + 32k + l (k < 4) is (ql[64h + 32(k % 2) + l] >> 4(k // 2)) & 15
    plus bits 2k, 2k+1 of qh[32h + l] as bits 4, 5, minus 32, times d * scales[e // 16]."""
    nb = n // 256
    blocks = raw.reshape(nb, 210)
    ql = blocks[:, 0:128].reshape(nb, 2, 2, 32).astype(np.int64)              # [h, k % 2, l]
    qh = blocks[:, 128:192].reshape(nb, 2, 32).astype(np.int64)               # [h, l]
    scales = blocks[:, 192:208].view(np.int8).astype(np.float64)              # (nb, 16)
    d = _f16(blocks[:, 208:210])
    q = np.stack([((ql[:, :, k % 2, :] >> (4 * (k // 2))) & 15) | (((qh >> (2 * k)) & 3) << 4)
                  for k in range(4)], axis=2)                                  # (nb, 2, 4, 32)
    q = q.reshape(nb, 256) - 32
    return (d * np.repeat(scales, 16, axis=1) * q).reshape(n)



def _dequantize_iq4_xs(raw, n):
    """IQ4_XS (ggml's dequantize_row_iq4_xs): 8 sub-blocks of 32, x = d * (ls - 32) *
    IQ4_NL_VALUES[q]. Sub-block ib's 6-bit ls has the low (ib even) or high nibble of
    scales_l[ib // 2] as its low 4 bits and bits 2ib, 2ib+1 of the little-endian u16
    scales_h as its top 2; its elements 0..15 are the low nibbles of qs[16ib..16ib+15],
    16..31 the high ones."""
    nb = n // 256
    blocks = raw.reshape(nb, 136)
    d = _f16(blocks[:, 0:2])                                                  # (nb, 1)
    scales_h = blocks[:, 2:4].copy().view("<u2").astype(np.int64)             # (nb, 1)
    scales_l = blocks[:, 4:8].astype(np.int64)                                # (nb, 4)
    ib = np.arange(8)
    ls = ((scales_l[:, ib // 2] >> (4 * (ib % 2))) & 15) | (((scales_h >> (2 * ib)) & 3) << 4)
    qs = blocks[:, 8:136].reshape(nb, 8, 16).astype(np.int64)
    q = np.concatenate([qs & 15, qs >> 4], axis=2)                            # (nb, 8, 32)
    return (d[:, :, None] * (ls - 32)[:, :, None] * IQ4_NL_VALUES[q]).reshape(n)

def load(path):
    """(metadata dict, {tensor name: float64 NumPy array}) of a GGUF file."""
    f = GGUFFile(path)
    return f.metadata, {name: f.tensor(name) for name in f.tensors}
