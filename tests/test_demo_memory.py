"""``make demo`` holds one model copy at a time (issue 53): the warmup takes the only reference to the training
model, and before the eval (run in the demo's own process) the demo checks that it is gone and gives the C heap's
free pages back; the tree had peaked at 10.33 GiB with the training copy kept beside the eval subprocess's."""

from __future__ import annotations

import weakref

import torch

from unified import demo


def test_release_memory_says_whether_the_training_model_is_gone_and_returns_its_pages():
    model = torch.nn.Linear(4096, 8192)  # 128 MiB of float32 weights
    ref = weakref.ref(model)
    held = demo.release_memory(ref)
    assert held.startswith("WARNING: the training model is still referenced"), held
    before = demo.process_rss_gib()
    del model
    freed = demo.release_memory(ref)
    assert freed.startswith("the training model is freed; this process's RSS before the eval: "), freed
    assert demo.process_rss_gib() < before - 0.06  # the weights' pages went back to the system
