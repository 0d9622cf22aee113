"""The sans-IO shape every stateful operator shares, and its thin Rx wrapper.

A :class:`Reducer` turns each input item into zero or more outputs
(``step``), may add outputs at the end (``finish``) or before an upstream
error is forwarded (``fail``). :func:`reducer_operator` runs a fresh reducer
per subscription and keeps the Rx grammar: nothing after a terminal event,
exceptions raised by a reducer become ``on_error``, upstream is disposed on
error, completion and unsubscribe.

Reducers compose without intermediate observables (:class:`Chain`): reducer
operators piped one after another fuse into one chain on the first one's
source (:class:`ReducedObservable`), and a :class:`SyncSource` (``from_sse``
over bytes) is driven by that chain directly, so ``from_sse(...).pipe(
convert(), aggregate())`` is one loop with no observer calls in between.
"""

from __future__ import annotations

import asyncio
import threading
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, Disposable, SingleAssignmentDisposable
from reactivex.internal.exceptions import SequenceContainsNoElementsError
from reactivex.scheduler import CurrentThreadScheduler

from rafrx.typing import Operator

__all__ = ["Chain", "ReducedObservable", "Reducer", "SyncSource", "reducer_operator"]

In = TypeVar("In", contravariant=True)
Out = TypeVar("Out", covariant=True)
A = TypeVar("A")
B = TypeVar("B")

_NOTHING: tuple[()] = ()


class Reducer(Protocol[In, Out]):
    """A pure, per-subscription state machine."""

    def step(self, item: In) -> Sequence[Out]:
        """Outputs for one input item."""
        ...

    def finish(self) -> Sequence[Out]:
        """Outputs owed when the input completes."""
        ...

    def fail(self, error: Exception) -> Sequence[Out]:
        """Outputs to emit before the upstream ``error`` is forwarded."""
        ...


class Chain(Generic[A, B]):
    """Reducers run one after the other, as ``pipe`` would, without observables between.

    ``finish`` and ``fail`` of an earlier stage feed the later stages before
    those finish (or fail) themselves. When a stage's ``step`` raises, the
    outputs it produced before that still pass the later stages and come
    first from ``fail``, which then starts at the stage that raised: exactly
    what the piped operators would emit.
    """

    __slots__ = ("_failed_at", "_owed", "_stages")

    def __init__(self, *stages: Reducer[Any, Any]) -> None:
        self._stages = stages
        self._failed_at = 0  # the stage whose step raised; earlier stages never see the error
        self._owed: Sequence[Any] = _NOTHING  # outputs due before that error

    @property
    def stages(self) -> tuple[Reducer[Any, Any], ...]:
        """The reducers, in order."""
        return self._stages

    def step(self, item: A) -> Sequence[B]:
        # The hot path: one item in, usually one item out of every stage.
        if len(self._stages) == 2:  # e.g. convert() + aggregate(): unrolled, twice as fast
            first, second = self._stages
            try:
                middle = first.step(item)
            except Exception:
                self.raised(0, _NOTHING)
                raise
            if len(middle) != 1:
                return self._run(1, middle)
            try:
                return second.step(middle[0])
            except Exception:
                self.raised(1, _NOTHING)
                raise
        items: Sequence[Any] = (item,)
        for k, stage in enumerate(self._stages):
            if len(items) != 1:
                return self._run(k, items)
            try:
                items = stage.step(items[0])
            except Exception:
                self.raised(k, _NOTHING)
                raise
        return items

    def _run(self, first: int, items: Sequence[Any]) -> Sequence[Any]:
        for k in range(first, len(self._stages)):
            items = self._through(k, items)
            if not items:
                return _NOTHING
        return items

    def _through(self, k: int, items: Sequence[Any]) -> list[Any]:
        """Every item stepped through stage ``k``; on an error, what it produced is owed."""
        stage = self._stages[k]
        produced: list[Any] = []
        for x in items:
            try:
                produced.extend(stage.step(x))
            except Exception:
                self.raised(k, produced)
                raise
        return produced

    def raised(self, stage: int, produced: Sequence[Any] = _NOTHING) -> None:
        """Record that ``stage``'s step raised after producing ``produced``, for :meth:`fail`.

        :meth:`step` does this itself; a reducer that runs a stage's work
        outside it (a fast path) calls it before re-raising.
        """
        # Piped, ``produced`` would have reached the observer before the error. If a
        # later stage raises on it, that error came first and replaces this one.
        self._failed_at = stage
        self._owed = _NOTHING
        self._owed = self._run(stage + 1, produced)

    def finish(self) -> Sequence[B]:
        items: Sequence[Any] = _NOTHING
        for k, stage in enumerate(self._stages):
            if not items:  # (the usual case: a stage's finish feeds none to the next)
                try:
                    items = stage.finish()
                except Exception:
                    self.raised(k, _NOTHING)
                    raise
                continue
            produced = self._through(k, items)
            try:
                produced.extend(stage.finish())
            except Exception:
                self.raised(k, produced)
                raise
            items = produced
        return items

    def fail(self, error: Exception) -> Sequence[B]:
        items: list[Any] = list(self._owed)
        tail: list[Any] = []
        for stage in self._stages[self._failed_at :]:
            tail = [out for x in tail for out in stage.step(x)]
            tail.extend(stage.fail(error))
        return items + tail


