"""What a model file must look like before llama.cpp is asked to load it.

llama.cpp answers a missing, unreadable or foreign file with a bare failure (or worse), so
``backend.LlamaModel`` first checks the path and the GGUF header here and raises one
``UserError`` that says what is wrong.  Reads 24 bytes; imports only ``errors``, never
llama_cpp.
"""

from __future__ import annotations

import os
import struct

from ..errors import UserError

__all__ = ["GGUF_MAGIC", "check_gguf_file"]

GGUF_MAGIC = b"GGUF"
_VERSIONS = (2, 3)  # the GGUF versions llama.cpp reads
_HEADER = 24  # magic, version, tensor count, metadata count


def check_gguf_file(path: str) -> None:
    """``UserError`` unless ``path`` is a readable file with a GGUF header of a version
    llama.cpp reads."""
    if not os.path.exists(path):
        raise UserError(f"model file not found: {path}")
    if os.path.isdir(path):
        raise UserError(f"model path is a directory, not a GGUF file: {path}")
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER)
    except OSError as e:
        raise UserError(f"cannot read model file {path}: {e.strerror}") from None
    if len(head) < 4 or head[:4] != GGUF_MAGIC:
        raise UserError(f"not a GGUF file (bad magic): {path}")
    if len(head) < _HEADER:
        raise UserError(f"truncated GGUF file: {path}")
    version = struct.unpack("<I", head[4:8])[0]
    if version not in _VERSIONS:
        raise UserError(f"unsupported GGUF version {version}: {path}")
