"""``torch.fx`` tracing and rewrites that keep fp32 results equivalent.

Every rewrite here changes how a result is computed, never what it is (up to fp32
rounding of the folded weights, which is done in float64):

``conv_bn``
    ``ConvNd -> BatchNormNd`` (eval mode, running statistics) becomes one convolution
    with scaled weights and a shifted bias.
``linear_bn``
    ``Linear -> BatchNorm1d`` on 2-D activations, the same fold along the output
    features. Only applied when every workload case showed a 2-D activation: on 3-D input
    BatchNorm1d normalises dim 1, which is not the Linear's feature dim.
``dropout``
    Dropout modules in eval mode (and ``F.dropout(..., training=False)`` calls) return
    their input.
``identity``
    ``nn.Identity`` returns its input.

Sharing is handled per call site: a fold never edits a module in place. It builds a new
fused module; when the convolution is used at that one site only (and nothing reads its
attributes) the fused module takes the convolution's place under the same name, otherwise
it is added under a new name and the original stays for its other users. A BatchNorm whose
convolution output has other users is not folded (those users need the un-normalised
output). Modules with hooks are never folded (the hooks expect the original module).
"""

from __future__ import annotations

import copy
import inspect
import linecache
import os
import traceback
from collections import Counter
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from attrs import field, frozen
from torch import fx, nn

#: Names of the rewrites :func:`simplify` knows, in the order they run.
REWRITES: tuple[str, ...] = ("dropout", "identity", "conv_bn", "linear_bn")

_DROPOUT_MODULES = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)
_DROPOUT_FUNCTIONS = {
    F.dropout,
    F.dropout1d,
    F.dropout2d,
    F.dropout3d,
    F.alpha_dropout,
    F.feature_alpha_dropout,
}
_CONV_BN: dict[type[nn.Module], type[nn.Module]] = {
    nn.Conv1d: nn.BatchNorm1d,
    nn.Conv2d: nn.BatchNorm2d,
    nn.Conv3d: nn.BatchNorm3d,
}
_TORCH_DIR = os.path.dirname(torch.__file__)
_THIS_DIR = os.path.dirname(__file__)


class FxTraceError(Exception):
    """``torch.fx`` could not trace the model; ``where`` names the user's source line."""

    def __init__(self, message: str, where: str | None) -> None:
        super().__init__(message)
        self.tracer_message = message
        self.where = where

    def __str__(self) -> str:
        text = f"torch.fx cannot trace this model: {self.tracer_message}"
        if self.where:
            text += f" (at {self.where})"
        return text + (
            ". fx plans need a forward without data-dependent Python control flow "
            "(if/while on tensor values, len() of a traced tensor...); the compiled "
            "'inductor' plans handle such models through graph breaks"
        )


@frozen
class RewriteReport:
    """How many of each rewrite were applied, why others were skipped, and the sizes."""

    applied: dict[str, int] = field(factory=dict)
    skipped: dict[str, int] = field(factory=dict)
    nodes_before: int = 0
    nodes_after: int = 0
    modules_before: int = 0
    modules_after: int = 0

    def as_metadata(self) -> dict[str, Any]:
        return {
            "rewrites": dict(self.applied),
            "rewrites_skipped": dict(self.skipped),
            "graph_nodes_before": self.nodes_before,
            "graph_nodes_after": self.nodes_after,
            "modules_before": self.modules_before,
            "modules_after": self.modules_after,
        }