def reducer_operator(factory: Callable[[], Reducer[A, B]]) -> Operator[A, B]:
    """Wrap a reducer factory as an Rx operator (one reducer per subscription).

    Applied to an observable that is itself a reducer operator's output, the
    operator fuses with it: the two reducers run as one :class:`Chain` on the
    original source, so a pipe of reducer operators costs one subscription and
    one observer call per item, however long it is. What subscribers see is
    exactly what the separate operators would emit.

    Example:
        >>> import reactivex
        >>> from rafrx import updates as u
        >>> from rafrx.operators import accumulate_tool_calls, aggregate
        >>> fused = reactivex.of(u.TextDelta("Hi")).pipe(accumulate_tool_calls(), aggregate())
        >>> type(fused).__name__, fused.run().text
        ('ReducedObservable', 'Hi')
    """

    def operator(source: Observable[A]) -> Observable[B]:
        if type(source) is ReducedObservable:  # (isinstance: an ABC check per pipe)
            return ReducedObservable(source.source, _chained(source.factory, factory))
        return ReducedObservable(source, factory)

    return operator


def _chained(
    first: Callable[[], Reducer[A, Any]], second: Callable[[], Reducer[Any, B]]
) -> Callable[[], Reducer[A, B]]:
    def factory() -> Reducer[A, B]:
        stages: list[Reducer[Any, Any]] = []
        for reducer in (first(), second()):
            stages.extend(reducer.stages if isinstance(reducer, Chain) else (reducer,))
        return Chain(*stages)

    return factory


class _LazyLock:
    """``Observable.lock``, made when first asked for.

    ``Observable.__init__`` makes an ``RLock`` per observable (two Python
    calls), which only some reactivex operators take (``take_while``,
    ``delay``…): a stream builds three observables and never takes it.
    """

    _making = threading.Lock()  # (two threads asking first get the same lock)

    def __get__(self, observable: object, owner: type | None = None) -> Any:
        if observable is None:
            return self
        with self._making:
            kept = vars(observable)
            if "lock" not in kept:  # (then it is found there, without this descriptor)
                kept["lock"] = threading.RLock()
            return kept["lock"]


class _DirectPipe(Observable[A]):
    """An Observable whose ``pipe`` applies the operators one after the other itself.

    The result is reactivex's ``pipe``; what is saved is its machinery (an
    import, a composed function and a reduce per call), once per stream.
    Typed callers see ``Observable.pipe``: ``from_sse`` and the operators
    return ``Observable``.

    Subclasses do not call ``Observable.__init__``: what it sets is a
    ``lock`` (here made when first asked for) and the ``_subscribe`` function
    that ``_subscribe_core`` calls, which they override.
    """

    lock = _LazyLock()
    _subscribe = None

    def pipe(self, *operators: Callable[[Any], Any]) -> Any:
        source: Any = self
        for operator in operators:
            source = operator(source)
        return source


