"""Minimal safetensors reading and writing for the reference tests (Debian has
no python3-safetensors). Follows the format: u64 little-endian header length,
JSON header, raw little-endian data."""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        arr = np.frombuffer(body[b:end], dtype=_DTYPES[e["dtype"]]).reshape(e["shape"])
        out[name] = arr.astype(np.float32)
    return out


def save(path, tensors, metadata=None):
    """metadata: a dict of strings for the header's __metadata__ (pipetrain's
    model.init_from checks a vit's or gpt's model.heads and model.ln_eps there)."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        raw = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
