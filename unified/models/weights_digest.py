"""A digest of a checkpoint's weights, independent of how they were written to files.

Two eval runs of "different" checkpoints are a comparison of the same model when the warmup's
collapse guard kept the starting weights (``final/ holds the STARTING weights``), or when a
checkpoint was only copied or re-sharded. The names, sizes and times of the files
(:func:`unified.store.files_fingerprint`) differ then; the tensors do not. :func:`weights_digest`
hashes the tensors themselves:

    digest = sha256( for each tensor, sorted by name:  name \\0 dtype \\0 shape \\0 raw bytes )

read straight from the ``*.safetensors`` headers and byte ranges (no torch, no model load), so the
shard layout, the ``__metadata__`` and the other files (config, tokenizer, model card) do not enter
it. Tensor names do: a checkpoint saved under another class's names has another digest. A ``.gguf``
file is hashed whole. Directories holding only pickled weights (``*.bin``, ``*.pt``) get None:
hashing them would mean unpickling untrusted files.

Reading a 35B bf16 checkpoint (~70 GB) takes about a minute; the digest is cached in
``cache_dir()/weights-digests.json`` under the path and its files' fingerprint, so a rerun or a
``--dry-run`` of the same files reads nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

from unified.store import WEIGHT_FILES, files_fingerprint, write_json_atomic
from unified.models.embedded import cache_dir

CACHE_FILE = "weights-digests.json"
_BLOCK = 1 << 22
_MAX_HEADER = 100 << 20


class WeightsDigestError(ValueError):
    """A ``*.safetensors`` file whose header cannot be read (names the file)."""


def _safetensors_entries(path: Path) -> list[tuple[str, str, list[int], int, int]]:
    """``(name, dtype, shape, begin, end)`` of each tensor in one file, offsets absolute in the file."""
    with open(path, "rb") as fh:
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
    base = 8 + size
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = info["data_offsets"]
            entries.append((name, str(info["dtype"]), list(info["shape"]), base + int(begin), base + int(end)))
        except (KeyError, TypeError, ValueError):
            raise WeightsDigestError(f"{path}: tensor {name!r} has no dtype/shape/data_offsets") from None
    return entries


def compute_weights_digest(path: str | os.PathLike[str]) -> str | None:
    """The digest of the module docstring (16 hex digits), read in full; None for pickled-only weights."""
    root = Path(path)
    digest = hashlib.sha256()
    if root.is_file():
        if root.suffix != ".gguf":
            return None
        digest.update(b"gguf\0")
        _update_range(digest, root, 0, root.stat().st_size)
        return digest.hexdigest()[:16]
    files = sorted(root.glob("*.safetensors"))
    if not files:
        return None
    tensors: dict[str, tuple[Path, str, list[int], int, int]] = {}
    for file in files:
        for name, dtype, shape, begin, end in _safetensors_entries(file):
            if name in tensors:
                raise WeightsDigestError(f"{file}: tensor {name!r} is also in {tensors[name][0].name}")
            tensors[name] = (file, dtype, shape, begin, end)
    for name in sorted(tensors):
        file, dtype, shape, begin, end = tensors[name]
        digest.update(f"{name}\0{dtype}\0{shape}\0".encode())
        _update_range(digest, file, begin, end)
    return digest.hexdigest()[:16]


def _update_range(digest, path: Path, begin: int, end: int) -> None:
    with open(path, "rb") as fh:
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
