"""``BatchedDecision``: concurrent calls merged into one plan call (dynamic batching).

Callers that each send a request of a few rows (one image, one sentence) leave most of a
plan's throughput unused: a batch of 8 costs far less than 8 calls of 1. A batched
decision queues each call, and one dispatcher thread merges the calls that differ only
in their batch dimension into one plan call, up to the largest batch size the plan
serves, then hands each caller its own rows of the outputs. A lone request waits at most
``max_delay_ms`` for company.

What the decision promises holds per caller:

- **Which calls merge.** A request merges only where the plan would serve it: its
  signature is a raced case's at another batch size (or in a shape family the plan
  serves), its floating inputs are finite, it needs no gradients the plan lacks, and the
  plan is not disabled. Every other request is served as ``decision(...)`` serves it
  (eager fp32 for an unseen signature or a NaN, a refusal, the plan's error), alone, in
  its caller's thread. Calls merge only with calls made in the same grad mode, and with
  the same non-tensor arguments.
- **Sizes.** A plan that serves only its raced shapes is called at a raced batch size:
  the merged rows are padded up to the next one with copies of real rows (never invented
  values), and the pad rows' outputs are dropped. A plan whose dynamic shapes passed the
  held-out check is called at the merged size. Batches never exceed the largest raced
  size, or ``max_batch_size``.
- **Outputs.** Every output tensor must carry the batch dimension at the merged size;
  each caller gets its rows (views of the merged outputs) in the model's own structure.
  A model whose outputs do not (a pooled scalar) is served one call at a time from then
  on, with a warning.
- **The guard.** The merged call goes through the decision's guard: a plan failure falls
  back to eager fp32 for the merged inputs (and if eager fails too, each request is
  served again on its own, so one bad request fails alone); ``decision.health()`` counts
  callers' requests, and the latency watch times the merged plan call against the race's
  latency at that batch size.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
import warnings
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import attrs
import torch

from dlopt.contract.calling import caller_grad_mode, grad_mode_scope
from dlopt.platform.tree import iter_tensors, map_tensors
from dlopt.serving.served import ServedPlan
from dlopt.serving.signature import describe, family_key, resize_batch
from dlopt.vocabulary import Concurrency, GradMode

#: The default longest wait of a lone request for others to merge with.
DEFAULT_MAX_DELAY_MS = 2.0


@attrs.frozen
class BatchingStats:
    """What a batched decision did: ``requests`` taken, ``merged`` into ``batches`` plan
    calls (``rows`` rows, ``padded_rows`` of them copies added to reach a raced size),
    ``alone`` served one at a time (not mergeable, or after a merged call failed)."""

    requests: int
    batches: int
    merged: int
    rows: int
    padded_rows: int
    alone: int

    @property
    def mean_batch(self) -> float | None:
        """Requests per merged plan call (``None`` before the first)."""
        return self.merged / self.batches if self.batches else None


@attrs.define(eq=False)
class _Request:
    """One caller's call while it waits: a thread waits on ``future``; a coroutine awaits
    ``waiter``, an asyncio future of its event loop ``loop``."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    rows: int
    group: Hashable
    arrived: float
    future: Future[Any] | None = None
    loop: asyncio.AbstractEventLoop | None = None
    waiter: asyncio.Future[Any] | None = None