def _user_frame(exc: BaseException) -> str | None:
    """The innermost traceback frame outside torch and dlopt_fx: the user's line."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        filename = os.path.abspath(frame.filename)
        if filename.startswith(_TORCH_DIR) or filename.startswith(_THIS_DIR):
            continue
        line = frame.line or linecache.getline(frame.filename, frame.lineno or 0).strip()
        where = f"{frame.filename}:{frame.lineno} in {frame.name}"
        return f"{where}: {line}" if line else where
    return None


#: Non-tensor values that are traced as constants when every workload case agrees on them.
#: fx guards each one (a different value at run time raises); floats stay symbolic.
_CONSTANT_TYPES = (type(None), bool, int, str)


def constant_arguments(
    model: nn.Module, cases: Iterable[tuple[tuple[Any, ...], dict[str, Any]]]
) -> dict[str, Any]:
    """Forward parameters with the same ``None``/bool/int/str value in every case.

    Symbolic tracing cannot see ``if mask is None`` (a proxy is never ``None``, so the
    graph would always take the "given" branch) nor branch on a flag. Tracing these as
    the workload's constants follows the workload, and fx guards the specialisation: a
    later different value raises instead of computing the wrong thing.
    """
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return {}
    plain = {
        name
        for name, p in signature.parameters.items()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    common: dict[str, Any] | None = None
    for args, kwargs in cases:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return {}
        bound.apply_defaults()
        values = {
            n: v for n, v in bound.arguments.items() if n in plain and type(v) in _CONSTANT_TYPES
        }
        if common is None:
            common = values
        else:
            common = {
                n: v
                for n, v in common.items()
                if n in values and type(values[n]) is type(v) and values[n] == v
            }
    return dict(sorted((common or {}).items()))


def trace(model: nn.Module, concrete_args: dict[str, Any] | None = None) -> fx.GraphModule:
    """Symbolically trace a deep copy of ``model``; the caller's module is never touched.

    Raises :class:`FxTraceError` with the tracer's message and the user's source line.
    """
    try:
        clone = copy.deepcopy(model)
    except Exception as exc:
        raise FxTraceError(
            f"the model cannot be deep-copied ({type(exc).__name__}: {exc})", None
        ) from exc
    try:
        gm = fx.symbolic_trace(clone, concrete_args=concrete_args or None)
    except Exception as exc:
        raise FxTraceError(f"{type(exc).__name__}: {exc}", _user_frame(exc)) from exc
    if concrete_args:
        # fx names a specialised parameter "<name>_1"; keep the model's keyword names.
        renamed = {f"{name}_1": name for name in concrete_args}
        for node in gm.graph.nodes:
            if node.op == "placeholder" and node.target in renamed:
                node.target = renamed[node.target]
        gm.recompile()
    return gm


def record_output_ranks(
    gm: fx.GraphModule, cases: Iterable[tuple[tuple[Any, ...], dict[str, Any]]]
) -> dict[str, set[int]]:
    """Run ``gm`` on each ``(args, kwargs)`` and record the output rank of every Linear
    and Conv1d submodule (by qualified name, across all its call sites)."""
    ranks: dict[str, set[int]] = {}
    handles = []
    for name, module in gm.named_modules():
        if isinstance(module, (nn.Linear, nn.Conv1d)):

            def hook(_m: nn.Module, _inp: Any, out: Any, _name: str = name) -> None:
                if isinstance(out, torch.Tensor):
                    ranks.setdefault(_name, set()).add(out.dim())

            handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            for args, kwargs in cases:
                gm(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return ranks


def _has_hooks(module: nn.Module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks)


def _bn_scale_shift(bn: nn.modules.batchnorm._BatchNorm) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel ``(scale, shift)`` with ``bn(y) == y * scale + shift`` in eval mode (fp64)."""
    assert bn.running_mean is not None and bn.running_var is not None
    var = bn.running_var.detach().double()
    mean = bn.running_mean.detach().double()
    gamma = bn.weight.detach().double() if bn.weight is not None else torch.ones_like(var)
    beta = bn.bias.detach().double() if bn.bias is not None else torch.zeros_like(var)
    scale = gamma / torch.sqrt(var + bn.eps)
    return scale, beta - mean * scale


