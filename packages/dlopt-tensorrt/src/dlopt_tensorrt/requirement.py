"""The torch-tensorrt requirement that matches a torch version, as pip understands it.

dlopt-tensorrt does not depend on torch-tensorrt, not even through an extra: each
torch-tensorrt release is built for one torch minor (torch-tensorrt 2.N needs torch
2.N.*), and an open requirement such as ``torch-tensorrt>=2.4`` lets pip pick the newest
release and replace the user's torch (and pull a multi-GB CUDA stack) to satisfy it. The
user installs the release paired with their torch; these helpers spell it out.
"""

from __future__ import annotations

from dlopt_tensorrt.compat import DISTRIBUTION, _minor, cuda_index_url

#: NVIDIA's package index. TensorRT's libraries (``tensorrt-cu13-libs``...) live there;
#: PyPI only has a stub of them that downloads from it at install time.
NVIDIA_INDEX = "https://pypi.nvidia.com"

#: Why the probe finds no torch-tensorrt: it is never installed for the user.
NOT_INSTALLED_NOTE = "dlopt-tensorrt leaves it to you: install the release that matches torch"

#: The requirement when torch's version cannot be read (a source build, say).
UNKNOWN_PIN = f"{DISTRIBUTION}==<torch major.minor>.*"


def torch_tensorrt_pin(torch_version: str) -> str | None:
    """The requirement for the torch-tensorrt paired with ``torch_version``.

    ``"2.13.0+cu126"`` -> ``"torch-tensorrt==2.13.*"``; ``None`` when the version has no
    readable major.minor.
    """
    minor = _minor(torch_version)
    if minor is None:
        return None
    return f"{DISTRIBUTION}=={minor[0]}.{minor[1]}.*"


def install_command(torch_version: str, torch_cuda: str | None) -> str:
    """The exact pip command that installs the torch-tensorrt paired with this torch.

    The pin keeps pip from picking a release built for another torch (which would replace
    torch); the first extra index serves wheels for the CUDA version torch was built
    with, the second (NVIDIA's) the TensorRT libraries torch-tensorrt depends on.
    """
    pin = torch_tensorrt_pin(torch_version) or UNKNOWN_PIN
    command = (
        f'pip install "{pin}" --extra-index-url {cuda_index_url(torch_cuda)} '
        f"--extra-index-url {NVIDIA_INDEX}"
    )
    if torch_cuda is None:
        command = (
            f"torch {torch_version} is a CPU-only build: install a CUDA build of torch "
            f"first, then {command} with cuXXX set to its CUDA version (e.g. cu126)"
        )
    return command


def libraries_hint(version: str, tensorrt: tuple[str, int] | None) -> str:
    """How to get the TensorRT libraries torch-tensorrt ``version`` needs back.

    ``tensorrt``: ``(distribution, major)`` from its metadata
    (:func:`dlopt_tensorrt.compat.tensorrt_requirement`).
    """
    needs = f"its TensorRT {tensorrt[1]} libraries ({tensorrt[0]})" if tensorrt else "its TensorRT"
    return (
        f'pip install --force-reinstall "torch-tensorrt=={version}" --extra-index-url '
        f"{NVIDIA_INDEX}: {needs} come from NVIDIA's index (PyPI has only a stub that "
        "downloads from there, which fails where that host is unreachable); or add the lib/ "
        "directory of a TensorRT tarball of that major to LD_LIBRARY_PATH. TensorRT 10 and "
        "11 cannot share one environment: ONNX Runtime's TensorRT EP needs its own"
    )
