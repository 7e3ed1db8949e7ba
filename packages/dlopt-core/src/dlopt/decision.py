"""``OptimizationDecision``: the plan to serve with, plus its evidence."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from dlopt.providers.contract import BuiltPlan
from dlopt.report import OptimizationReport
from dlopt.serialization import atomic_write_text

MANIFEST_VERSION = 1


class OptimizationDecision:
    """Call it like the model: it runs the selected plan. ``report`` says why.

    ``close()`` releases the plan's runtime resources (sessions, engines); the decision
    is also a context manager.
    """

    def __init__(self, plan: BuiltPlan, report: OptimizationReport) -> None:
        self.plan = plan
        self.report = report

    @property
    def selected_plan(self) -> str:
        return self.report.selected_plan

    @property
    def selection_reason(self) -> str:
        return self.report.selection_reason

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.plan(*args, **kwargs)

    def save_report(self, path: str | os.PathLike[str]) -> Path:
        """Write the strict-JSON report (atomically)."""
        return self.report.save(path)

    def save_bundle(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``report.json``, the selected plan's artifacts, and ``manifest.json``.

        The manifest names the selected plan, its provider and precision, and each
        artifact with its path relative to the bundle and its SHA-256, so a deployment
        can verify what it loads.
        """
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        self.save_report(root / "report.json")
        evidence = self.report.candidate(self.selected_plan)
        artifacts: dict[str, dict[str, str]] = {}
        plan_root = root / "artifacts" / self.selected_plan
        taken: set[Path] = set()
        for name, source in self.plan.artifacts.items():
            source = Path(source)
            if not source.exists():
                continue
            # Files keep their names side by side (a plan's own manifest may refer to its
            # siblings); two artifacts with one file name each get a folder of their own.
            destination = plan_root / source.name
            if destination in taken:
                destination = plan_root / name / source.name
            taken.add(destination)
            destination.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, destination, dirs_exist_ok=True)
                digest = None
            else:
                shutil.copy2(source, destination)
                digest = _sha256(destination)
            artifacts[name] = {"path": destination.relative_to(root).as_posix()}
            if digest:
                artifacts[name]["sha256"] = digest
        manifest = {
            "manifest_version": MANIFEST_VERSION,
            "report": "report.json",
            "selected_plan": self.selected_plan,
            "baseline": self.report.baseline,
            "precision": evidence.precision,
            "provider": {
                "plugin": evidence.plugin,
                "distribution": evidence.distribution,
                "version": evidence.version,
            },
            "artifacts": artifacts,
            "metadata": evidence.metadata,
        }
        atomic_write_text(
            root / "manifest.json", json.dumps(manifest, indent=2, allow_nan=False) + "\n"
        )
        return root

    def close(self) -> None:
        self.plan.close()

    def __enter__(self) -> OptimizationDecision:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OptimizationDecision(selected_plan={self.selected_plan!r})"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