def _fused(module: Any, bn: Any) -> nn.Module:
    """A copy of ``module`` (Conv/Linear) with ``bn`` folded in; ``module`` is unchanged.

    New Parameter objects are assigned (never in-place writes), so weights tied to other
    modules keep their values.
    """
    scale, shift = _bn_scale_shift(bn)
    fused = copy.deepcopy(module)
    weight = module.weight.detach()
    view = (-1,) + (1,) * (weight.dim() - 1)
    new_weight = weight.double() * scale.view(view)
    bias = module.bias.detach().double() if module.bias is not None else torch.zeros_like(scale)
    new_bias = bias * scale + shift
    requires_grad = module.weight.requires_grad
    fused.weight = nn.Parameter(new_weight.to(weight.dtype), requires_grad=requires_grad)
    fused.bias = nn.Parameter(new_bias.to(weight.dtype), requires_grad=requires_grad)
    return fused


def _module_aliases(gm: fx.GraphModule) -> Counter[int]:
    """How many qualified names point at each module object (a module registered twice)."""
    return Counter(id(m) for _, m in gm.named_modules(remove_duplicate=False))


def _exclusive(gm: fx.GraphModule, target: str, aliases: Counter[int]) -> bool:
    """True when ``target`` is called at exactly one site and nothing else reaches it."""
    calls = 0
    for node in gm.graph.nodes:
        if node.op == "call_module" and node.target == target:
            calls += 1
        elif node.op == "get_attr" and (
            node.target == target or str(node.target).startswith(target + ".")
        ):
            return False
    module = gm.get_submodule(target)
    return calls == 1 and aliases[id(module)] == 1


def _unique_name(gm: fx.GraphModule, base: str) -> str:
    base = base.replace(".", "_")
    index = 0
    while hasattr(gm, f"{base}_{index}"):
        index += 1
    return f"{base}_{index}"


