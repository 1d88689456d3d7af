"""A snapshot file as the benchmark's grader receives it: the rules of its sandbox's ``/read``.

Claw-Eval collects ``env_snapshot_files`` after the agent finished by POSTing each path to the
sandbox server's ``/read`` (``claw_eval/sandbox/server.py``) and storing the JSON answer under
``file:<path>`` (``claw_eval/cli.py``, ``_collect_env_snapshot``). What a grader then finds,
by the file's extension and ``mimetypes`` type:

- no such file: ``{"error": "File not found: <path>"}``;
- an image extension (png, jpg, jpeg, gif, bmp, webp, tiff, tif, svg): the file decoded as an
  image and re-encoded as PNG, ``{"content": <base64 PNG>, "encoding": "base64", "mime_type":
  "image/png"}`` (the collector keeps the first frame of the media answer). A file the decoder
  refuses (a text file named ``.png``, an SVG) makes the server answer HTTP 500 with a non-JSON
  body, and the collector stores the error of parsing it: :data:`READ_FAILED`;
- a text type (a ``text/*`` or JSON/XML/YAML/JavaScript mime type, or no mime type and a text
  extension): ``{"content": <text, undecodable bytes replaced, newlines universal>, "mime_type":
  <type or text/plain>, "encoding": "utf-8"}``;
- anything else (``.mp4``, ``.db``, ``.jsonl``, no extension): ``{"content": <base64>, "mime_type":
  <type or application/octet-stream>, "encoding": "base64", "size_bytes": n}``.

:func:`read_entry` applies these on the host to bytes read from the workspace, except the image
decode: image files leave the host as ``{"encoding": PENDING_IMAGE, "content": <base64 of the
file>}`` and :func:`decode_pending_images` decodes them inside the grader's sandbox (the decoder
parses agent-made bytes; the sandbox's interpreter has Pillow). PDFs, which the official ``/read``
renders page by page, are read as binary here: no Claw-Eval task snapshots a PDF (checked against
the checkout at commit 9365e1a). This module imports only the standard library at load time, so
the grader's runner loads it from its sandbox.
"""

from __future__ import annotations

import base64
import io
import mimetypes
from pathlib import PurePosixPath
from typing import Any

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tiff", ".tif", ".svg"})
"""Extensions the benchmark's ``/read`` answers with a decoded image."""
TEXT_MIME_TYPES = frozenset({"application/json", "application/xml", "application/yaml", "application/x-yaml",
                             "application/javascript"})
"""Non-``text/*`` mime types the ``/read`` returns as text."""
TEXT_EXTENSIONS = frozenset({".txt", ".md", ".csv", ".json", ".yaml", ".yml", ".xml", ".html", ".htm", ".js", ".ts",
                             ".py", ".sh", ".bash", ".cfg", ".ini", ".toml", ".log", ".sql", ".r", ".rmd"})
"""Extensions read as text when ``mimetypes`` knows no type for them."""
PENDING_IMAGE = "unified-image-to-decode"
"""Marks an image entry whose decode happens in the grader's sandbox (:func:`decode_pending_images`)."""
READ_FAILED = "Expecting value: line 1 column 1 (char 0)"
"""What the benchmark's collector stores when ``/read`` fails inside (its HTTP 500 body is not JSON)."""


def read_entry(path: str, data: bytes) -> dict[str, Any]:
    """The ``file:<path>`` entry of ``data`` (module docstring); images are left to decode."""
    suffix = PurePosixPath(path).suffix.lower()
    if suffix in IMAGE_EXTENSIONS:
        return {"encoding": PENDING_IMAGE, "content": base64.b64encode(data).decode("ascii")}
    mime, _ = mimetypes.guess_type(path)
    textual = (mime in TEXT_MIME_TYPES or (mime is not None and mime.startswith("text/"))
               or (mime is None and suffix in TEXT_EXTENSIONS))
    if textual:
        text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
        return {"content": text, "mime_type": mime or "text/plain", "encoding": "utf-8"}
    return {"content": base64.b64encode(data).decode("ascii"), "mime_type": mime or "application/octet-stream",
            "encoding": "base64", "size_bytes": len(data)}


def decode_image(data: bytes) -> dict[str, Any]:
    """An image file's entry: decoded and re-encoded as PNG, or :data:`READ_FAILED` when it does not decode."""
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))
        out = io.BytesIO()
        image.save(out, format="PNG")
    except Exception:  # the decoder refused it: the official /read answers 500
        return {"error": READ_FAILED}
    return {"content": base64.b64encode(out.getvalue()).decode("ascii"), "encoding": "base64",
            "mime_type": "image/png"}


def decode_pending_images(snapshot: dict[str, Any]) -> dict[str, Any]:
    """``snapshot`` with every pending image entry decoded (run in the grader's sandbox)."""
    out = dict(snapshot)
    for key, value in snapshot.items():
        if isinstance(value, dict) and value.get("encoding") == PENDING_IMAGE:
            out[key] = decode_image(base64.b64decode(value.get("content") or ""))
    return out


__all__ = ["IMAGE_EXTENSIONS", "PENDING_IMAGE", "READ_FAILED", "decode_image", "decode_pending_images", "read_entry"]
