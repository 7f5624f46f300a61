"""GGUF v3 files for the training scripts: read metadata and F32 / F16 / Q8_0 tensors, write
a file from typed metadata and arrays (Q8_0 as ggml's reference quantizer rounds it).

Metadata values are kept as (type, value) pairs so that keys copied from one file (the
tokenizer's) are written back with the types they had. Arrays are (ARRAY, (item_type, list)).
"""
import struct

import numpy as np

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i", FLOAT32: "<f",
           BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}

F32, F16, Q8_0 = 0, 1, 8
_BLOCK = {F32: (1, 4), F16: (1, 2), Q8_0: (32, 34)}  # (values, bytes) per block


class Reader:
    def __init__(self, data, pos=0):
        self.data, self.pos = data, pos

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, t):
        if t == STRING:
            return self.string()
        if t == ARRAY:
            item, n = self.take("<I"), self.take("<Q")
            return (item, [self.value(item) for _ in range(n)])
        return self.take(_SCALAR[t])


def read(path):
    """Returns (metadata: list of (key, (type, value))), tensors: dict name -> (ggml type, dims, bytes))."""
    data = open(path, "rb").read()
    r = Reader(data)
    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    r.pos = 4
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    if version != 3:
        raise ValueError(f"{path}: GGUF version {version}, not 3")
    meta = []
    for _ in range(n_kv):
        key = r.string()
        t = r.take("<I")
        meta.append((key, (t, r.value(t))))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("<Q") for _ in range(r.take("<I"))]
        infos.append((name, r.take("<I"), dims, r.take("<Q")))
    align = dict(meta).get("general.alignment", (UINT32, 32))[1]
    start = (r.pos + align - 1) // align * align
    tensors = {}
    for name, t, dims, off in infos:
        values, nbytes = _BLOCK[t]
        count = int(np.prod(dims))
        tensors[name] = (t, dims, data[start + off:start + off + count // values * nbytes])
    return meta, tensors


def to_array(t, dims, raw):
    """A tensor as float32, numpy shape reversed from GGUF dims (rows last-dim-major)."""
    shape = tuple(reversed(dims))
    if t == F32:
        return np.frombuffer(raw, dtype="<f4").reshape(shape).copy()
    if t == F16:
        return np.frombuffer(raw, dtype="<f2").astype(np.float32).reshape(shape)
    if t == Q8_0:
        blocks = np.frombuffer(raw, dtype=np.dtype([("d", "<f2"), ("q", "i1", 32)]))
        return (blocks["d"].astype(np.float32)[:, None] * blocks["q"].astype(np.float32)).reshape(shape)
    raise ValueError(f"tensor type {t} not read here")


def quantize_q8_0(a):
    """ggml's quantize_row_q8_0_ref: d = max|x| / 127, q = round(x / d) (half away from zero)."""
    x = np.ascontiguousarray(a, dtype=np.float32).reshape(-1, 32)
    amax = np.abs(x).max(axis=1)
    d = amax / 127.0
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    v = x * inv[:, None]
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)
    out = np.empty(len(x), dtype=np.dtype([("d", "<f2"), ("q", "i1", 32)]))
    out["d"] = d.astype(np.float16)
    out["q"] = q
    return out.tobytes()


def _write_value(f, t, v):
    if t == STRING:
        b = v.encode("utf-8")
        f.write(struct.pack("<Q", len(b)) + b)
    elif t == ARRAY:
        item, items = v
        f.write(struct.pack("<IQ", item, len(items)))
        for x in items:
            _write_value(f, item, x)
    else:
        f.write(struct.pack(_SCALAR[t], v))


def write(path, meta, tensors, align=32):
    """meta: list of (key, (type, value)); tensors: list of (name, ggml type, array float32)."""
    blobs = []
    for name, t, a in tensors:
        a = np.ascontiguousarray(a, dtype=np.float32)
        if t == Q8_0:
            if a.shape[-1] % 32:
                raise ValueError(f"{name}: rows of {a.shape[-1]} values cannot be Q8_0")
            raw = quantize_q8_0(a)
        elif t == F16:
            raw = a.astype("<f2").tobytes()
        else:
            raw = a.astype("<f4").tobytes()
        blobs.append((name, (t, list(reversed(a.shape)), raw)))
    write_raw(path, meta, blobs, align)


def write_raw(path, meta, tensors, align=32):
    """tensors: list of (name, (ggml type, GGUF dims, raw bytes)) as read() gives them."""
    blobs = [(name, t, dims, raw) for name, (t, dims, raw) in tensors]
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(blobs), len(meta)))
        for key, (t, v) in meta:
            _write_value(f, STRING, key)
            f.write(struct.pack("<I", t))
            _write_value(f, t, v)
        off = 0
        for name, t, dims, raw in blobs:
            _write_value(f, STRING, name)
            f.write(struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims))
            f.write(struct.pack("<IQ", t, off))
            off += (len(raw) + align - 1) // align * align
        f.write(b"\0" * (-f.tell() % align))
        for name, t, dims, raw in blobs:
            f.write(raw + b"\0" * (-len(raw) % align))
