#!/usr/bin/env bash
# Fill tools/gpu/dist (git-ignored; or DEST) with the small wheels device_check.sh installs
# on a GPU machine that has no package registry (python 3.12, a CUDA torch preinstalled).
# Run it where pip reaches PyPI, from anywhere in the dlopt checkout:
#
#   bash tools/gpu/prepare_wheels.sh [DEST]
#
# About 20 MB: torchao, cattrs, jsonschema and its dependencies, dllist, torch-tensorrt
# for torch 2.11/2.12/2.13 (the device picks the one matching its torch; TensorRT's own
# libraries are GBs and not carried) and dlopt's five distributions, built from a copy
# of the working tree (so uncommitted changes are checked too).
set -eu -o pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "${DLOPT_REPO:-$HERE/../..}" && pwd)
DEST=$(mkdir -p "${1:-$HERE/dist}" && cd "${1:-$HERE/dist}" && pwd)
PY=${PYTHON:-python3}
[ -f "$REPO/packages/dlopt-core/pyproject.toml" ] || { echo "prepare_wheels: $REPO is not the dlopt checkout" >&2; exit 2; }
# A machine's pip config may add local wheel folders or a torch constraint: not wanted here.
unset PIP_CONSTRAINT PIP_FIND_LINKS PIP_EXTRA_INDEX_URL
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
PLAT=(--only-binary=:all: --python-version "${DEVICE_PYTHON:-3.12}" --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
rm -f "$DEST"/*.whl
# What dlopt needs that the device image lacks (its image has attrs, rich, pluggy, pytest).
"$PY" -m pip download -q --no-deps "${PLAT[@]}" -d "$DEST" \
  "torchao==${TORCHAO_VERSION:-0.18.0}" "cattrs>=23.2.1" "attrs>=25.4" dllist \
  "jsonschema>=4.18" jsonschema-specifications "referencing>=0.28" "rpds-py>=0.7.1"
for v in ${TORCH_TRT_VERSIONS:-2.11.0 2.12.1 2.13.0}; do
  "$PY" -m pip download -q --no-deps "${PLAT[@]}" -d "$DEST" "torch-tensorrt==$v" \
    || echo "prepare_wheels: no torch-tensorrt $v wheel for the device's python"
done
# dlopt's wheels from a copy, so the checkout gets no build/ or *.egg-info folders.
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
(cd "$REPO" && git ls-files -co --exclude-standard -- packages | tar -cf - -T -) | tar -xf - -C "$TMP"
for p in core fx onnxruntime torchao tensorrt; do
  "$PY" -m pip wheel -q --no-deps -w "$DEST" "$TMP/packages/dlopt-$p"
done
ls -la "$DEST"
du -sh "$DEST"
