"""Read a GGUF file's architecture from its header, with the standard library only.

The layout is GGUF's own (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): the magic
``GGUF``, a uint32 version, uint64 tensor and metadata counts, then metadata pairs of a string key
(uint64 length + UTF-8), a uint32 value type and the value, all little-endian. ``general.architecture``
is required and written first by the gguf writer; the scan still walks up to the whole metadata,
skipping other values, but never reads more than ``MAX_HEADER_BYTES``.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

MAGIC = b"GGUF"
ARCHITECTURE_KEY = "general.architecture"
MAX_HEADER_BYTES = 64 * 1024 * 1024
# Value types of the spec: fixed sizes, 8 is a string, 9 an array of one type.
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING = 8
_ARRAY = 9


class NotGguf(ValueError):
    """The file is not a GGUF file, or its header is cut short or malformed."""


class _Reader:
    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.read_bytes = 0

    def take(self, n: int) -> bytes:
        if self.read_bytes + n > MAX_HEADER_BYTES:
            raise NotGguf(f"the metadata runs past {MAX_HEADER_BYTES // (1024 * 1024)} MiB")
        data = self.handle.read(n)
        if len(data) != n:
            raise NotGguf("the header is cut short")
        self.read_bytes += n
        return data

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8))[0])

    def string(self) -> str:
        raw = self.take(self.u64())
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise NotGguf("a metadata key is not UTF-8") from None

    def skip(self, kind: int) -> None:
        if kind in _FIXED:
            self.take(_FIXED[kind])
        elif kind == _STRING:
            self.take(self.u64())
        elif kind == _ARRAY:
            item, count = self.u32(), self.u64()
            if item in _FIXED:
                self.take(_FIXED[item] * count)
            else:
                for _ in range(count):
                    self.skip(item)
        else:
            raise NotGguf(f"unknown metadata value type {kind}")


def architecture(path: Path) -> str:
    """``general.architecture`` of the GGUF at ``path``; NotGguf when it is not one, or when it
    holds no tensor (a header alone is no model: issue 29 staged a 73-byte one)."""
    with path.open("rb") as handle:
        reader = _Reader(handle)
        magic = handle.read(4)
        if magic != MAGIC:
            raise NotGguf(f"it starts with {magic!r}, not the GGUF magic {MAGIC!r}")
        reader.read_bytes = 4
        version = reader.u32()
        if version not in (2, 3):
            raise NotGguf(f"GGUF version {version} (llama.cpp reads 2 and 3)")
        if reader.u64() == 0:
            raise NotGguf("its header lists no tensor: a header alone, not a model")
        pairs = reader.u64()
        for _ in range(pairs):
            key = reader.string()
            kind = reader.u32()
            if key == ARCHITECTURE_KEY:
                if kind != _STRING:
                    raise NotGguf(f"{ARCHITECTURE_KEY} is not a string")
                return reader.string()
            reader.skip(kind)
    raise NotGguf(f"no {ARCHITECTURE_KEY} in its metadata")
