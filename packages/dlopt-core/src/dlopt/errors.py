"""Exceptions a user can cause. Each message says what was wrong and how to fix it."""

from __future__ import annotations


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
