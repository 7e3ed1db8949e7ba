"""Helpers of the GPU device check (tools/gpu/device_check.sh); see README.md beside it.

python gpucheck.py versions                 what ran: python, torch, CUDA, the SDKs, dlopt
python gpucheck.py summary KIND PATH        compact summary of one output of the check
    KIND: providers | inspect (a --json output), junit (pytest's XML), select (a report)

``mlp`` is the model of the check's ``dlopt select gpucheck:mlp`` race.
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ElementTree
from importlib import metadata
from pathlib import Path
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
DISTRIBUTIONS = (
    "dlopt-core",
    "dlopt-fx",
    "dlopt-onnxruntime",
    "dlopt-torchao",
    "dlopt-tensorrt",
    "torch",
    "torchao",
    "onnxruntime",
    "onnxruntime-gpu",
    "onnx",
    "onnxscript",
    "torch-tensorrt",
    "tensorrt",
    "tensorrt-cu13-libs",
    "triton",
    "cattrs",
    "attrs",
    "rich",
    "jsonschema",
    "pluggy",
    "pytest",
)


def mlp() -> Any:
    """512 -> 1024 -> 512 MLP: dimensions fp8, int4 and TensorRT all take."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512)
    ).eval()


def clip(text: Any, limit: int = 150) -> str:
    text = ANSI.sub("", str(text or "")).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def versions() -> None:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    print(
        f"python {sys.version.split()[0]} torch {torch.__version__} cuda {torch.version.cuda} {gpu}"
    )
    for name in DISTRIBUTIONS:
        try:
            print(name, metadata.version(name))
        except metadata.PackageNotFoundError:
            print(name, "-")
    import dlopt

    print("dlopt imports from", dlopt.__file__)


def _load(path: str) -> tuple[Any, int]:
    """(data, junk lines): the JSON document of a file that may have text before it."""
    raw = Path(path).read_text(errors="replace")
    try:
        return json.loads(raw), 0
    except ValueError:
        pass
    lines = raw.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(("{", "[")):
            try:
                return json.loads("\n".join(lines[i:])), i
            except ValueError:
                continue
    raise ValueError(f"no JSON document in {path}")


def _json_verdict(junk: int) -> str:
    return "OK" if junk == 0 else f"BROKEN ({junk} non-JSON lines printed before it)"


def providers(path: str) -> None:
    data, junk = _load(path)
    print(f"  JSON on stdout: {_json_verdict(junk)}")
    for status in data.get("providers", []):
        availability = status.get("availability", {})
        ok = availability.get("available")
        reason = "" if ok else clip(availability.get("reason"), 130)
        print(f"  {'yes' if ok else 'no ':3} {status.get('name', '?'):28} {reason}")
        for line in status.get("sdk_output") or []:
            print(f"      sdk said: {clip(line, 140)}")
    for failure in data.get("plugin_failures") or []:
        print(f"  plugin failure: {clip(failure, 200)}")


def inspect(path: str) -> None:
    data, junk = _load(path)
    print(f"  JSON on stdout: {_json_verdict(junk)}")
    gpu = data.get("cuda_device") or {}
    print(
        f"  torch {data.get('torch')} cuda {data.get('cuda')} cudnn {data.get('cudnn')} "
        f"gpu {gpu.get('name')} sm {gpu.get('compute_capability')} amp {data.get('amp_dtypes')}"
    )
    available = [p["name"] for p in data.get("providers", []) if p.get("available")]
    print(f"  providers available: {', '.join(available) or 'none'}")


def junit(path: str) -> None:
    root = ElementTree.parse(path).getroot()
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    notes = []
    for case in root.iter("testcase"):
        where = case.get("classname", "").removeprefix("packages.").replace(".tests.", ":")
        name = f"{where}::{case.get('name', '')}" if where else case.get("name", "")
        outcome = next(
            (child.tag for child in case if child.tag in ("failure", "error", "skipped")), None
        )
        if outcome is None:
            counts["passed"] += 1
            continue
        counts["failed" if outcome == "failure" else outcome] += 1
        child = case.find(outcome)
        message = child.get("message", "") if child is not None else ""
        notes.append(f"  {outcome.upper():8} {clip(name, 90)}: {clip(message, 160)}")
    print("  " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    for note in sorted(notes)[:40]:
        print(note)


def select(path: str) -> None:
    data, _ = _load(path)
    print(f"  selected: {data.get('selected_plan')} (baseline {data.get('baseline')})")
    print(f"  reason: {clip(data.get('selection_reason'), 300)}")
    for candidate in data.get("candidates", []):
        note = ""
        if candidate.get("error"):
            error = candidate["error"]
            note = f"{error.get('stage')}: {error.get('message')}"
        elif candidate.get("status") == "unavailable":
            note = candidate.get("availability_reason") or ""
        elif candidate.get("not_built"):
            note = f"not built: {candidate['not_built']}"
        latency = candidate.get("latency_ms")
        shown = "-" if latency is None else f"{latency:.3f}ms"
        print(
            f"  {candidate.get('status', '?'):11} {candidate.get('name', '?'):28} "
            f"{candidate.get('precision', ''):5} {shown:>10} {clip(note, 120)}"
        )


def main(argv: list[str]) -> int:
    if argv[:1] == ["versions"]:
        versions()
        return 0
    if len(argv) == 3 and argv[0] == "summary":
        kinds = {"providers": providers, "inspect": inspect, "junit": junit, "select": select}
        try:
            kinds[argv[1]](argv[2])
        except Exception as exc:  # a summary never fails the check
            print(f"  (could not summarize {argv[2]}: {type(exc).__name__}: {clip(exc, 200)})")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