def _settle(answers: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    """Set the answers of one event loop's waiting coroutines (run on that loop)."""
    for waiter, value, error in answers:
        if waiter.done():
            continue  # the caller was cancelled
        if error is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(value)


def _deliver(answers: list[tuple[_Request, Any, BaseException | None]]) -> None:
    """Hand each request its answer: a waiting thread's future directly, and each event
    loop's coroutines together, with one wake-up of that loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}
    for request, value, error in answers:
        if request.future is not None:
            if error is not None:
                request.future.set_exception(error)
            else:
                request.future.set_result(value)
        elif request.loop is not None and request.waiter is not None:
            by_loop.setdefault(request.loop, []).append((request.waiter, value, error))
    for loop, pending in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(_settle, pending)


def _with_batch(key: Any, dim: int, size: int | None) -> Any:
    """``key`` (a signature key) with the size along ``dim`` of every tensor that has that
    dimension replaced by ``size`` (``None``: a wildcard, for grouping)."""
    if not isinstance(key, tuple) or not key:
        return key
    tag = key[0]
    if tag == "sig":
        return ("sig", _with_batch(key[1], dim, size), _with_batch(key[2], dim, size))
    if tag == "T":
        shape = key[2]
        if len(shape) <= dim:
            return key
        return ("T", key[1], (*shape[:dim], size, *shape[dim + 1 :]), key[3])
    if tag in ("(", "["):
        return (tag, *(_with_batch(part, dim, size) for part in key[1:]))
    if tag == "{":
        return ("{", *((name, _with_batch(value, dim, size)) for name, value in key[1:]))
    if tag == "o":
        return ("o", key[1], tuple((p, _with_batch(v, dim, size)) for p, v in key[2]))
    return key


class BatchedDecision:
    """Merges concurrent calls of a decision into one plan call (see the module docstring).

    Call it like the decision, from any number of threads (it blocks until the caller's
    rows are back), or ``await batched.acall(...)`` from an asyncio server. Up to
    ``max_concurrent_batches`` merged calls run at once (default 1; more only where the
    plan may be called from several threads at once, and only worth it where requests
    arrive faster than one batch at a time can take them). ``close()`` stops the
    dispatcher (requests still queued are served first).
    """

    def __init__(
        self,
        served: ServedPlan,
        *,
        batch_dim: int,
        raced_sizes: Sequence[int],
        max_batch_size: int | None = None,
        max_delay_ms: float = DEFAULT_MAX_DELAY_MS,
        max_concurrent_batches: int | None = None,
        serve_alone: Callable[..., Any] | None = None,
    ) -> None:
        self.served = served
        self.batch_dim = batch_dim
        self.raced_sizes = tuple(sorted(set(raced_sizes)))
        self.dynamic = bool(served.families)
        largest = self.raced_sizes[-1] if self.raced_sizes else 1
        if max_batch_size is not None and not self.dynamic:
            largest = min(largest, max_batch_size)  # a static plan serves its raced sizes
        elif max_batch_size is not None:
            largest = max_batch_size
        self.max_batch_size = largest
        self.max_delay_s = max_delay_ms / 1e3
        if served.concurrency is Concurrency.SERIALIZED:
            max_concurrent_batches = 1  # the plan runs one call at a time anyway
        # One batch at a time by default: the dispatcher runs it itself (no hand-off), and
        # callers that wait for their answers come back together for the next one.
        self.max_concurrent_batches = max_concurrent_batches or 1
        self._slots = threading.Semaphore(self.max_concurrent_batches)
        self._workers = (
            ThreadPoolExecutor(
                max_workers=self.max_concurrent_batches, thread_name_prefix="dlopt-batch"
            )
            if self.max_concurrent_batches > 1
            else None
        )
        self._alone = serve_alone or served
        self._cond = threading.Condition()
        self._groups: dict[Hashable, collections.deque[_Request]] = {}
        self._rows: dict[Hashable, int] = {}
        self._closed = False
        self._unbatchable: str | None = None
        self._known: dict[Hashable, tuple[int, Hashable] | None] = {}
        self._counts = collections.Counter[str]()
        self._count_lock = threading.Lock()
        self._thread = threading.Thread(target=self._dispatch, name="dlopt-batcher", daemon=True)
        self._thread.start()

    # -- the caller's side ----------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self._request(args, kwargs)
        if request is None:
            self._count("alone")
            return self._alone(*args, **kwargs)
        future: Future[Any] = Future()
        request.future = future
        self._submit(request)
        return future.result()

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        """The call, awaited: an asyncio server's event loop is never blocked (a request
        that cannot merge is served in the loop's default executor)."""
        request = self._request(args, kwargs)
        if request is None:
            self._count("alone")
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, lambda: self._alone(*args, **kwargs))
        request.loop = loop = asyncio.get_running_loop()
        request.waiter = waiter = loop.create_future()
        self._submit(request)
        return await waiter

    def _request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Request | None:
        """The queued form of a call that may merge, or ``None`` to serve it alone."""
        if self._unbatchable is not None or self._closed:
            return None
        key = self.served.plan_bound(args, kwargs)
        if key is None:
            return None  # eager, a refusal or an error: as the decision serves it, alone
        if key in self._known:
            found = self._known[key]
        else:
            found = self._batch_rows(key, args, kwargs)
            if len(self._known) > 4096:
                self._known.clear()
            self._known[key] = found
        if found is None:
            return None
        rows, group = found
        return _Request(args, kwargs, rows, (group, caller_grad_mode()), time.monotonic())

    def _batch_rows(
        self, key: Hashable, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[int, Hashable] | None:
        """``(rows, group)`` of a request the plan serves at a merged size: every tensor
        has the batch dimension, all of one size, and the signature at some raced size is
        raced (or its family served). ``None`` otherwise."""
        tensors = iter_tensors((args, kwargs))
        sizes = {t.shape[self.batch_dim] for t in tensors if t.dim() > self.batch_dim}
        if len(sizes) != 1 or any(t.dim() <= self.batch_dim for t in tensors):
            return None
        (rows,) = sizes
        if rows < 1 or rows >= self.max_batch_size:
            return None  # nothing to merge it with
        if self.dynamic:
            if describe(family_key(key)) not in self.served.families:
                return None
        elif not any(
            describe(_with_batch(key, self.batch_dim, size)) in self.served.raced
            for size in self.raced_sizes
        ):
            return None
        return int(rows), _with_batch(key, self.batch_dim, None)

    def _submit(self, request: _Request) -> None:
        with self._cond:
            closed = self._closed
            if not closed:
                queue = self._groups.setdefault(request.group, collections.deque())
                queue.append(request)
                rows = self._rows[request.group] = self._rows.get(request.group, 0) + request.rows
                # The dispatcher waits for the oldest request's deadline: it needs waking
                # only for a new group (a new deadline) or a full batch.
                if len(queue) == 1 or rows >= self.max_batch_size:
                    self._cond.notify()
        if closed:
            self._serve_each([request])

    # -- the dispatcher ------------------------------------------------------------------
    def _dispatch(self) -> None:
        while True:
            # A batch forms only once a worker can run it: while every worker is busy,
            # requests keep arriving and the next batch is the fuller for it.
            self._slots.acquire()
            batch = self._next_batch()
            if batch is None:
                self._slots.release()
                return
            if self._workers is None:
                self._run_and_free(batch)
            else:
                self._workers.submit(self._run_and_free, batch)

    def _run_and_free(self, batch: list[_Request]) -> None:
        try:
            self._run(batch)
        finally:
            self._slots.release()

    def _next_batch(self) -> list[_Request] | None:
        """The next requests to merge: the group whose oldest request came first, once it
        has rows for a full batch or that request has waited ``max_delay_ms``."""
        with self._cond:
            while True:
                if not self._groups:
                    if self._closed:
                        return None
                    self._cond.wait()
                    continue
                group = min(self._groups, key=lambda g: self._groups[g][0].arrived)
                waited = time.monotonic() - self._groups[group][0].arrived
                if (
                    self._rows[group] >= self.max_batch_size
                    or waited >= self.max_delay_s
                    or self._closed
                ):
                    return self._take(group)
                self._cond.wait(self.max_delay_s - waited)

    def _take(self, group: Hashable) -> list[_Request]:
        queue = self._groups[group]
        taken = [queue.popleft()]
        rows = taken[0].rows
        while queue and rows + queue[0].rows <= self.max_batch_size:
            rows += queue[0].rows
            taken.append(queue.popleft())
        self._rows[group] -= rows
        if not queue:
            del self._groups[group], self._rows[group]
        return taken

    def _run(self, batch: list[_Request]) -> None:
        if len(batch) == 1:
            self._serve_each(batch)
            return
        mode: GradMode = batch[0].group[1]  # type: ignore[index]
        try:
            with grad_mode_scope(mode):
                args, kwargs, rows, size = self._merge(batch)
                out = self.served.serve(args, kwargs, requests=len(batch))
                parts = self._split(out, batch, size)
        except _Unsplittable as exc:
            self._give_up_batching(str(exc))
            self._serve_each(batch)
            return
        except Exception:
            # The plan and eager fp32 both failed on the merged inputs: serve each request
            # on its own, so a bad request fails alone and the others are answered.
            self._serve_each(batch)
            return
        self._count("batches")
        self._count("merged", len(batch))
        self._count("rows", rows)
        self._count("padded_rows", size - rows)
        _deliver([(request, part, None) for request, part in zip(batch, parts)])

    def _serve_each(self, batch: list[_Request]) -> None:
        for request in batch:
            self._count("alone")
            mode: GradMode = request.group[1]  # type: ignore[index]
            try:
                with grad_mode_scope(mode):
                    result = self._alone(*request.args, **request.kwargs)
            except BaseException as exc:
                _deliver([(request, None, exc)])
            else:
                _deliver([(request, result, None)])

    def _merge(self, batch: list[_Request]) -> tuple[tuple[Any, ...], dict[str, Any], int, int]:
        """One call's inputs from ``batch``: each tensor the batch's along the batch
        dimension, padded with copies of real rows up to a size the plan serves."""
        rows = sum(r.rows for r in batch)
        size = rows if self.dynamic else next(s for s in self.raced_sizes if s >= rows)
        flat = [_flat_inputs(r.args, r.kwargs) for r in batch]
        merged = []
        dim = self.batch_dim
        for leaves in zip(*flat):
            merged.append(torch.cat(leaves, dim=dim))
        first = batch[0]
        if not first.kwargs and all(type(a) is torch.Tensor for a in first.args):
            args: tuple[Any, ...] = tuple(merged)
            kwargs: dict[str, Any] = {}
        else:
            it = iter(merged)
            args, kwargs = map_tensors(lambda _: next(it), (first.args, first.kwargs))
        if size > rows:
            padded = resize_batch(args, kwargs, dim, size)  # copies of real rows
            assert padded is not None  # every merged tensor carries the batch dimension
            args, kwargs = padded
        return args, kwargs, rows, size

    def _split(self, out: Any, batch: list[_Request], size: int) -> list[Any]:
        """Each request's rows of the merged outputs, in the outputs' structure."""
        dim = self.batch_dim
        leaves = [out] if type(out) is torch.Tensor else iter_tensors(out)
        for tensor in leaves:
            if tensor.dim() <= dim or tensor.shape[dim] != size:
                raise _Unsplittable(
                    f"an output of shape {tuple(tensor.shape)} has no batch dimension {dim} "
                    f"of the merged size {size}"
                )
        parts = []
        start = 0
        for request in batch:
            offset = start
            if type(out) is torch.Tensor:
                parts.append(out.narrow(dim, offset, request.rows))
            else:
                parts.append(map_tensors(_narrowed(dim, offset, request.rows), out))
            start += request.rows
        return parts

    def _give_up_batching(self, why: str) -> None:
        if self._unbatchable is None:
            self._unbatchable = why
            warnings.warn(
                f"plan {self.served.plan_name!r}: calls cannot be merged ({why}); each call "
                "is served on its own from now on",
                RuntimeWarning,
                stacklevel=2,
            )

    # -- what it did -----------------------------------------------------------------------
    def _count(self, what: str, n: int = 1) -> None:
        with self._count_lock:
            self._counts[what] += n
            if what in ("alone", "merged"):
                self._counts["requests"] += n

    def stats(self) -> BatchingStats:
        """Requests, batches and rows so far (:class:`BatchingStats`)."""
        with self._count_lock:
            c = self._counts
            return BatchingStats(
                requests=c["requests"],
                batches=c["batches"],
                merged=c["merged"],
                rows=c["rows"],
                padded_rows=c["padded_rows"],
                alone=c["alone"],
            )

    @property
    def unbatchable(self) -> str | None:
        """Why calls are no longer merged (``None`` while they are)."""
        return self._unbatchable

    def close(self) -> None:
        """Serve what is queued, then stop the dispatcher and its workers."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)
        if self._workers is not None:
            self._workers.shutdown(wait=True)

    def __enter__(self) -> BatchedDecision:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _narrowed(dim: int, start: int, rows: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """One request's rows of a merged output tensor."""
    return lambda t: t.narrow(dim, start, rows)


def _flat_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """A request's tensors in the walker's order (plain tensor arguments read directly)."""
    if not kwargs and all(type(a) is torch.Tensor for a in args):
        return list(args)
    return iter_tensors((args, kwargs))


class _Unsplittable(Exception):
    """The merged outputs have no batch dimension to split along."""
