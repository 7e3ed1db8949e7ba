"""The fleet spec: docs/fleet.md's example parses, and every malformed spec is one clear
error naming its fields, raised before anything is scheduled (no Ray needed here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from dlopt.cli import main
from dlopt.errors import ConfigurationError
from dlopt.fleet.spec import RACE_RESOURCE, load_spec, parse_spec, read_spec, resolve_jobs

MEMORY_CAP_MB = 3000

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
    assert 'store = "/shared/dlopt-store"' in docs_example()
    # A run checks that the store can hold results: here, a directory of the test's.
    store = tmp_path / "dlopt-store"
    text = docs_example().replace('"/shared/dlopt-store"', f'"{store}"')
    spec, jobs = load_spec(write(tmp_path, text))
    assert spec.name == "serving" and spec.store == str(store)
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


# -- the spec check refuses before Ray what a race would fail on -----------------------------
@pytest.fixture
def no_ray(monkeypatch):
    """Fail a ``dlopt fleet run`` that gets as far as importing Ray or scheduling."""
    import dlopt.fleet.runner as runner

    touched: list[str] = []
    monkeypatch.setattr(runner, "import_ray", lambda: touched.append("ray"))
    monkeypatch.setattr(runner, "run_fleet", lambda *a, **k: touched.append("run"))
    return touched


def run_refused(path: Path, capsys, touched: list[str], *extra: str) -> str:
    """``dlopt fleet run PATH``: exit 2, one line, no traceback, Ray never touched."""
    assert main(["fleet", "run", str(path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dlopt: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and touched == []
    return err


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # a policy's names given as a bare string: not split into letters
        (
            ('name = "j"', 'name = "j"\npolicy = { include = "eager_fp32" }'),
            'jobs[0].policy.include: expected a list, got the string "eager_fp32"',
        ),
        (
            ('kinds = ["a", "b"]', 'kinds = "a"'),
            'jobs[0].kinds: expected a list, got the string "a"',
        ),
        # the job's workload: what `dlopt select --case` refuses
        (
            (
                'kinds = ["a", "b"]',
                'kinds = ["a"]\nworkload = [{ name = "x", shape = [1e20, 64] }]',
            ),
            "jobs[0].workload[0].shape: [100000000000000000000, 64] has more elements than torch",
        ),
        (
            ('kinds = ["a", "b"]', 'kinds = ["a"]\nworkload = [{ name = "x", shape = [0, 64] }]'),
            "jobs[0].workload[0].shape: [0, 64] has a dimension of 0",
        ),
        (
            (
                'kinds = ["a", "b"]',
                'kinds = ["a"]\nworkload = [{ name = "x", shape = [1, 64], weight = 1e308 }, '
                '{ name = "y", shape = [2, 64], weight = 1e308 }]',
            ),
            "jobs[0].workload: the weights overflow when summed",
        ),
        (
            (
                'kinds = ["a", "b"]',
                'kinds = ["a"]\nworkload = [{ name = "x", shape = [1], weight = inf }]',
            ),
            "jobs[0].workload[0].weight: must be a finite number > 0",
        ),
        # what Ray would refuse or misread
        (("sim_a = 1", "sim_a = 1e20"), "kinds.a.resources.sim_a: must be an amount from 0.0001"),
        (('pool = "b"', 'pool = "b c"'), "kinds.b.labels.pool: 'b c' is not a Ray label"),
        # an objective the job's own cases cannot serve
        (
            (
                'kinds = ["a", "b"]',
                'kinds = ["a"]\nworkload = [{ name = "x", shape = [1, 64] }]\n'
                'policy = { objective = "max_throughput" }',
            ),
            "jobs[0].policy.objective: 'max_throughput' races one request at several batch",
        ),
        # a store that cannot hold results
        (('store = "/tmp/store"', 'store = "/proc/x"'), "store: cannot write the fleet's results"),
    ],
)
def test_what_a_race_would_fail_on_is_refused_before_ray(
    tmp_path, capsys, no_ray, change, expected
):
    old, new = change
    assert old in VALID
    err = run_refused(write(tmp_path, VALID.replace(old, new, 1)), capsys, no_ray)
    assert expected in err


def test_a_store_that_is_a_file_is_refused_by_every_command(tmp_path, capsys, no_ray):
    (tmp_path / "store").write_text("mine")
    path = write(tmp_path, VALID.replace('"/tmp/store"', f'"{tmp_path / "store"}"'))
    err = run_refused(path, capsys, no_ray)
    assert f"store: {tmp_path / 'store'} exists and is not a directory" in err
    for command in ("status", "report"):
        assert main(["fleet", command, str(path)]) == 2
        assert "exists and is not a directory" in capsys.readouterr().err
    assert (tmp_path / "store").read_text() == "mine"


def test_every_problem_in_a_spec_is_named_in_one_message_in_the_spec_order(
    tmp_path, capsys, no_ray
):
    text = """
