"""Pre-emption: a warning signal makes the trainer save a resumable checkpoint and stop, losing no step.

Slurm warns a job before its time limit (``#SBATCH --signal=B:USR1@600``); ``slurm/lwm_warmup.sh`` passes
the warning on to the trainer two ways, so that every launcher reaches it:

- SIGUSR1 to the trainer's srun step (srun relays it to its task: the ``python -m unified.warmup`` process
  of a one-process run);
- the file ``<output_dir>/preempt.request`` (read by rank 0 after every optimizer step; the way in for
  ``accelerate launch``, whose launcher does not relay SIGUSR1 to its ranks).

:class:`PreemptionCallback` then sets the HF Trainer's ``should_save`` and ``should_training_stop`` at the
end of the step under way (all ranks agree: the flag is all-reduced), so the checkpoint is the Trainer's own
``checkpoint-N``: weights, optimizer, scheduler, RNG states and the step (the data position: the Trainer
skips the batches already seen when it resumes). The requeued job reruns the same command in the same
output directory and ``resume: auto`` continues from ``checkpoint-N``: step count, metrics.jsonl and the
schedule go on where they stopped.
"""

from __future__ import annotations

import signal
from pathlib import Path

from transformers import TrainerCallback

PREEMPT_REQUEST = "preempt.request"
PREEMPTED_EXIT = 75
"""``python -m unified.warmup``'s exit status when it stopped on a pre-emption warning (EX_TEMPFAIL: run it again)."""


class Preempted(Exception):
    """The run stopped at ``step`` on a pre-emption warning after saving ``checkpoint``."""

    def __init__(self, step: int, checkpoint: Path):
        super().__init__(f"pre-empted at step {step}: saved {checkpoint}; rerun the same command (or requeue the "
                         "job) to resume from it")
        self.step, self.checkpoint = step, checkpoint


class PreemptionCallback(TrainerCallback):
    """Stop with a checkpoint at the end of the step during which SIGUSR1 arrived or ``preempt.request``
    appeared. Install with :meth:`install` (the signal handler; main thread only)."""

    def __init__(self, output_dir: str | Path):
        self.request = Path(output_dir) / PREEMPT_REQUEST
        self.signalled = False
        self.stopped_at: int | None = None
        self._previous = None

    def install(self) -> "PreemptionCallback":
        self.request.unlink(missing_ok=True)  # a request left by the job that was pre-empted before this one
        self._previous = signal.signal(signal.SIGUSR1, self._on_signal)
        return self

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGUSR1, self._previous)
            self._previous = None

    def _on_signal(self, signum, frame) -> None:
        self.signalled = True
        print("unified.warmup: SIGUSR1 (pre-emption warning): saving a checkpoint at the end of this step",
              flush=True)

    def _requested(self, state) -> bool:
        local = self.signalled or (state.is_world_process_zero and self.request.exists())
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            import torch

            backend = dist.get_backend()
            flag = torch.tensor([int(local)], device="cuda" if backend == "nccl" else "cpu")
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            return bool(flag.item())
        return local

    def on_step_end(self, args, state, control, **kwargs):
        if self.stopped_at is None and self._requested(state):
            self.stopped_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
        return control
