"""The weights digest cannot be forged by header tricks (issue 42, R8 and R9).

What a checkpoint directory MAY hold: anything, written by whoever shared it. What it may NEVER
cause: two different checkpoints with one digest (``--compare`` then says IDENTICAL WEIGHTS for
different models: the v1 stream ``name\\0dtype\\0shape\\0BYTES`` had no length framing, so a 2-tensor
and a 1-tensor checkpoint collided); one byte range standing for several tensors (N header entries on
one range were hashed N times); a range outside the file; a reader that waits on a FIFO named
``model.safetensors``.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from pathlib import Path

import pytest

from unified.models.weights_digest import WeightsDigestError, compute_weights_digest


def write_safetensors(path: Path, tensors: list[tuple[str, str, list[int], tuple[int, int]]], data: bytes) -> Path:
    """A safetensors file written byte by byte (header entries given as they are, ranges and all)."""
    header = {name: {"dtype": dtype, "shape": shape, "data_offsets": list(offsets)}
              for name, dtype, shape, offsets in tensors}
    raw = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def _v1_stream(tensors: list[tuple[str, str, list[int], bytes]]) -> bytes:
    """What the unframed v1 digest hashed: ``name \\0 dtype \\0 shape \\0 BYTES`` per tensor, sorted by name."""
    return b"".join(f"{n}\0{d}\0{s}\0".encode() + data for n, d, s, data in sorted(tensors))


def test_a_two_tensor_and_a_one_tensor_checkpoint_do_not_collide(tmp_path):
    two_tensors = [("a", "U8", [1], b"X"), ("b", "U8", [1], b"Y")]
    one_tensor = [("a\0U8\0[1]\0Xb", "U8", [1], b"Y")]  # the name swallows the first tensor and "b"
    assert _v1_stream(two_tensors) == _v1_stream(one_tensor)  # the v1 digest could not tell them apart
    two = write_safetensors(tmp_path / "two" / "model.safetensors",
                            [("a", "U8", [1], (0, 1)), ("b", "U8", [1], (1, 2))], b"XY")
    one = write_safetensors(tmp_path / "one" / "model.safetensors", [(one_tensor[0][0], "U8", [1], (0, 1))], b"Y")
    first, second = compute_weights_digest(two.parent), compute_weights_digest(one.parent)
    assert first != second
    assert len(first) == 64 and len(second) == 64  # the full sha256, not 64 bits of it


@pytest.mark.parametrize("tensors, data, why", [
    ([("a", "U8", [4], (0, 4)), ("b", "U8", [4], (0, 4))], b"ABCD", "overlap"),
    ([("a", "U8", [4], (0, 4)), ("b", "U8", [4], (2, 6))], b"ABCDEF", "overlap"),
    ([("a", "U8", [8], (0, 8))], b"ABCD", "outside"),
    ([("a", "U8", [2], (3, 1))], b"ABCD", "outside"),
    ([("a", "F32", [2], (0, 4))], b"ABCD", "not the 8 of"),
])
def test_ranges_that_overlap_leave_the_file_or_disagree_with_the_shape_are_refused(tmp_path, tensors, data, why):
    checkpoint = write_safetensors(tmp_path / "ckpt" / "model.safetensors", tensors, data).parent
    with pytest.raises(WeightsDigestError, match=why) as caught:
        compute_weights_digest(checkpoint)
    assert "model.safetensors" in str(caught.value)


def test_a_fifo_named_model_safetensors_is_an_error_not_a_wait(tmp_path):
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    os.mkfifo(checkpoint / "model.safetensors")
    outcome: list[object] = []

    def digest() -> None:
        try:
            outcome.append(compute_weights_digest(checkpoint))
        except WeightsDigestError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=digest, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # unblock the thread that waits in open() before failing
        os.close(os.open(checkpoint / "model.safetensors", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("the digest waited on a FIFO named model.safetensors")
    assert isinstance(outcome[0], WeightsDigestError) and "FIFO" in str(outcome[0])