name = "s"
store = "/proc/x"
[kinds.a]
resources = { sim_a = 1e20 }
[[jobs]]
name = "j"
model = "demo_mlp"
kinds = "a"
policy = { include = "eager_fp32" }
workload = [{ name = "big", shape = [1e20, 2] }]
[[jobs]]
name = "j"
model = "demo_mpl"
kinds = ["a", "c"]
threads = "four"
bogus = 1
workload = [{ name = "x", shape = "1x64", dtype = "complex" }]
"""
    err = run_refused(write(tmp_path, text), capsys, no_ray)
    expected = [
        "store: cannot write the fleet's results",
        "kinds.a.resources.sim_a: must be an amount",
        'jobs[0].kinds: expected a list, got the string "a"',
        'jobs[0].policy.include: expected a list, got the string "eager_fp32"',
        "jobs[0].workload[0].shape: [100000000000000000000, 2] has more elements",
        "jobs[1].bogus: unknown key",
        'jobs[1].workload[0].shape: expected a list, got the string "1x64"',
        "jobs[1].name: 'j' names two jobs",
        "jobs[1].kinds[1]: 'c' is not a machine kind of this spec",
        "jobs[1].workload[0].dtype: 'complex' is not a dtype",
        "jobs[1].threads: expected an integer, got 'four'",
        "jobs[1].model: no installed model is registered as 'demo_mpl'",
    ]
    positions = [err.find(text) for text in expected]
    assert -1 not in positions, [t for t, p in zip(expected, positions) if p == -1]
    assert positions == sorted(positions)
    # A value the first check named is not named again by the next (no "shape: [] is empty").
    assert "is empty" not in err and "name at least one machine kind" not in err


NOT_REGULAR = [
    pytest.param("fifo", id="fifo"),
    pytest.param("/dev/zero", id="dev-zero"),
]


@pytest.mark.parametrize("command", ["run", "status", "report"])
@pytest.mark.parametrize("what", NOT_REGULAR)
def test_a_spec_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path, what, command):
    """Run as a user would, in a process of its own: a spec that is a FIFO would block
    the command forever, /dev/zero would fill its memory (capped here)."""
    import os
    import resource
    import subprocess
    import sys

    if what == "fifo":
        path = tmp_path / "fleet.toml"
        os.mkfifo(path)
    else:
        path = Path(what)

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_MB * 2**20,) * 2)

    done = subprocess.run(
        [sys.executable, "-m", "dlopt", "fleet", command, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit_memory,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    kind = "a FIFO (named pipe)" if what == "fifo" else "a character device"
    assert done.stderr == (
        f"dlopt: error: cannot read the fleet spec {path}: it is {kind}, not a regular file; "
        "give the path of a file\n"
    )


def test_a_spec_larger_than_any_spec_is_refused(tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_bytes(b"# " + b"x" * (4 * 2**20) + b"\n")
    with pytest.raises(ConfigurationError, match="is larger than 4 MiB"):
        read_spec(path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_a_local_run_refuses_what_this_machine_cannot_race(tmp_path, capsys, no_ray):
    text = VALID.replace("[kinds.b]\n", '[kinds.b]\ndevice = "cuda"\n').replace(
        'kinds = ["a", "b"]',
        'kinds = ["a", "b"]\nworkload = [{ name = "huge", shape = [1000000, 1000000, 1000] }]',
    )
    err = run_refused(write(tmp_path, text), capsys, no_ray, "--address", "local")
    assert "with --address local every race runs on this machine" in err
    assert "kinds.b.device: 'cuda': torch" in err and "sees no CUDA device here" in err
    assert "jobs[0].workload: the inputs need" in err
