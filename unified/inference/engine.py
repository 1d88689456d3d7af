"""One engine per loaded model: one thread generates, every caller holds a future.

A process may have several clients of one checkpoint at once: the policy's episodes, the rubric
judge, a simulated user, simulated search, the loopback server's HTTP handlers. They all go through
the one :class:`Engine` of that checkpoint (:func:`engine_for`, one per loaded model object, so one
per :func:`unified.inference.shared.shared_checkpoint`): :meth:`Engine.submit` queues a
:class:`GenerationJob` and returns a :class:`concurrent.futures.Future` of its
:class:`unified.models.generation.GenerationOutput`; nobody but the engine's thread touches the
weights for generation, and no client drives a decode step.

The engine's thread runs a loop (vLLM's ``LLMEngine.step`` shape, Orca-style iteration-level
scheduling):

1. take every job queued since the last step (block only when nothing is decoding);
2. a *continuous* job joins :class:`unified.models.continuous.ContinuousBatcher` (a row that joins
   at the next step and leaves when it ends); a *gathered* job (``continuous=False``, or a model the
   batcher does not support) waits up to ``gather_s`` seconds for others, then the gathered jobs are
   generated together as left-padded batches (:func:`unified.models.generation.batched_generate`,
   one per sampling setting and client);
3. a :class:`CallJob` (log-likelihood scoring for the server's ``echo``) runs between steps;
4. one decode step of every live row; the rows that ended resolve their futures.

Each job brings its client's :class:`unified.models.prefix_cache.PrefixCache` and
:class:`unified.models.continuous.ContinuousStats`, so clients keep their own cache budget and
counters while sharing steps. ``max_rows`` is the largest any client asked for. An error inside a
step fails the futures of every row in it (the batcher's state is unknown) and the engine starts
afresh; an error in one job's admission fails that job only.

The thread holds the model's :func:`unified.inference.shared.model_lock` for each step (code that
runs the model outside the engine, the warmup's trainer say, takes the same lock). It exits after
:data:`IDLE_EXIT_S` seconds without work and is started again by the next submit, so an engine keeps
no reference to a model nobody uses any more.

A client's thread that ran torch's OpenMP-parallel code (loading the weights, say) keeps a pool of
idle OpenMP workers. GNU OpenMP counts them, and once it manages more threads than there are CPUs
its workers spin only briefly before sleeping, so every parallel op of the engine's steps pays a
futex wake-up: on a 2-core machine a decode step ran on ~1 core instead of 2 (cpu/wall 1.06 vs
1.94, 20-30% slower). :meth:`Engine.submit` therefore hands the submitting thread's idle pool back
(:func:`release_openmp_threads`) before it waits on the engine.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import queue
import threading
import time
import weakref
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from unified.inference.shared import model_lock
from unified.models.continuous import ContinuousBatcher, ContinuousStats, continuous_batching_supported
from unified.models.generation import GenerationOutput, SamplingParams, batched_generate, past_deadline
from unified.models.prefix_cache import PrefixCache

IDLE_EXIT_S = 5.0
"""Seconds the engine's thread waits for work before it exits (the next submit starts a new one)."""


@dataclass
class GenerationJob:
    """One prompt to complete."""

    prompt: str | list[int]
    """Chat-templated text or token ids."""
    params: SamplingParams
    deadline: float | None = None
    """``time.monotonic()`` at which the row ends (``finish_reason="timeout"``, text so far kept)."""
    continuous: bool = True
    """Join the continuous batch (False: a gathered left-padded batch)."""
    prefix_cache: PrefixCache | None = None
    stats: ContinuousStats | None = None
    future: Future = field(default_factory=Future)


@dataclass
class CallJob:
    """``fn(loaded)`` run on the engine's thread between steps (scoring a prompt's log-likelihood)."""

    fn: Callable[[Any], Any]
    future: Future = field(default_factory=Future)


