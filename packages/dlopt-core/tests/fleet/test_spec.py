"""The fleet spec: docs/fleet.md's example parses, and every malformed spec is one clear
error naming its fields, raised before anything is scheduled (no Ray needed here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlopt.cli import main
from dlopt.errors import ConfigurationError
from dlopt.fleet.spec import RACE_RESOURCE, load_spec, parse_spec, read_spec, resolve_jobs

DOCS = Path(__file__).resolve().parents[4] / "docs" / "fleet.md"


def docs_example() -> str:
    """The first TOML block of docs/fleet.md: the spec it documents."""
    found = re.search(r"```toml\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    assert found, "docs/fleet.md has no ```toml example"
    return found.group(1)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_documented_example_parses_and_names_installed_models(tmp_path):
    spec, jobs = load_spec(write(tmp_path, docs_example()))
    assert spec.name == "serving" and spec.store == "/shared/dlopt-store"
    assert spec.kinds["cpu_amx"].resources == {"cpu_amx": 1}
    assert spec.kinds["h200"].labels == {"ray.io/accelerator-type": "H200"}
    assert spec.kinds["h200"].device == "cuda"
    assert [(job.name, kind) for job, kind in spec.pairs()] == [
        ("convnet", "cpu_amx"),
        ("convnet", "h200"),
        ("mlp", "cpu_amx"),
    ]
    # Models named by their dlopt.models entry points, resolved without importing them.
    assert [j.factory for j in jobs] == ["dlopt.cli.demo:demo_convnet", "dlopt.cli.demo:demo_mlp"]
    mlp = spec.job("mlp")
    assert mlp.threads == 4 and [c.shape for c in mlp.workload] == [(1, 64), (16, 64)]
    assert mlp.policy["measurement"] == {"max_time_s": 20.0}


VALID = """
name = "s"
store = "/tmp/store"
[kinds.a]
resources = { sim_a = 1 }
[kinds.b]
labels = { pool = "b" }
[[jobs]]
name = "j"
model = "demo_mlp"
kinds = ["a", "b"]
"""


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # an unknown key, with the closest known one
        (
            ("kinds = [", 'kindz = ["a"]\nkinds = ['),
            "jobs[0].kindz: unknown key (did you mean 'kinds'?)",
        ),
        (
            ('store = "/tmp/store"', 'stor = "/tmp/store"'),
            "stor: unknown key (did you mean 'store'?)",
        ),
        # a machine kind the spec does not define
        (
            ('kinds = ["a", "b"]', 'kinds = ["a", "bb"]'),
            "jobs[0].kinds[1]: 'bb' is not a machine kind",
        ),
        # wrong types, at their path
        (('name = "j"', 'name = "j"\nthreads = "four"'), "jobs[0].threads"),
        (("sim_a = 1", 'sim_a = "one"'), "kinds.a.resources"),
        # a kind needs labels or resources, not both
        (("[kinds.b]\n", "[kinds.b]\nresources = { x = 1 }\n"), "not both and not neither"),
        # the fleet's own race resource and policy fields are not the user's
        (("sim_a = 1", f"{RACE_RESOURCE} = 1"), "fleet's own per-node race resource"),
        (('name = "j"', 'name = "j"\npolicy = { isolation = "in_process" }'), "set by the fleet"),
        # the policy is read as strictly as any policy
        (('name = "j"', 'name = "j"\npolicy = { objectiv = "x" }'), "jobs[0].policy"),
        (
            ('name = "j"', 'name = "j"\npolicy = { constraints = { min_speedup = -1 } }'),
            "min_speedup",
        ),
        # names that become paths are plain
        (('name = "s"', 'name = "../s"'), "name: '../s' is not a plain spec name"),
    ],
)
def test_a_malformed_spec_names_the_field(tmp_path, change, expected):
    old, new = change
    assert old in VALID
    with pytest.raises(ConfigurationError) as caught:
        read_spec(write(tmp_path, VALID.replace(old, new, 1)))
    assert expected in str(caught.value)
    assert str(caught.value).startswith(str(tmp_path / "fleet.toml"))


def test_every_problem_is_reported_at_once():
    data = {
        "name": "s",
        "store": "/x",
        "kinds": {"a": {"resources": {"r": 1}}},
        "jobs": [
            {"name": "j", "model": "demo_mlp", "kinds": ["nope"]},
            {"name": "j", "model": "demo_mlp", "kinds": []},
        ],
    }
    with pytest.raises(ConfigurationError) as caught:
        parse_spec(data)
    message = str(caught.value)
    assert "jobs[0].kinds[0]: 'nope'" in message
    assert "jobs[1].name: 'j' names two jobs" in message
    assert "jobs[1].kinds: name at least one machine kind" in message


def test_missing_fields_and_bad_toml_are_named(tmp_path):
    with pytest.raises(ConfigurationError, match=r"jobs: missing \(required\)"):
        read_spec(write(tmp_path, 'name = "s"\nstore = "/x"\n[kinds.a]\nresources = {r = 1}\n'))
    with pytest.raises(ConfigurationError, match="is not valid TOML"):
        read_spec(write(tmp_path, "name = \n"))
    with pytest.raises(ConfigurationError, match="does not exist"):
        read_spec(tmp_path / "absent.toml")


def test_a_module_reference_needs_consent_and_an_unknown_model_gets_the_close_names(tmp_path):
    spec = read_spec(write(tmp_path, VALID.replace('"demo_mlp"', '"os:getcwd"')))
    with pytest.raises(ConfigurationError) as caught:
        resolve_jobs(spec, allow_imports=False)
    assert "jobs[0].model: 'os:getcwd' is a module:qualname reference" in str(caught.value)
    assert "--allow-spec-imports" in str(caught.value)
    assert resolve_jobs(spec, allow_imports=True)[0].factory == "os:getcwd"

    typo = read_spec(write(tmp_path, VALID.replace('"demo_mlp"', '"demo_mpl"')))
    with pytest.raises(ConfigurationError, match="did you mean 'demo_mlp'") as caught:
        resolve_jobs(typo, allow_imports=False)
    assert "jobs[0].model: no installed model is registered as 'demo_mpl'" in str(caught.value)


def test_fleet_run_refuses_a_malformed_spec_before_ray(tmp_path, monkeypatch, capsys):
    import dlopt.fleet.runner as runner

    touched: list[str] = []
    monkeypatch.setattr(runner, "import_ray", lambda: touched.append("ray"))
    monkeypatch.setattr(runner, "run_fleet", lambda *a, **k: touched.append("run"))
    path = write(tmp_path, VALID.replace('kinds = ["a", "b"]', 'kinds = ["a", "c"]'))
    assert main(["fleet", "run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "jobs[0].kinds[1]: 'c' is not a machine kind of this spec" in err
    assert "Traceback" not in err
    assert touched == []