class _Rewriter:
    def __init__(self, gm: fx.GraphModule, ranks: dict[str, set[int]] | None) -> None:
        self.gm = gm
        self.ranks = ranks
        self.applied: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()

    def module(self, node: fx.Node) -> nn.Module | None:
        if node.op != "call_module":
            return None
        return self.gm.get_submodule(str(node.target))

    # -- no-ops ---------------------------------------------------------------------
    def remove_passthrough(self, node: fx.Node, kind: str) -> None:
        if not node.args or not isinstance(node.args[0], fx.Node):
            self.skipped[f"{kind}_without_tensor_input"] += 1
            return
        node.replace_all_uses_with(node.args[0])
        self.gm.graph.erase_node(node)
        self.applied[kind] += 1

    def dropout(self) -> None:
        for node in list(self.gm.graph.nodes):
            module = self.module(node)
            if isinstance(module, _DROPOUT_MODULES):
                if module.training:
                    self.skipped["dropout_in_training_mode"] += 1
                else:
                    self.remove_passthrough(node, "dropout")
            elif node.op == "call_function" and node.target in _DROPOUT_FUNCTIONS:
                training = node.kwargs.get("training", node.args[2] if len(node.args) > 2 else True)
                if training is False:
                    self.remove_passthrough(node, "dropout")
                else:
                    self.skipped["functional_dropout_with_training_not_false"] += 1

    def identity(self) -> None:
        for node in list(self.gm.graph.nodes):
            if isinstance(self.module(node), nn.Identity):
                self.remove_passthrough(node, "identity")

    # -- folds ----------------------------------------------------------------------
    def bn_fold_candidates(self, kind: str) -> list[tuple[fx.Node, fx.Node]]:
        pairs = []
        for node in self.gm.graph.nodes:
            bn = self.module(node)
            if not isinstance(bn, nn.modules.batchnorm._BatchNorm):
                continue
            producer = node.args[0] if node.args else None
            if not isinstance(producer, fx.Node):
                continue
            base = self.module(producer)
            if kind == "conv_bn":
                if not isinstance(base, nn.modules.conv._ConvNd):
                    continue
                if _CONV_BN.get(type(base)) is not type(bn):
                    continue
            elif not (type(base) is nn.Linear and type(bn) is nn.BatchNorm1d):
                continue
            reason = self.fold_problem(node, bn, producer, base, kind)
            if reason:
                self.skipped[f"{kind}_{reason}"] += 1
            else:
                pairs.append((producer, node))
        return pairs

    def fold_problem(
        self, bn_node: fx.Node, bn: nn.Module, producer: fx.Node, base: Any, kind: str
    ) -> str | None:
        if len(bn_node.args) != 1 or bn_node.kwargs:
            return "unexpected_call_signature"
        if bn.training:
            return "bn_in_training_mode"
        if bn.running_mean is None or bn.running_var is None:
            return "bn_without_running_stats"
        out_features = base.out_channels if kind == "conv_bn" else base.out_features
        if bn.num_features != out_features:
            return "feature_mismatch"
        if len(producer.users) != 1:
            return "producer_output_has_other_users"
        if _has_hooks(bn) or _has_hooks(base):
            return "module_has_hooks"
        if base.weight is None or not base.weight.is_floating_point():
            return "non_float_weight"
        if isinstance(base, (nn.Linear, nn.Conv1d)):
            # BatchNorm1d normalises dim 1 of 2-D and 3-D input alike; the fold is only
            # right when dim 1 is the producer's feature dim (Linear: 2-D; Conv1d: 3-D).
            want = 2 if isinstance(base, nn.Linear) else 3
            seen = None if self.ranks is None else self.ranks.get(str(producer.target))
            if not seen:
                return "no_shape_evidence"
            if seen != {want}:
                return f"activation_rank_{'_'.join(map(str, sorted(seen)))}"
        return None

    def fold(self, kind: str) -> None:
        aliases = _module_aliases(self.gm)
        for producer, bn_node in self.bn_fold_candidates(kind):
            target = str(producer.target)
            base = self.gm.get_submodule(target)
            bn = self.gm.get_submodule(str(bn_node.target))
            fused = _fused(base, bn)
            if _exclusive(self.gm, target, aliases):
                parent_name, _, leaf = target.rpartition(".")
                setattr(self.gm.get_submodule(parent_name), leaf, fused)
                bn_node.replace_all_uses_with(producer)
            else:
                # The module serves other sites too: give this site its own fused copy.
                name = _unique_name(self.gm, f"{target}_{kind}_fused")
                self.gm.add_submodule(name, fused)
                with self.gm.graph.inserting_after(producer):
                    new_node = self.gm.graph.call_module(name, producer.args, producer.kwargs)
                bn_node.replace_all_uses_with(new_node)
                self.gm.graph.erase_node(bn_node)
                self.gm.graph.erase_node(producer)
                self.applied[kind] += 1
                continue
            self.gm.graph.erase_node(bn_node)
            self.applied[kind] += 1


def simplify(
    gm: fx.GraphModule,
    *,
    ranks: dict[str, set[int]] | None = None,
    rewrites: Iterable[str] = REWRITES,
) -> RewriteReport:
    """Apply ``rewrites`` to ``gm`` in place and return what was done.

    ``ranks`` is the evidence from :func:`record_output_ranks`; without it the folds that
    need a known activation rank (Linear/Conv1d + BatchNorm1d) are skipped.
    """
    wanted = set(rewrites)
    unknown = wanted - set(REWRITES)
    if unknown:
        raise ValueError(f"unknown rewrites {sorted(unknown)}; choose from {list(REWRITES)}")
    nodes_before = len(gm.graph.nodes)
    modules_before = sum(1 for _ in gm.modules())
    rewriter = _Rewriter(gm, ranks)
    for name in REWRITES:
        if name not in wanted:
            continue
        if name == "dropout":
            rewriter.dropout()
        elif name == "identity":
            rewriter.identity()
        else:
            rewriter.fold(name)
    gm.graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    return RewriteReport(
        applied={name: rewriter.applied.get(name, 0) for name in REWRITES if name in wanted},
        skipped=dict(sorted(rewriter.skipped.items())),
        nodes_before=nodes_before,
        nodes_after=len(gm.graph.nodes),
        modules_before=modules_before,
        modules_after=sum(1 for _ in gm.modules()),
    )
