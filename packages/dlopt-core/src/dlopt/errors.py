"""Exceptions a user can cause. Each message says what was wrong and how to fix it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

_T = TypeVar("_T")


class DloptError(Exception):
    """Base class of every error dlopt raises on purpose."""


class ConfigurationError(DloptError, ValueError):
    """A policy, target or workload value is invalid."""


class WorkloadError(DloptError, ValueError):
    """The workload inputs cannot be used as given (wrong device, empty, malformed)."""


class ReferenceCheckError(DloptError):
    """The eager fp32 reference cannot serve as ground truth (nondeterministic, NaN, fails)."""


class PluginLoadError(DloptError):
    """A plugin failed to load and strict mode asked for the error to propagate."""


class ProviderBuildError(DloptError):
    """A provider could not build its plan; the candidate is rejected with this message."""


class PlanNotApplicable(ProviderBuildError):
    """The plan does not apply to this model or workload (channels-last with no image
    inputs, a convolution plan on a model without convolutions): raised from ``build``, the
    candidate is listed as not applicable with this message, not as a failure."""


class ValueDependentGraph(ProviderBuildError):
    """The graph a plan traced or exported depends on the values of its inputs (a branch,
    a loop count or a constant taken from them): the plan is refused at build, quoting
    the model's line (:mod:`dlopt.contract.graph_capture`)."""


class SelectionCancelled(DloptError):
    """The caller's ``should_continue`` said stop before the race could begin; every plan
    built so far was released."""


class ServingError(DloptError):
    """A decision cannot serve a call as made (see docs/serving.md)."""


class ServingContextError(ServingError):
    """The caller's context cannot be served by the selected plan: a caller that needs
    gradients (autograd on, an input that requires grad) through a plan that has none."""


class UnseenSignatureError(ServingError):
    """A call whose signature (structure, shapes, dtypes, devices) no raced case had, under
    ``on_unseen_signature="raise"`` or with no eager model to fall back to."""


class NonFiniteInputError(ServingError):
    """A call whose floating inputs hold NaN or infinity, under
    ``on_nonfinite_input="raise"``: no plan was judged on such values."""


#: What a provider's code may raise that fails its own plan and not the selection:
#: ``SystemExit`` included (a vendor SDK that calls ``sys.exit`` on an unsupported op),
#: ``KeyboardInterrupt`` not (the user's Ctrl-C stops the run).
PLAN_FAILURES: tuple[type[BaseException], ...] = (Exception, SystemExit)


class PlanCall(Generic[_T]):
    """What calling a plan's or a provider's code gave: its ``value``, or the ``error`` it
    raised (one of :data:`PLAN_FAILURES`). The one place the pipeline catches what a plan
    raises: :meth:`of` calls, the caller reads the outcome (pytest's ``CallInfo.from_call``
    idea), so a failure is a value the stage reports, never an ``except`` of its own."""

    __slots__ = ("error", "value")

    def __init__(self, value: _T | None, error: BaseException | None) -> None:
        self.value = value
        self.error = error

    @classmethod
    def of(
        cls, call: Callable[[], _T], *, passes: tuple[type[BaseException], ...] = ()
    ) -> PlanCall[_T]:
        """Call ``call``; what it raises among :data:`PLAN_FAILURES` is kept, except the
        types in ``passes`` (dlopt's own signals, such as a changed model), which go on."""
        try:
            return cls(call(), None)
        except passes:
            raise
        except PLAN_FAILURES as exc:
            return cls(None, exc)

    @property
    def failed(self) -> bool:
        """Whether the call raised."""
        return self.error is not None

    def describe(self) -> str:
        """``"TypeName: message"`` of the error (empty when the call returned)."""
        return "" if self.error is None else f"{type(self.error).__name__}: {self.error}"
