"""A digest of a checkpoint's weights, independent of how they were written to files.

Two eval runs of "different" checkpoints are a comparison of the same model when the warmup's
collapse guard kept the starting weights (``final/ holds the STARTING weights``), or when a
checkpoint was only copied or re-sharded. The names, sizes and times of the files
(:func:`unified.store.files_fingerprint`) differ then; the tensors do not. :func:`weights_digest`
hashes the tensors themselves, every field length-framed (``len`` is 8 bytes, little-endian), so no
two different checkpoints can give the same byte stream (issue 42, R8: unframed fields let a 2-tensor
and a 1-tensor checkpoint collide):

    digest = sha256( frame("unified-weights-v2") ‖ frame(count)
                     ‖ for each tensor, sorted by name: frame(name) ‖ frame(dtype) ‖ frame(shape) ‖ frame(raw bytes) )
    frame(x) = len(x) ‖ x                                   (the full 64 hex digits are kept)

read straight from the ``*.safetensors`` headers and byte ranges (no torch, no model load), so the
shard layout, the ``__metadata__`` and the other files (config, tokenizer, model card) do not enter
it. Tensor names do: a checkpoint saved under another class's names has another digest. A header whose
ranges overlap, leave the file, or disagree with the tensor's dtype and shape is refused
(:class:`WeightsDigestError`): one range can never stand for several tensors. Files are opened only
as regular files (:func:`unified.store.open_regular`: a FIFO or a link is an error, never a wait).
A ``.gguf`` file is hashed whole. Directories holding only pickled weights (``*.bin``, ``*.pt``) get
None: hashing them would mean unpickling untrusted files.

Reading a 35B bf16 checkpoint (~70 GB) takes about a minute; the digest is cached in
``cache_dir()/weights-digests.json`` under the path and its files' fingerprint, so a rerun or a
``--dry-run`` of the same files reads nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from pathlib import Path
from typing import BinaryIO

from unified.models.embedded import cache_dir
from unified.store import WEIGHT_FILES, files_fingerprint, open_regular, write_json_atomic

CACHE_FILE = "weights-digests-v2.json"
"""The cache of digests (a new name for the framed v2 digest: v1 values are never returned)."""
FORMAT = b"unified-weights-v2"
_BLOCK = 1 << 22
_MAX_HEADER = 100 << 20


class WeightsDigestError(ValueError):
    """A ``*.safetensors`` file whose header cannot be read (names the file)."""


_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "U16": 2, "I16": 2,
                "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8, "C64": 8}
"""Bytes per element of the safetensors dtypes (sub-byte and unknown dtypes are checked for bounds only)."""


def _safetensors_entries(path: Path) -> list[tuple[str, str, list[int], int, int]]:
    """``(name, dtype, shape, begin, end)`` of each tensor in one file, offsets absolute in the file;
    refused (naming the file and tensor) when a range is reversed, leaves the file, overlaps another
    or is not ``prod(shape) * bytes(dtype)`` long."""
    with _open_weights(path) as fh:
        file_size = os.fstat(fh.fileno()).st_size
        head = fh.read(8)
        if len(head) != 8:
            raise WeightsDigestError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (size,) = struct.unpack("<Q", head)
        if size > _MAX_HEADER:
            raise WeightsDigestError(f"{path}: safetensors header of {size} bytes (more than {_MAX_HEADER})")
        try:
            header = json.loads(fh.read(size))
        except ValueError as exc:
            raise WeightsDigestError(f"{path}: safetensors header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise WeightsDigestError(f"{path}: safetensors header is not a JSON object")
    base = 8 + size
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(x) for x in info["data_offsets"])
            shape = [int(d) for d in info["shape"]]
            entries.append((name, str(info["dtype"]), shape, base + begin, base + end))
        except (KeyError, TypeError, ValueError):
            raise WeightsDigestError(f"{path}: tensor {name!r} has no dtype/shape/data_offsets") from None
    previous: tuple[str, int] | None = None
    for name, dtype, shape, begin, end in sorted(entries, key=lambda e: (e[3], e[4])):
        if not base <= begin <= end <= file_size:
            raise WeightsDigestError(f"{path}: tensor {name!r} has the byte range [{begin}, {end}) outside the "
                                     f"file's data [{base}, {file_size})")
        if previous is not None and begin < previous[1]:
            raise WeightsDigestError(f"{path}: tensors {previous[0]!r} and {name!r} overlap (bytes from {begin})")
        width = _DTYPE_BYTES.get(dtype)
        if width is not None and end - begin != math.prod(shape) * width:
            raise WeightsDigestError(f"{path}: tensor {name!r} has {end - begin} bytes, not the "
                                     f"{math.prod(shape) * width} of a {dtype} tensor of shape {shape}")
        previous = (name, end)
    return entries


def _open_weights(path: Path) -> BinaryIO:
    """``path`` opened for reading only as a regular file (:func:`unified.store.open_regular`: a FIFO or a
    link is a WeightsDigestError naming it, never a wait)."""
    try:
        return os.fdopen(open_regular(path), "rb")
    except ValueError as exc:
        raise WeightsDigestError(str(exc)) from None


def _frame(digest, data: bytes) -> None:
    digest.update(struct.pack("<Q", len(data)))
    digest.update(data)


def compute_weights_digest(path: str | os.PathLike[str]) -> str | None:
    """The digest of the module docstring (64 hex digits), read in full; None for pickled-only weights."""
    root = Path(path)
    digest = hashlib.sha256()
    _frame(digest, FORMAT)
    if root.is_file():
        if root.suffix != ".gguf":
            return None
        _frame(digest, b"gguf")
        with _open_weights(root) as fh:
            size = os.fstat(fh.fileno()).st_size
            digest.update(struct.pack("<Q", size))
            _update_range(digest, fh, root, 0, size)
        return digest.hexdigest()
    files = sorted(root.glob("*.safetensors"))
    if not files:
        return None
    tensors: dict[str, tuple[Path, str, list[int], int, int]] = {}
    for file in files:
        for name, dtype, shape, begin, end in _safetensors_entries(file):
            if name in tensors:
                raise WeightsDigestError(f"{file}: tensor {name!r} is also in {tensors[name][0].name}")
            tensors[name] = (file, dtype, shape, begin, end)
    _frame(digest, str(len(tensors)).encode())
    handles: dict[Path, BinaryIO] = {}
    try:
        for name in sorted(tensors):
            file, dtype, shape, begin, end = tensors[name]
            _frame(digest, name.encode())
            _frame(digest, dtype.encode())
            _frame(digest, json.dumps(shape).encode())
            digest.update(struct.pack("<Q", end - begin))
            if file not in handles:
                handles[file] = _open_weights(file)
            _update_range(digest, handles[file], file, begin, end)
    finally:
        for handle in handles.values():
            handle.close()
    return digest.hexdigest()


def _update_range(digest, fh, path: Path, begin: int, end: int) -> None:
    fh.seek(begin)
    left = end - begin
    while left > 0:
        block = fh.read(min(_BLOCK, left))
        if not block:
            raise WeightsDigestError(f"{path}: ends before byte {end} (a truncated file)")
        digest.update(block)
        left -= len(block)


def weights_digest(path: str | os.PathLike[str], cache: Path | None = None) -> str | None:
    """:func:`compute_weights_digest`, cached under ``(resolved path, files fingerprint)``.

    ``cache`` defaults to ``cache_dir()/weights-digests.json``; a cache that cannot be read or written
    costs a recomputation, never a wrong answer (the key changes with any file's size or time)."""
    root = Path(path).resolve()
    cache = cache or cache_dir() / CACHE_FILE
    key = f"{root}\0{files_fingerprint(root, WEIGHT_FILES)}"
    try:
        known = json.loads(cache.read_text())
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    value = compute_weights_digest(root)
    known = {k: v for k, v in known.items() if not k.startswith(f"{root}\0")}  # older versions of these files
    known[key] = value
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(cache, known)
    except OSError:
        pass
    return value


__all__ = ["WeightsDigestError", "compute_weights_digest", "weights_digest"]
