"""unified/warmup/preempt.py: the two ways a pre-emption warning reaches the trainer (SIGUSR1 and
``preempt.request``) stop it at the end of the step under way with a save; nothing else does. The whole path
(sbatch, USR1, save, requeue, resume) is tests/test_slurm_warmup.py's USR1 test."""

from __future__ import annotations

import os
import signal

from transformers import TrainerControl, TrainerState

from unified.warmup.preempt import PREEMPT_REQUEST, PreemptionCallback


def _step_end(callback: PreemptionCallback, step: int) -> TrainerControl:
    state = TrainerState()
    state.global_step = step
    return callback.on_step_end(None, state, TrainerControl())


def test_the_request_file_stops_with_a_save_and_a_stale_one_is_cleared(tmp_path):
    (tmp_path / PREEMPT_REQUEST).write_text("")  # left by the job before: cleared when the run starts
    callback = PreemptionCallback(tmp_path).install()
    try:
        control = _step_end(callback, 1)
        assert not control.should_save and not control.should_training_stop and callback.stopped_at is None
        (tmp_path / PREEMPT_REQUEST).write_text("")  # what slurm/lwm_warmup.sh writes on SIGUSR1
        control = _step_end(callback, 2)
        assert control.should_save and control.should_training_stop and callback.stopped_at == 2
    finally:
        callback.uninstall()


def test_sigusr1_stops_at_the_end_of_the_step_and_the_handler_is_restored(tmp_path):
    before = signal.getsignal(signal.SIGUSR1)
    callback = PreemptionCallback(tmp_path).install()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        control = _step_end(callback, 3)
        assert control.should_save and control.should_training_stop and callback.stopped_at == 3
    finally:
        callback.uninstall()
    assert signal.getsignal(signal.SIGUSR1) == before
