"""Every test starts from the SDK's defaults: one visible device, asynchronous launch."""

from __future__ import annotations

import pytest
import tinynpu


@pytest.fixture(autouse=True)
def _sdk_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tinynpu.VISIBLE_DEVICES_ENV, raising=False)
    monkeypatch.delenv(tinynpu.LAUNCH_ENV, raising=False)
