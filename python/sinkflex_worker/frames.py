"""Binary frames of the worker protocol (python/README.md): a length-prefixed JSON header for the op name
and scalars, then raw little-endian int32 / float32 arrays. Encoding and decoding only; no sockets
beyond reading exactly the bytes of one frame, no model.
"""
from __future__ import annotations

import json
import struct
from typing import Dict, List, Optional, Tuple

import numpy as np

PROTOCOL_VERSION = 1
MAX_HEADER_BYTES = 1 << 20
MAX_BODY_BYTES = 1 << 31
DTYPES = {"i32": np.dtype("<i4"), "f32": np.dtype("<f4")}
_PREFIX = struct.Struct("<II")


class FrameError(Exception):
    """A frame that does not follow the protocol (the connection is closed after it)."""


def encode_frame(header: dict, arrays: Optional[Dict[str, np.ndarray]] = None) -> bytes:
    """header (JSON-able, without "arrays") + named arrays (int32 or float32) -> one frame."""
    arrays = arrays or {}
    specs: List[list] = []
    parts: List[bytes] = []
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.dtype.kind in "iub":
            kind = "i32"
        elif a.dtype.kind == "f":
            kind = "f32"
        else:
            raise FrameError(f"array {name!r} has dtype {a.dtype}; only int32 and float32 travel")
        b = np.ascontiguousarray(a.reshape(-1), dtype=DTYPES[kind]).tobytes()
        specs.append([name, kind, int(a.size)])
        parts.append(b)
    h = dict(header)
    h["arrays"] = specs
    hb = json.dumps(h, separators=(",", ":")).encode("utf-8")
    body = b"".join(parts)
    return _PREFIX.pack(len(hb), len(body)) + hb + body


def decode_header(prefix: bytes) -> Tuple[int, int]:
    """The 8-byte prefix -> (header length, body length), checked against the limits."""
    hl, bl = _PREFIX.unpack(prefix)
    if hl == 0 or hl > MAX_HEADER_BYTES:
        raise FrameError(f"header length {hl} is outside 1..{MAX_HEADER_BYTES}")
    if bl > MAX_BODY_BYTES:
        raise FrameError(f"body length {bl} is over {MAX_BODY_BYTES}")
    return hl, bl


def decode_body(header_bytes: bytes, body: bytes) -> Tuple[dict, Dict[str, np.ndarray]]:
    """Header JSON and body bytes -> (header, named arrays)."""
    try:
        header = json.loads(header_bytes.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FrameError(f"the header is not UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise FrameError("the header must be a JSON object")
    specs = header.pop("arrays", [])
    if not isinstance(specs, list):
        raise FrameError('"arrays" must be a list of [name, dtype, count]')
    arrays: Dict[str, np.ndarray] = {}
    off = 0
    for spec in specs:
        if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str) and spec[1] in DTYPES
                and isinstance(spec[2], int) and spec[2] >= 0):
            raise FrameError(f"bad array spec {spec!r}; expected [name, \"i32\"|\"f32\", count >= 0]")
        name, kind, n = spec
        nbytes = 4 * n
        if off + nbytes > len(body):
            raise FrameError(f"array {name!r} needs {nbytes} bytes at offset {off}; the body has {len(body)}")
        arrays[name] = np.frombuffer(body, dtype=DTYPES[kind], count=n, offset=off)
        off += nbytes
    if off != len(body):
        raise FrameError(f"the body has {len(body) - off} bytes that no array describes")
    return header, arrays


def _read_exact(sock, n: int) -> Optional[bytes]:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            if buf:
                raise FrameError(f"the peer closed the connection inside a frame ({len(buf)} of {n} bytes)")
            return None
        buf += chunk
    return bytes(buf)


def read_frame(sock) -> Optional[Tuple[dict, Dict[str, np.ndarray]]]:
    """Reads one frame from a socket; None when the peer closed the connection between frames."""
    prefix = _read_exact(sock, _PREFIX.size)
    if prefix is None:
        return None
    hl, bl = decode_header(prefix)
    hb = _read_exact(sock, hl)
    body = _read_exact(sock, bl) if bl else b""
    if hb is None or body is None:
        raise FrameError("the peer closed the connection inside a frame")
    return decode_body(hb, body)