def _never() -> bool:
    return False


def _soon(action: Callable[[], None], scheduler: abc.SchedulerBase | None) -> abc.DisposableBase:
    """Run ``action`` as ``reactivex.from_iterable`` runs its loop.

    On ``scheduler`` when one is given (``Observable.run`` passes a new
    thread's); else on the current thread's trampoline when one is running
    (inside Rx's ``subscribe``, which stores the subscription's disposable
    before the next action: a subscriber that disposes, ``take(n)``, can stop
    the source); else now, during the call.
    """

    def run(_scheduler: abc.SchedulerBase, _state: Any = None) -> None:
        action()

    if scheduler is not None and not isinstance(scheduler, CurrentThreadScheduler):
        return scheduler.schedule(run)
    trampoline = CurrentThreadScheduler.singleton()
    if trampoline.schedule_required():  # no trampoline running: a direct call
        action()
    else:
        trampoline.schedule(run)
    return Disposable()


class SyncSource(_DirectPipe[A]):
    """A cold source that reads its input synchronously, as ``reactivex.from_iterable`` does.

    Subclasses implement :meth:`drive`; a subscription runs it as
    :func:`_soon` says (at once when nothing else decides), and disposing it
    stops the drive. A reducer operator applied to one calls :meth:`drive`
    with its own callbacks instead of subscribing through Rx observers, which
    saves an observer call per item. ``from_sse`` over bytes or a sync
    iterable is one.
    """

    @abstractmethod
    def drive(
        self,
        on_next: Callable[[A], None],
        on_error: Callable[[Exception], None],
        on_completed: Callable[[], None],
        stopped: Callable[[], bool] = _never,
    ) -> None:
        """Emit every item, then exactly one of ``on_error`` or ``on_completed``.

        Once ``stopped()`` is true (the subscriber disposed), stop reading
        soon and call neither.
        """

    def _subscribe_core(
        self, observer: abc.ObserverBase[A], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        disposed = False

        def dispose() -> None:
            nonlocal disposed
            disposed = True

        def drive() -> None:
            self.drive(observer.on_next, observer.on_error, observer.on_completed, lambda: disposed)

        return CompositeDisposable(_soon(drive, scheduler), Disposable(dispose))


class ReducedObservable(_DirectPipe[B]):
    """``source`` through a fresh reducer from ``factory`` per subscription.

    What :func:`reducer_operator` returns; ``source`` and ``factory`` are what
    a following reducer operator fuses with.
    """

    def __init__(self, source: Observable[Any], factory: Callable[[], Reducer[Any, B]]) -> None:
        self.source = source
        self.factory = factory

    def run(self, scheduler: abc.SchedulerBase | None = None) -> B:
        """The last item, as :meth:`reactivex.Observable.run` returns it.

        Over a :class:`SyncSource` everything happens during the call, so this
        subscribes directly, without Rx's trampoline and thread latch (about
        0.1 ms a stream); otherwise, or with a ``scheduler``, it is Rx's ``run``.

        Raises:
            RuntimeError: Called in a running event loop's thread (a Jupyter cell,
                a coroutine) on a stream that does not end during the call: it may
                need that loop (an HTTP stream), which Rx's ``run`` would wait for
                forever, so it is refused even when another thread or a timer
                drives it. Await it instead.
            Exception: The error the stream ended with.
            SequenceContainsNoElementsError: The stream completed empty.
        """
        source = self.source
        if scheduler is None and SyncSource in type(source).__mro__:  # (isinstance: ABC's check)
            sync: SyncSource[Any] = source  # type: ignore[assignment]
            last: _Last[B] = _Last()  # (no _Last[B](): a typing call per stream)
            self._attach(last, None, now=sync)
            return last.value()
        if scheduler is None and _loop_running():
            # Rx's run() would wait on this thread for a source the loop drives (an
            # HTTP stream): it would wait forever. A synchronous source still works.
            last = _Last()
            subscription = self._attach(last, None)
            if not last.ended:
                subscription.dispose()
                raise RuntimeError(
                    "run() blocks until the stream ends, and this stream needs the event "
                    "loop running in this thread: await it instead (`await observable`, "
                    "or `await rafrx.collect_agent_response(results)`)"
                )
            return last.value()
        return super().run(scheduler)

    def _subscribe_core(
        self, observer: abc.ObserverBase[B], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        return self._attach(observer, scheduler)

    def _attach(
        self,
        observer: abc.ObserverBase[B],
        scheduler: abc.SchedulerBase | None,
        *,
        now: SyncSource[Any] | None = None,
    ) -> abc.DisposableBase:
        """Subscribe ``observer``; ``now``: the source, a :class:`SyncSource`, to drive
        during the call (it has ended on return: nothing is left to dispose)."""
        reducer = self.factory()
        stopped = False
        raised: Exception | None = None  # what observer.on_next raised: the source may send it
        upstream: SingleAssignmentDisposable | None = None  # (driven now: none)

        def stop() -> None:
            nonlocal stopped
            stopped = True
            if upstream is not None:
                upstream.dispose()

        def on_next(item: Any) -> None:
            if stopped:
                return
            try:
                outputs = reducer.step(item)
            except Exception as exc:  # a typed protocol error (or a bug): fail like upstream
                on_error(exc)
                return
            for out in outputs:
                try:
                    observer.on_next(out)
                except Exception as exc:
                    nonlocal raised
                    raised = exc
                    raise

        def on_error(error: Exception) -> None:
            if stopped:
                return
            stop()
            if error is raised:  # the subscriber's own, reported by the source: nothing else
                observer.on_error(error)
                return
            try:
                outputs = reducer.fail(error)
            except Exception as exc:
                observer.on_error(exc)
                return
            if last_items(outputs):
                observer.on_error(error)

        def on_completed() -> None:
            if stopped:
                return
            try:
                outputs = reducer.finish()
            except Exception as exc:  # fail exactly as if upstream had failed
                on_error(exc)
                return
            stop()
            if last_items(outputs):
                observer.on_completed()

        def last_items(outputs: Sequence[B]) -> bool:
            """Hand on what the stream's end brought; False: the observer raised on one,
            and was told so (the source has ended: none else could tell it)."""
            for out in outputs:
                try:
                    observer.on_next(out)
                except Exception as exc:
                    observer.on_error(exc)
                    return False
            return True

        if now is not None:  # (no disposables: about 2% of a two-event stream)
            now.drive(on_next, on_error, on_completed, lambda: stopped)
            return _ENDED
        upstream = SingleAssignmentDisposable()
        source = self.source
        if isinstance(source, SyncSource):

            def drive() -> None:  # no observers in between
                source.drive(on_next, on_error, on_completed, lambda: stopped)

            upstream.disposable = _soon(drive, scheduler)
        else:
            upstream.disposable = source.subscribe(
                on_next, on_error, on_completed, scheduler=scheduler
            )
        return Disposable(stop)


_ENDED = Disposable()
"""What subscribing to a source driven to its end during the call returns."""


class _Last(abc.ObserverBase[A]):
    """Keeps the last item and how the stream ended (for :meth:`ReducedObservable.run`)."""

    def __init__(self) -> None:
        self._items: list[A] = []
        self._error: Exception | None = None
        self._ended = False

    def on_next(self, value: A) -> None:
        self._items[:] = (value,)

    def on_error(self, error: Exception) -> None:
        self._error = error
        self._ended = True

    def on_completed(self) -> None:
        self._ended = True

    @property
    def ended(self) -> bool:
        return self._ended

    def value(self) -> A:
        error, self._error = self._error, None
        if error is not None:
            try:
                raise error
            finally:
                del error  # this frame is in its traceback: no cycle
        if not self._ended:  # a SyncSource always ends during subscribe
            raise RuntimeError("the synchronous source did not end")
        if not self._items:
            raise SequenceContainsNoElementsError()
        return self._items[0]


def _loop_running() -> bool:
    """Whether an asyncio event loop runs in this thread (as in a Jupyter cell)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
