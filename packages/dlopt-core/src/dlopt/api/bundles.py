"""Serve a saved bundle again: :func:`load_bundle` returns a ready decision.

It sits above :mod:`dlopt.bundle.store` (which writes and verifies bundles) and
:mod:`dlopt.engine.decision` (which writes them): loading needs the installed providers, writing
does not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import torch

from dlopt.bundle.store import (
    ARTIFACTS_DIR,
    PROGRAM_ARTIFACT,
    Bundle,
    BundleError,
    BundleLoadError,
    verify_bundle,
)
from dlopt.cache.reload import COMPILE_CACHE_ARTIFACT, ReloadingProvider
from dlopt.contract.provider import BuiltPlan, ProviderContext, Reload
from dlopt.engine.decision import OptimizationDecision
from dlopt.errors import ConfigurationError
from dlopt.pipeline.probe import probe_provider
from dlopt.platform.fileio import TemporaryArtifacts
from dlopt.platform.names import is_plain_name
from dlopt.plugins.discovery import load_providers
from dlopt.plugins.registry import ProviderRegistry
from dlopt.serving.evidence import with_serving_policy
from dlopt.settings.guard import GuardPolicy
from dlopt.settings.policy import structure_options
from dlopt.settings.target import ExecutionTarget
from dlopt.vocabulary import UnseenSignature


def load_bundle(
    directory: str | os.PathLike[str],
    *,
    registry: ProviderRegistry | None = None,
    target: ExecutionTarget | str | None = None,
    artifact_dir: str | os.PathLike[str] | None = None,
    model: torch.nn.Module | None = None,
    restore_compile_cache: bool = False,
    load_compiled_program: bool = False,
    on_unseen_signature: UnseenSignature | str | None = None,
    guard: GuardPolicy | None = None,
) -> OptimizationDecision:
    """Serve a saved bundle again: a ready :class:`~dlopt.engine.decision.OptimizationDecision`.

    The bundle is verified first (:func:`verify_bundle`: every hash, before anything is
    loaded). Then the selected plan's provider is looked up by the plan's name in
    ``registry`` (default: :func:`dlopt.plugins.discovery.load_providers`), probed on
    ``target`` (default: the target the report was raced on) with the options the plan
    raced with (read from the report), and asked to ``load`` the plan from
    ``<bundle>/artifacts/<plan>`` with the plan's recorded metadata. No model is needed
    and nothing is rebuilt, for a provider that loads saved plans (``reloads_by`` is
    ``load``: ONNX Runtime, TensorRT). Plans that come back by rebuilding (native, fx,
    Inductor, TorchAO) are built again from ``model``, which must then be given (the
    error says so when it is not); ``restore_compile_cache=True`` first hands torch the
    compile caches saved in the bundle (hash-checked; torch unpickles them, so only for a
    bundle you trust). ``load_compiled_program=True`` serves the plan from the compiled
    program saved with it, where there is one (a plan cache record's bundle holds an
    AOTInductor package of an Inductor or PT2E static int8 winner): no model and no compile are needed; the
    program's compiled code runs in this process, so again only for a bundle you trust.
    ``artifact_dir``: scratch space the provider may write to (engine
    caches; default: a new temporary directory), never the bundle itself.

    The decision serves as the report's ``serving`` evidence says (docs/serving.md): in
    the grad mode the plan was judged in, and a call whose signature no case raced falls
    back to eager fp32 when ``model`` is given, or raises (``on_unseen_signature``
    overrides the policy the bundle was raced with). ``guard``: the production guard
    (default :class:`~dlopt.settings.guard.GuardPolicy`'s): non-finite inputs, a plan that
    raises and shadow checks go to eager fp32 where ``model`` is given; without it such
    calls raise. Shadow checks hold the plan to the default quality limits.

    Raises :class:`BundleError` when the bundle fails verification and
    :class:`BundleLoadError` when its plan cannot be served here: the plugin is not
    installed (the message names the distribution to install), the probe says the
    provider is unavailable on this machine (with its reason and install hint), the
    plan must be rebuilt and no model was given, the recorded options no longer fit it, or loading
    failed.
    """
    bundle = verify_bundle(directory)
    serving = bundle.report.serving
    policy = serving.on_unseen_signature if serving is not None else UnseenSignature.FALLBACK
    if on_unseen_signature is not None:
        try:
            policy = UnseenSignature(on_unseen_signature)
        except ValueError:
            raise ConfigurationError(
                f"on_unseen_signature {on_unseen_signature!r}: use one of "
                f"{', '.join(u.value for u in UnseenSignature)}"
            ) from None
    if guard is not None and not isinstance(guard, GuardPolicy):
        raise ConfigurationError(
            f"guard must be a dlopt.GuardPolicy, got {type(guard).__name__} {guard!r}"
        )
    guard = guard or GuardPolicy()
    bundle = attrs.evolve(
        bundle,
        report=attrs.evolve(
            bundle.report,
            serving=with_serving_policy(serving, policy, guard, fallback=model is not None),
        ),
    )
    return _load_plan(
        bundle,
        registry,
        target,
        artifact_dir,
        model,
        restore_compile_cache,
        load_compiled_program,
        guard,
    )


def _load_plan(
    bundle: Bundle,
    registry: ProviderRegistry | None,
    target: ExecutionTarget | str | None,
    artifact_dir: str | os.PathLike[str] | None,
    model: torch.nn.Module | None = None,
    restore_compile_cache: bool = False,
    load_compiled_program: bool = False,
    guard: GuardPolicy | None = None,
) -> OptimizationDecision:
    # Scratch space the caller did not name is owned by the decision and removed with it.
    scratch: TemporaryArtifacts | None = None
    if artifact_dir:
        scratch_dir = Path(artifact_dir)
    else:
        scratch = TemporaryArtifacts(prefix="dlopt-load-")
        scratch_dir = scratch.path
    try:
        plan = _load_selected_plan(
            bundle,
            registry,
            target,
            scratch_dir,
            model,
            restore_compile_cache,
            load_compiled_program,
        )
    except BaseException:
        if scratch is not None:
            scratch.release()
        raise
    return OptimizationDecision(plan, bundle.report, scratch=scratch, fallback=model, guard=guard)


def _load_selected_plan(
    bundle: Bundle,
    registry: ProviderRegistry | None,
    target: ExecutionTarget | str | None,
    artifact_dir: Path,
    model: torch.nn.Module | None,
    restore_compile_cache: bool,
    load_compiled_program: bool = False,
) -> BuiltPlan:
    report = bundle.report
    plan_name = report.selected_plan
    if not is_plain_name(plan_name):
        raise BundleError(f"{bundle.path}: the selected plan {plan_name!r} is not a plain name")
    evidence = report.candidate(plan_name)
    source = evidence.distribution or (
        f"plugin {evidence.plugin!r}" if evidence.plugin else "an unnamed plugin"
    )
    where = f"{bundle.path}: plan {plan_name!r} from {source}"
    registry = registry if registry is not None else load_providers()
    info = next((i for i in registry.providers if i.name == plan_name), None)
    if info is None:
        raise BundleLoadError(f"{where} is not installed here{_install_advice(evidence, registry)}")
    if evidence.distribution and info.distribution and info.distribution != evidence.distribution:
        raise BundleLoadError(
            f"{where}: here a plan of that name comes from {info.distribution}, which may not "
            f"read what {evidence.distribution} saved; install {evidence.distribution} "
            f"{evidence.version or ''}".rstrip()
        )
    provider = info.provider
    reloads_by = Reload.of(provider)
    if reloads_by is Reload.LOAD and not callable(getattr(provider, "load", None)):
        raise BundleLoadError(
            f"{where}: its provider declares that saved plans are loaded, but it has no load()"
        )
    saved = bundle.manifest.get("artifacts", {})
    program = (
        bundle.artifact_path(PROGRAM_ARTIFACT)
        if load_compiled_program and PROGRAM_ARTIFACT in saved
        else None
    )
    comeback = ReloadingProvider(
        provider, bundle.path / ARTIFACTS_DIR / plan_name, dict(evidence.metadata), program=program
    )
    if model is None and not comeback.serves_without_model:
        raise BundleLoadError(
            f"{where} is served again by rebuilding it from the model ({reloads_by.value}): "
            "the bundle holds no program that runs without it; pass the model: "
            "load_bundle(path, model=model)"
            + (
                ""
                if program is not None or PROGRAM_ARTIFACT not in saved
                else " (or serve its saved compiled program: load_compiled_program=True)"
            )
        )
    context = ProviderContext(
        target=_load_target(target, report.target),
        artifact_dir=artifact_dir,
        options=_load_options(provider, evidence.options, where),
    )
    status = probe_provider(info, context)
    availability = status.availability
    if not availability.available:
        hint = f"; {availability.install_hint}" if availability.install_hint else ""
        raise BundleLoadError(
            f"{where} cannot run on {context.target.device} here: "
            f"{availability.reason or 'its probe says unavailable'}{hint}"
        )
    context = attrs.evolve(context, availability=availability)
    plan_dir = comeback.plan_dir
    if restore_compile_cache and COMPILE_CACHE_ARTIFACT in saved:
        comeback.compile_cache = bundle.artifact_path(COMPILE_CACHE_ARTIFACT)
    try:
        plan = comeback.build(model, context)
    except Exception as exc:
        verb = "load" if reloads_by is Reload.LOAD else "rebuild"
        raise BundleLoadError(
            f"{bundle.path}: {source} could not {verb} plan {plan_name!r} from {plan_dir}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(plan, BuiltPlan):
        raise BundleLoadError(
            f"{where}: load() returned {type(plan).__name__}, expected a BuiltPlan"
        )
    if plan.precision.value != evidence.precision:
        plan.close()
        raise BundleLoadError(
            f"{where}: the loaded plan computes in {plan.precision.value}, but the bundle's "
            f"plan was raced in {evidence.precision}; it is not the plan the report vouches for"
        )
    return plan


def _install_advice(evidence: Any, registry: ProviderRegistry) -> str:
    """Why the plan's provider is missing, and what to install."""
    failed = next(
        (f for f in registry.failures if evidence.plugin and f.plugin == evidence.plugin), None
    )
    if failed is not None:
        return (
            f": its plugin {failed.plugin!r} failed at {failed.stage}: {failed.error}; fix or "
            "reinstall it"
        )
    if evidence.distribution:
        version = f"=={evidence.version}" if evidence.version else ""
        return (
            f"; install it (pip install {evidence.distribution}, the bundle was written with "
            f"{evidence.distribution}{version}) and make sure its plugin is not disabled "
            "(DLOPT_PLUGINS / DLOPT_DISABLE_PLUGINS)"
        )
    return (
        "; it was raced as a provider passed in code, so pass a registry that holds it: "
        "load_bundle(path, registry=load_providers(extra_plugins=[...]))"
    )


def _load_target(target: ExecutionTarget | str | None, raced: ExecutionTarget) -> ExecutionTarget:
    if target is None:
        return raced
    return target if isinstance(target, ExecutionTarget) else ExecutionTarget(target)


def _load_options(provider: Any, recorded: Any, where: str) -> Any:
    """The options the plan raced with, structured for its provider as installed here."""
    options_type = getattr(provider, "options_type", None)
    if options_type is None:
        if recorded:
            raise BundleLoadError(
                f"{where} raced with options {recorded!r}, but the installed provider takes "
                "none; install the version that wrote the bundle"
            )
        return None
    if recorded is not None and not isinstance(recorded, dict):
        raise BundleLoadError(f"{where}: the recorded options {recorded!r} are not an object")
    try:
        return structure_options(options_type, recorded or {}, plan=provider.name)
    except ConfigurationError as exc:
        raise BundleLoadError(
            f"{where}: the options it raced with do not fit the installed provider ({exc}); "
            "install the version that wrote the bundle"
        ) from None