@functools.lru_cache(maxsize=1)
def _gomp_pause() -> Callable[[int], int] | None:
    """GNU OpenMP's ``omp_pause_resource_all`` from the copy this process loaded (torch's), or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "libgomp" in line and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            return ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_NOLOAD", 0) | ctypes.RTLD_LOCAL).omp_pause_resource_all
        except (OSError, AttributeError):
            continue
    return None


def release_openmp_threads() -> bool:
    """Free the calling thread's idle OpenMP worker pool (``omp_pause_resource_all(omp_pause_soft)``,
    which GNU OpenMP applies to the calling thread only; its next parallel op starts a new pool).
    True when a GNU OpenMP runtime was found and did it; False otherwise (nothing to free)."""
    pause = _gomp_pause()
    return pause is not None and pause(1) == 0


def timed_out_output() -> GenerationOutput:
    """The output of a job whose deadline passed before it started: no text."""
    return GenerationOutput(text="", finish_reason="timeout")


def chain(future: Future, fn: Callable[[Any], Any]) -> Future:
    """A future of ``fn(future.result())`` (an exception of either is the new future's)."""
    out: Future = Future()

    def done(f: Future) -> None:
        try:
            out.set_result(fn(f.result()))
        except BaseException as exc:  # noqa: BLE001 (handed to the waiter)
            out.set_exception(exc)

    future.add_done_callback(done)
    return out


class Engine:
    """The generation thread of one loaded model; see the module docstring."""

    def __init__(self, loaded: Any, *, max_rows: int = 16, gather_s: float = 0.05) -> None:
        self._loaded = weakref.ref(loaded)
        self.max_rows = max(1, max_rows)
        self.gather_s = gather_s
        self.continuous_supported, self.why_not_continuous = continuous_batching_supported(loaded.model)
        self._jobs: queue.SimpleQueue[GenerationJob | CallJob] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Fail every queued and running job (:class:`EngineStopped`) and end the thread after its current step;
        True when it ended within ``timeout_s``. Called for every engine at interpreter exit (:func:`stop_engines`):
        a daemon thread still inside a torch op when the interpreter finalises aborts the process ("terminate
        called without an active exception", exit status 134), as a judge request left running by a grader that
        timed out did at the end of an eval whose results were all written."""
        self._stopping = True
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            self._jobs.put(CallJob(lambda loaded: None))  # wakes an idle thread now, not after IDLE_EXIT_S
            thread.join(timeout_s)
            if thread.is_alive():
                return False
        self._stopping = False  # a later submit starts a fresh thread
        return True

    def reserve(self, max_rows: int) -> None:
        """Let the engine decode at least ``max_rows`` rows together (a client's batch size)."""
        self.max_rows = max(self.max_rows, int(max_rows))

    def submit(self, job: GenerationJob | CallJob) -> Future:
        """Queue ``job``; its future resolves on the engine's thread."""
        if isinstance(job, GenerationJob) and past_deadline(job.deadline):
            job.future.set_result(timed_out_output())
            return job.future
        release_openmp_threads()  # this thread's idle OpenMP workers would throttle the engine's (module docstring)
        with self._lock:
            self._jobs.put(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="unified-engine", daemon=True)
                self._thread.start()
        return job.future

    def generate(self, prompt: str | list[int], params: SamplingParams, **options: Any) -> Future:
        """``submit(GenerationJob(prompt, params, **options))``."""
        return self.submit(GenerationJob(prompt, params, **options))

    def call(self, fn: Callable[[Any], Any]) -> Future:
        """``submit(CallJob(fn))``: ``fn(loaded)`` on the engine's thread."""
        return self.submit(CallJob(fn))

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # the engine's thread -------------------------------------------------------------------
    def _run(self) -> None:
        loaded = self._loaded()
        state = _Loop(self, loaded)
        try:
            while True:
                if self._stopping:
                    raise EngineStopped("the engine was stopped (the process is exiting)")
                if not state.take(self._jobs):
                    with self._lock:  # nothing came within IDLE_EXIT_S: exit unless a job just arrived
                        if self._jobs.empty():
                            self._thread = None
                            return
                    continue
                state.work()
        except BaseException as exc:  # noqa: BLE001 (a bug in the loop: fail every waiter, let submit restart)
            with self._lock:
                self._thread = None
                pending = []
                while not self._jobs.empty():
                    pending.append(self._jobs.get())
            state.fail_all(exc, pending)


class _Loop:
    """What the engine's thread holds between steps (only that thread touches it)."""

    def __init__(self, engine: Engine, loaded: Any) -> None:
        self.engine, self.loaded = engine, loaded
        self.lock = model_lock(loaded.model)
        self.batcher: ContinuousBatcher | None = None
        self.live: dict[int, GenerationJob] = {}
        self.gathered: list[GenerationJob] = []
        self.gather_until = 0.0
        self.count = 0

    def take(self, jobs: queue.SimpleQueue) -> bool:
        """Queue the jobs waiting; block while nothing is decoding. False: idle for IDLE_EXIT_S."""
        first = True
        while True:
            if self.live or (self.gathered and not first):
                timeout = 0.0
            elif self.gathered:
                timeout = max(0.0, self.gather_until - time.monotonic())
            else:
                timeout = IDLE_EXIT_S if first else 0.0
            try:
                job = jobs.get(timeout=timeout) if timeout > 0 else jobs.get_nowait()
            except queue.Empty:
                return not first or bool(self.live or self.gathered)
            first = False
            self._queue(job)

    def _queue(self, job: GenerationJob | CallJob) -> None:
        if isinstance(job, CallJob):
            try:
                with self.lock:
                    job.future.set_result(job.fn(self.loaded))
            except Exception as exc:  # reported to its caller, the engine goes on
                job.future.set_exception(exc)
            return
        if not job.future.set_running_or_notify_cancel():
            return
        if past_deadline(job.deadline):
            job.future.set_result(timed_out_output())
        elif job.continuous and self.engine.continuous_supported:
            try:
                if self.batcher is None:
                    with self.lock:
                        self.batcher = ContinuousBatcher(self.loaded.model, self.loaded.tokenizer,
                                                         max_rows=self.engine.max_rows, prefix_cache=None)
                self.batcher.max_rows = self.engine.max_rows
                self.count += 1
                self.batcher.add(self.count, job.prompt, job.params, job.deadline, prefix_cache=job.prefix_cache,
                                 stats=job.stats if job.stats is not None else ContinuousStats())
                self.live[self.count] = job
            except Exception as exc:  # a bad prompt or setting belongs to that job only
                job.future.set_exception(exc)
        else:
            if not self.gathered:
                self.gather_until = time.monotonic() + self.engine.gather_s
            self.gathered.append(job)

    def work(self) -> None:
        """Run the gathered batch when it is due, then one decode step of the live rows."""
        if self.gathered and (time.monotonic() >= self.gather_until or len(self.gathered) >= self.engine.max_rows):
            self._run_gathered()
        if self.live:
            self._step()

    def _step(self) -> None:
        try:
            with self.lock:
                finished = self.batcher.step()
        except Exception as exc:  # the batcher's state is unknown: fail what it held, start afresh
            for job in self.live.values():
                job.future.set_exception(exc)
            self.live.clear()
            self.batcher = None
            return
        for key, output in finished:
            self.live.pop(key).future.set_result(output)

    def _run_gathered(self) -> None:
        jobs, self.gathered = self.gathered, []
        tokenizer = self.loaded.tokenizer
        groups: dict[tuple, list[GenerationJob]] = {}  # one batch per sampling setting and client
        for job in jobs:
            groups.setdefault((job.params, id(job.prefix_cache), id(job.stats)), []).append(job)
        for group in groups.values():
            first = group[0]
            try:
                prompts = [tokenizer.decode(j.prompt) if isinstance(j.prompt, list) else j.prompt for j in group]
                with self.lock:
                    outputs = batched_generate(self.loaded.model, tokenizer, prompts, first.params,
                                               max_batch_size=self.engine.max_rows, prefix_cache=first.prefix_cache,
                                               stats=first.stats, deadlines=[j.deadline for j in group])
            except Exception as exc:  # reported to every job of the batch
                for job in group:
                    job.future.set_exception(exc)
                continue
            for job, output in zip(group, outputs):
                job.future.set_result(output)

    def fail_all(self, exc: BaseException, pending: list) -> None:
        for job in [*self.live.values(), *self.gathered, *pending]:
            if not job.future.done():
                job.future.set_exception(exc)


_ENGINES: "weakref.WeakKeyDictionary[Any, Engine]" = weakref.WeakKeyDictionary()
_ENGINES_LOCK = threading.Lock()


class EngineStopped(RuntimeError):
    """What the jobs of a stopped engine fail with."""


def stop_engines(timeout_s: float = 30.0) -> None:
    """Stop every engine's thread (:meth:`Engine.stop`); registered with :mod:`atexit`."""
    with _ENGINES_LOCK:
        engines = list(_ENGINES.values())
    for engine in engines:
        engine.stop(timeout_s)


atexit.register(stop_engines)


def engine_for(loaded: Any, *, max_rows: int = 16) -> Engine:
    """The one :class:`Engine` of ``loaded``'s model (created on first use), able to decode at
    least ``max_rows`` rows together."""
    with _ENGINES_LOCK:
        engine = _ENGINES.get(loaded.model)
        if engine is None or engine._loaded() is None:
            engine = _ENGINES[loaded.model] = Engine(loaded, max_rows=max_rows)
        engine.reserve(max_rows)
        return engine
