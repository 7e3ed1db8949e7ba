"""AOTInductor packages of Inductor plans: saved from a built plan, loaded in a fresh
process without the model, Dynamo or Inductor's compiler, equal to eager on every case,
and refusing inputs they were not compiled for.

One package is compiled for the module (an ahead-of-time compile: tens of seconds).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from dlopt.plugin import PreparedCase, ProviderContext, WorkloadCase, WorkloadProfile
from dlopt_fx.package import PackageUnsupported, save_package
from dlopt_fx.providers import InductorOptions, InductorProvider


class ScaledNet(nn.Module):
    """Two inputs (one keyword) and a non-tensor argument, so the package's input
    convention (tensor leaves in order, constants fixed) is exercised."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor, *, bias: torch.Tensor, scale: float) -> torch.Tensor:
        pooled = self.conv(x).relu().mean(dim=(2, 3))
        return self.fc(pooled) * scale + bias


def _cases(*batches: int, scale: float = 2.0) -> tuple[PreparedCase, ...]:
    gen = torch.Generator().manual_seed(0)
    return tuple(
        PreparedCase(
            f"b{b}",
            (torch.randn(b, 3, 8, 8, generator=gen),),
            {"bias": torch.randn(5, generator=gen), "scale": scale},
            None,
        )
        for b in batches
    )


def _context(tmp_path: Path, cases: tuple[PreparedCase, ...], **options: bool) -> ProviderContext:
    workload = WorkloadProfile(cases=(WorkloadCase("user", args=(torch.randn(1, 3, 8, 8),)),))
    return ProviderContext(
        workload=workload,
        artifact_dir=tmp_path,
        cases=cases,
        options=InductorOptions(**options) if options else None,
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, nn.Module]:
    root = tmp_path_factory.mktemp("package")
    model = ScaledNet().eval()
    provider = InductorProvider(
        "inductor_channels_last_freezing", freezing=True, channels_last=True
    )
    context = _context(root / "artifacts", _cases(1, 6))
    plan = provider.build(model, context)
    try:
        metadata = provider.save_program(plan, root / "program", context)
    finally:
        plan.close()
    assert metadata is not None
    return root / "program", metadata, model


def test_the_package_records_its_inputs_and_options(saved) -> None:
    directory, metadata, _ = saved
    assert (directory / metadata["file"]).is_file()
    assert json.loads(json.dumps(metadata)) == metadata  # strict JSON, as records hold it
    assert metadata["dynamic_dims"] == {"0": [0]}  # the batch dim varies across the cases
    assert metadata["constants"] == [None, None, 2.0]
    assert metadata["inductor_options"] == {"freezing": True}


def test_a_fresh_process_serves_the_package_without_model_dynamo_or_compiler(saved) -> None:
    directory, metadata, model = saved
    cases = _cases(1, 6, 3)  # 3: a batch size the package never saw, inside its range
    torch.save(
        {"inputs": [(c.args, c.kwargs) for c in cases], "expected": _eager(model, cases)},
        directory.parent / "cases.pt",
    )
    (directory.parent / "metadata.json").write_text(json.dumps(metadata))
    script = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        import torch
        from dlopt.plugin import ExecutionTarget, ProviderContext
        from dlopt_fx.providers import InductorProvider
        root = {str(directory.parent)!r}
        data = torch.load(root + "/cases.pt")
        metadata = json.loads(open(root + "/metadata.json").read())
        provider = InductorProvider("inductor_channels_last_freezing", freezing=True,
                                    channels_last=True)
        plan = provider.load_program(
            Path({str(directory)!r}), metadata, ProviderContext(target=ExecutionTarget("cpu"))
        )
        worst = max(
            (plan(*args, **kwargs) - want).abs().max().item()
            for (args, kwargs), want in zip(data["inputs"], data["expected"])
        )
        print(json.dumps({{
            "worst": worst,
            "served_as": plan.metadata["served_as"],
            "dynamo": "torch._dynamo" in sys.modules,
            "inductor": "torch._inductor" in sys.modules,
        }}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["served_as"] == "aotinductor_package"
    assert result["worst"] < 1e-4
    assert not result["dynamo"] and not result["inductor"]


def test_inputs_the_package_was_not_compiled_for_are_refused(saved) -> None:
    directory, metadata, _ = saved
    plan = InductorProvider("inductor_channels_last_freezing").load_program(
        directory, metadata, ProviderContext()
    )
    (x,), kwargs = _cases(2)[0].args, _cases(2)[0].kwargs
    with pytest.raises(ValueError, match="compiled for inputs shaped like"):
        plan(x, **{**kwargs, "scale": 3.0})  # another constant
    with pytest.raises(ValueError, match="compiled for inputs shaped like"):
        plan(x, x, **kwargs)  # another structure


def test_the_option_turns_packaging_off(tmp_path: Path) -> None:
    provider = InductorProvider("inductor")
    context = _context(tmp_path, _cases(2), aot_package=False)
    plan = provider.build(ScaledNet().eval(), context)
    try:
        assert provider.save_program(plan, tmp_path / "program", context) is None
    finally:
        plan.close()


def test_cases_that_cannot_share_one_program_are_not_packaged(tmp_path: Path) -> None:
    model = ScaledNet().eval()
    mixed = (*_cases(2, scale=2.0), *_cases(2, scale=3.0))
    with pytest.raises(PackageUnsupported, match="non-tensor input differs"):
        save_package(model, model, mixed, {}, tmp_path)


def _eager(model: nn.Module, cases: tuple[PreparedCase, ...]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [model(*c.args, **c.kwargs) for c in cases]
