"""Stage 2, probe: ask each plan's provider whether it can run here, inside an error boundary.

A probe runs timed, in a daemon thread with a time limit (``DLOPT_PROBE_TIMEOUT_S`` or
``OptimizationPolicy.probe_timeout_s``), with what the SDK prints captured. A probe that
raises, hangs or answers with values that cannot be used makes its plan unavailable, with
the reason; the selection goes on.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import attrs
from attrs import frozen

from dlopt.contract.provider import (
    ProviderAvailability,
    ProviderContext,
    ProviderInfo,
)
from dlopt.errors import ConfigurationError, PlanCall
from dlopt.platform.config_checks import is_number
from dlopt.platform.probing import capture_output, release_capture, strip_ansi
from dlopt.plugins.boundary import (
    describe_error,
    normalize_availability,
)
from dlopt.plugins.registry import ProviderRegistry
from dlopt.settings.policy import default_probe_timeout_s


@frozen
class ProbeRecord:
    """One provider's probe result, ready for a table or a report.

    ``sdk_output``: what the SDK printed or warned while it was probed (captured, so it
    never lands in the host's output), one line each; also kept, once per process, in
    :func:`dlopt.platform.probing.captured_sdk_output`. An unavailable provider's reason quotes it.
    """

    name: str
    plugin: str
    distribution: str | None
    version: str | None
    precision: str
    availability: ProviderAvailability
    probe_time_s: float
    sdk_output: tuple[str, ...] = ()
    #: How the plan scales activations, where its provider declares it (``"static"``...).
    quantization: str | None = None


class _FromPolicy:
    """The default of ``probe_provider(timeout_s=...)``: the policy's limit, or the env's."""

    def __repr__(self) -> str:
        return "FROM_POLICY"


FROM_POLICY: Any = _FromPolicy()


def probe_timeout_for(context: ProviderContext) -> float:
    """The probe time limit for ``context``: its policy's ``probe_timeout_s`` when it has a
    policy, else ``$DLOPT_PROBE_TIMEOUT_S`` or ``dlopt.settings.policy.DEFAULT_PROBE_TIMEOUT_S``."""
    limit = getattr(context.policy, "probe_timeout_s", None)
    return float(limit) if limit is not None else default_probe_timeout_s()


def probe_provider(
    info: ProviderInfo, context: ProviderContext, *, timeout_s: float | None = FROM_POLICY
) -> ProbeRecord:
    """Run one provider's probe inside an error boundary, timed and with a time limit.

    The probe runs in a daemon thread and is waited for at most ``timeout_s`` seconds
    (default: :func:`probe_timeout_for` the context; ``None`` runs it inline with no
    limit). A probe that has not answered by then is reported unavailable ("probe took
    N s (limit M s)"). Python cannot kill a thread: a hung probe stays blocked in the
    background (the thread is a daemon, so it does not keep the process alive); only
    process isolation could stop it. A probe that raises (``SystemExit`` included) or
    returns values that cannot be normalised is reported unavailable with the reason;
    ``KeyboardInterrupt`` propagates.
    """
    limit = probe_timeout_for(context) if timeout_s is FROM_POLICY else timeout_s
    if limit is not None and not (is_number(limit) and limit > 0):
        raise ConfigurationError(
            f"probe timeout_s must be a number of seconds > 0 or None, got {limit!r}"
        )
    who = info.distribution or info.plugin
    start = time.perf_counter()
    answered, answer, error = False, None, None
    # SDKs print while probed (C libraries straight to fds 1/2): catch it all, so a
    # host's own output (``dlopt providers --json``) stays clean.
    with capture_output(f"probe {info.name}") as capture:
        probed = PlanCall.of(
            lambda: _call_with_limit(
                lambda: info.provider.probe(context), limit, f"dlopt-probe-{info.name}"
            )
        )
        error = probed.error
        if probed.value is not None:
            answered, answer = probed.value
        if error is None and not answered:
            release_capture()  # the abandoned probe would hold stdout/stderr forever
    if error is not None:
        availability = ProviderAvailability.unavailable(
            f"probe raised {describe_error(error)}",
            install_hint=f"report this to the maintainers of {who}",
        )
    elif not answered:
        availability = ProviderAvailability.unavailable(
            f"probe took {time.perf_counter() - start:.1f} s (limit {limit:g} s) without "
            "answering and was left running in the background; if the SDK is only slow "
            "to load, raise OptimizationPolicy.probe_timeout_s or DLOPT_PROBE_TIMEOUT_S",
            install_hint=f"report a hanging probe to the maintainers of {who}",
        )
    else:
        try:
            availability = normalize_availability(answer)
        except Exception as exc:
            availability = ProviderAvailability.unavailable(
                f"plugin {info.plugin!r}: probe() returned values that cannot be used: "
                f"{describe_error(exc)}",
                install_hint=f"report this to the maintainers of {who}",
            )
    output = capture.result.lines() if capture.result is not None else ()
    availability = _with_output(availability, output)
    precision, quantization = declared_scheme(info.provider)
    return ProbeRecord(
        name=info.name,
        plugin=info.plugin,
        distribution=info.distribution,
        version=info.version,
        precision=precision,
        availability=availability,
        probe_time_s=time.perf_counter() - start,
        sdk_output=output,
        quantization=quantization,
    )


def declared_scheme(provider: object) -> tuple[str, str | None]:
    """What ``provider`` declares it computes in: its ``precision`` and ``quantization``
    (``None``: no scheme declared), as the probe records them."""
    precision = getattr(provider, "precision", None)
    quantization = getattr(provider, "quantization", None)
    return (
        getattr(precision, "value", str(precision)),
        None if quantization is None else getattr(quantization, "value", str(quantization)),
    )


def _with_output(
    availability: ProviderAvailability, output: tuple[str, ...]
) -> ProviderAvailability:
    """An unavailable provider's reason, free of terminal codes, quoting what the SDK
    printed while probed (unless the reason already does)."""
    if availability.available or availability.reason is None:
        return availability
    reason = strip_ansi(availability.reason)
    unquoted = [line for line in output if line not in reason]
    if unquoted:
        said = " | ".join(unquoted)
        reason += f" (the SDK printed: {said if len(said) <= 300 else said[:297] + '...'})"
    return attrs.evolve(availability, reason=reason)


def _call_with_limit(fn: Any, limit: float | None, thread_name: str) -> tuple[bool, Any]:
    """``(True, fn())``, or ``(False, None)`` if ``fn`` has not returned after ``limit`` s.

    ``fn``'s exception is raised here (in the caller's thread).
    """
    if limit is None:
        return True, fn()
    outcome: list[tuple[bool, Any]] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # handed to the caller, which decides
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name=thread_name, daemon=True).start()
    if not done.wait(limit):
        return False, None
    ok, value = outcome[0]
    if not ok:
        raise value
    return True, value


def probe_all(registry: ProviderRegistry, context: ProviderContext) -> list[ProbeRecord]:
    """Probe every provider of ``registry`` on ``context.target``; a probe that raises is
    'unavailable'."""
    return [probe_provider(info, context) for info in registry.providers]
