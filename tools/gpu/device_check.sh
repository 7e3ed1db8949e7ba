#!/usr/bin/env bash
# dlopt's GPU device check: every CUDA path once on a machine with one NVIDIA GPU, in a
# fixed time budget, with a compact summary. See README.md beside this file.
#
#   bash tools/gpu/device_check.sh            # from anywhere in the checkout; results in $OUT
#
# Install modes (DLOPT_GPU_MODE=auto|online|offline, auto picks):
#   online  - PyPI answers: a venv with torch, torchao, onnxruntime-gpu, torch-tensorrt (+
#             TensorRT from pypi.nvidia.com when that host answers) and dlopt.
#   offline - nothing reachable (a GPU machine without a registry): the machine's python3 and CUDA
#             torch, plus the wheels prepare_wheels.sh put in tools/gpu/dist (carried).
# Each step is time-boxed; a failure does not stop later steps; no step starts once
# $DLOPT_BUDGET_S is spent. $OUT gets at most 7 files; summary.txt first.
set -u -o pipefail

T0=$SECONDS
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "${DLOPT_REPO:-$HERE/../..}" && pwd)
OUT=${OUT:-/tmp/dlopt-gpucheck-out}
WORK=${DLOPT_WORK:-/tmp/dlopt-gpucheck}
WHEELS=${DLOPT_WHEELS:-$HERE/dist}
MODE=${DLOPT_GPU_MODE:-auto}
BUDGET=${DLOPT_BUDGET_S:-420}
SYSPY=${PYTHON:-python3}
[[ $SYSPY == */* ]] && SYSPY=$(cd "$(dirname "$SYSPY")" && pwd)/$(basename "$SYSPY")
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TORCH_TRT_VERSION=${TORCH_TRT_VERSION:-2.13.0}
TORCHAO_VERSION=${TORCHAO_VERSION:-0.18.0}
ORT_GPU_VERSION=${ORT_GPU_VERSION:-1.31.1}
# ONNX Runtime's TensorRT EP links TensorRT 10; torch-tensorrt 2.13 needs TensorRT 11.
ORT_TRT_LIBS=${ORT_TRT_LIBS:-tensorrt-cu13-libs==10.*}
NVIDIA_INDEX=${NVIDIA_INDEX:-https://pypi.nvidia.com}
SELECT_MEASURE_S=${SELECT_MEASURE_S:-15}
ONLY=${DLOPT_STEPS:-}        # comma-separated step names to run (default: all)
DRY=${DLOPT_DRY_RUN:-0}      # 1: print each step's command instead of running it
GPUCHECK=$HERE/gpucheck.py

if [ ! -f "$REPO/packages/dlopt-core/pyproject.toml" ]; then
  echo "device_check: $REPO is not the dlopt checkout (set DLOPT_REPO)" >&2
  exit 2
fi
mkdir -p "$OUT"
rm -rf "$WORK"
mkdir -p "$WORK/logs"
LOGS=$WORK/logs
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_DEFAULT_TIMEOUT=20
export TORCHINDUCTOR_CACHE_DIR=$WORK/inductor-cache
SUMMARY=()
FACTS=()

note() { FACTS+=("$*"); echo "NOTE: $*"; }
left() { echo $(( BUDGET - (SECONDS - T0) )); }

# step NAME LIMIT_S COMMAND...   (output -> $LOGS/NAME.log; status -> summary)
step() {
  local name=$1 limit=$2
  shift 2
  if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then
    SUMMARY+=("$(printf 'SKIP     %-20s not in DLOPT_STEPS' "$name")")
    return 98
  fi
  if [ "$DRY" = 1 ]; then
    SUMMARY+=("$(printf 'DRY      %-20s %s' "$name" "$*")")
    echo "--- $name (dry run): $*"
    return 0
  fi
  local remaining
  remaining=$(left)
  if (( remaining < 20 )); then
    SUMMARY+=("$(printf 'SKIP     %-20s budget spent' "$name")")
    echo "--- $name: skipped, budget spent"
    return 99
  fi
  (( limit > remaining )) && limit=$remaining
  echo "--- $name (limit ${limit}s, t=$((SECONDS - T0))s)"
  local t=$SECONDS rc
  timeout -k 10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  local status=OK
  (( rc != 0 )) && status=FAIL
  (( rc == 124 || rc == 137 )) && status=TIMEOUT
  SUMMARY+=("$(printf '%-8s %-20s rc=%-3s %4ss' "$status" "$name" "$rc" "$((SECONDS - t))")")
  tail -n 3 "$LOGS/$name.log" | sed 's/^/    /'
  return $rc
}

summarize() { "${PY:-$SYSPY}" "$GPUCHECK" summary "$@"; }

finish() {
  local rc=$?
  trap - EXIT
  {
    echo "== dlopt GPU device check: mode=$MODE, $((SECONDS - T0))s of ${BUDGET}s budget"
    for f in ${FACTS[@]+"${FACTS[@]}"}; do echo "  $f"; done
    echo "== steps"
    for s in ${SUMMARY[@]+"${SUMMARY[@]}"}; do echo "  $s"; done
    [ -s "$OUT/providers_cuda.json" ] && { echo "== dlopt providers --device cuda --json"; summarize providers "$OUT/providers_cuda.json"; }
    [ -s "$OUT/inspect_cuda.json" ] && { echo "== dlopt inspect --device cuda --json"; summarize inspect "$OUT/inspect_cuda.json"; }
    [ -s "$OUT/pytest_gpu.xml" ] && { echo "== pytest -m gpu"; summarize junit "$OUT/pytest_gpu.xml"; }
    [ -s "$LOGS/pytest_ort_trt10.xml" ] && { echo "== pytest -m gpu (ONNX Runtime TensorRT EP on TensorRT 10)"; summarize junit "$LOGS/pytest_ort_trt10.xml"; }
    [ -s "$LOGS/pytest_trt_contract.xml" ] && { echo "== provider contract suite over Torch-TensorRT"; summarize junit "$LOGS/pytest_trt_contract.xml"; }
    if [ -s "$OUT/select_report.json" ]; then
      echo "== dlopt select (cuda race)"; summarize select "$OUT/select_report.json"
    elif [ -s "$LOGS/select.log" ]; then
      echo "== dlopt select (no report)"; tail -n 15 "$LOGS/select.log" | cut -c1-220 | sed 's/^/  /'
    fi
  } >"$OUT/summary.txt" 2>&1
  for f in "$LOGS"/*.log; do
    [ -e "$f" ] || continue
    echo "=================== $(basename "$f") ($(wc -l <"$f") lines, last 400)"
    tail -n 400 "$f"
  done >"$OUT/steps.log" 2>&1
  tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs 2>/dev/null
  cat "$OUT/summary.txt"
  exit $rc
}
trap finish EXIT

# ------------------------------------------------------------------ environment
env_report() {
  echo "repo: $REPO"; uname -a; nproc; free -g | head -2; df -h /tmp | tail -1
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || echo "nvidia-smi failed"
  command -v "$SYSPY"; "$SYSPY" --version
  "$SYSPY" -c "import torch; print('system torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())" 2>&1
  (ldconfig -p 2>/dev/null | grep -E "libnvinfer|libcudnn\.so|libcublas\.so" | head -8) || true
  ls "$WHEELS" 2>/dev/null | sed "s/^/wheel: /"
}
export -f env_report
export REPO SYSPY WHEELS
step env 60 bash -c env_report
GPU=$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null | head -1)
note "gpu: ${GPU:-none seen by nvidia-smi}"

reachable() {
  timeout 15 "$SYSPY" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)" "$1" >/dev/null 2>&1
}
if [ "$MODE" = auto ]; then
  if [ "$DRY" != 1 ] && reachable https://pypi.org/simple/pip/; then MODE=online; else MODE=offline; fi
fi
NVIDIA_OK=0
if [ "$MODE" = online ] && reachable "$NVIDIA_INDEX/tensorrt-cu13-libs/"; then NVIDIA_OK=1; fi
note "install mode: $MODE (pypi.nvidia.com reachable: $NVIDIA_OK)"

# ------------------------------------------------------------------ install
DLOPT_DIRS=("$REPO/packages/dlopt-core" "$REPO/packages/dlopt-fx" "$REPO/packages/dlopt-onnxruntime"
            "$REPO/packages/dlopt-torchao" "$REPO/packages/dlopt-tensorrt")

install_online() {
  "$SYSPY" -m venv "$WORK/venv" || return 1
  PY=$WORK/venv/bin/python
  step pip_torch 360 "$PY" -m pip install -q "torch==$TORCH_VERSION" || return 1
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    note "torch==$TORCH_VERSION from the registry does not see the GPU"; return 1; }
  step pip_deps 240 "$PY" -m pip install -q "torch==$TORCH_VERSION" "torchao==$TORCHAO_VERSION" \
    "onnxruntime-gpu==$ORT_GPU_VERSION" pytest pytest-timeout hypothesis
  step pip_dlopt 180 "$PY" -m pip install -q "torch==$TORCH_VERSION" "onnxruntime-gpu==$ORT_GPU_VERSION" \
    "${DLOPT_DIRS[@]}"
  if (( NVIDIA_OK )); then
    step pip_trt 240 "$PY" -m pip install -q "torch==$TORCH_VERSION" "torch-tensorrt==$TORCH_TRT_VERSION" \
      --extra-index-url "$NVIDIA_INDEX" || true
    step pip_trt10_for_ort 240 "$PY" -m pip install -q --no-deps --target "$WORK/trt10" \
      --extra-index-url "$NVIDIA_INDEX" "$ORT_TRT_LIBS" || true
  else
    note "TensorRT libraries unobtainable: PyPI's tensorrt-cu13-libs is a stub that downloads from $NVIDIA_INDEX"
    step pip_trt_nolibs 120 "$PY" -m pip install -q --no-deps "torch-tensorrt==$TORCH_TRT_VERSION" dllist || true
  fi
  return 0
}

install_offline() {
  PY=$SYSPY
  SITE=$WORK/site
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || note "offline mode: $PY has no CUDA torch"
  local tminor
  tminor=$("$PY" -c "import torch; print('.'.join(torch.__version__.split('+')[0].split('.')[:2]))" 2>/dev/null)
  local wheels=() trt=()
  if [ -d "$WHEELS" ]; then
    for w in "$WHEELS"/*.whl; do
      case $(basename "$w") in
        dlopt_*|torch_tensorrt-*) ;;
        *) [ -e "$w" ] && wheels+=("$w") ;;
      esac
    done
    for w in "$WHEELS"/torch_tensorrt-"${tminor}".*.whl; do [ -e "$w" ] && trt=("$w"); done
  fi
  if (( ${#wheels[@]} )); then
    step pip_wheels 120 "$PY" -m pip install -q --no-index --no-deps --upgrade --target "$SITE" "${wheels[@]}"
  else
    note "no carried wheels in $WHEELS: run tools/gpu/prepare_wheels.sh and carry tools/gpu/dist"
  fi
  if (( ${#trt[@]} )); then
    # Without TensorRT's libraries this exercises the probe's import layer only.
    step pip_torch_tensorrt 120 "$PY" -m pip install -q --no-index --no-deps --upgrade --target "$SITE" "${trt[@]}"
  else
    note "no torch-tensorrt ${tminor}.x wheel carried: the tensorrt plans will say it is not installed"
  fi
  # dlopt from this checkout (current even if the carried wheels are older), else carried.
  step pip_dlopt 180 "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --upgrade \
    --target "$SITE" "${DLOPT_DIRS[@]}" || {
    local built=("$WHEELS"/dlopt_*.whl)
    [ -e "${built[0]}" ] && step pip_dlopt_wheels 120 "$PY" -m pip install -q --no-index --no-deps \
      --upgrade --target "$SITE" "${built[@]}"
  }
  note "TensorRT libraries: $(ldconfig -p 2>/dev/null | grep -c libnvinfer) libnvinfer entries on this machine"
  return 0
}

if [ "$MODE" = online ]; then
  install_online || { note "online install failed: offline mode instead"; MODE=offline; install_offline; }
else
  install_offline
fi
PY=${PY:-$SYSPY}
step versions 60 "$PY" "$GPUCHECK" versions
note "versions: $(grep -E "^(python|dlopt-core|torchao|onnxruntime|onnxruntime-gpu|torch-tensorrt|tensorrt) " "$LOGS/versions.log" 2>/dev/null | tr '\n' ';')"

# ------------------------------------------------------------------ the checks
# stdout alone goes to the JSON file: anything an SDK prints there breaks it (summary says).
step providers 150 bash -c 'cd "$1" && shift && exec "$@" >"$0"' "$OUT/providers_cuda.json" "$WORK" \
  "$PY" -m dlopt providers --device cuda --json
step inspect 150 bash -c 'cd "$1" && shift && exec "$@" >"$0"' "$OUT/inspect_cuda.json" "$WORK" \
  "$PY" -m dlopt inspect --device cuda --json

# A module that fails to import is reported, and the other modules still run.
PYTEST=("$PY" -m pytest -p no:cacheprovider -rA -q --continue-on-collection-errors)
"$PY" -c "import pytest_timeout" >/dev/null 2>&1 && PYTEST+=(--timeout=170)
# Every GPU-marked test of every distribution: see README.md. The paths are named rather
# than pyproject's testpaths: the example NPU provider's conftest imports its own SDK
# package (tinynpu), which the device does not have, and it has no GPU tests.
step pytest_gpu 300 bash -c 'cd "$0" && exec "$@"' "$REPO" "${PYTEST[@]}" -m gpu \
  --junitxml="$OUT/pytest_gpu.xml" packages/dlopt-core/tests packages/dlopt-fx/tests \
  packages/dlopt-onnxruntime/tests packages/dlopt-torchao/tests packages/dlopt-tensorrt/tests \
  tests/integration
if [ -d "$WORK/trt10/tensorrt_libs" ]; then
  step pytest_ort_trt10 180 env LD_LIBRARY_PATH="$WORK/trt10/tensorrt_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    bash -c 'cd "$0" && exec "$@"' "$REPO" "${PYTEST[@]}" -m gpu -k tensorrt \
    --junitxml="$LOGS/pytest_ort_trt10.xml" packages/dlopt-onnxruntime/tests
fi

# A short race of every provider (max-autotune excluded: its CUDA compile alone takes minutes).
# --all-plans: the default time budget would leave most CUDA plans unbuilt (no CUDA priors
# ship in the table, so none can be ruled out, and 10 s holds only the first few builds).
step select 300 bash -c 'cd "$0" && exec "$@"' "$HERE" "$PY" -m dlopt select gpucheck:mlp --device cuda \
  --case b1=1x512@3 --case b32=32x512@1 --max-measure-time "$SELECT_MEASURE_S" --seed 1 \
  --all-plans --exclude inductor_max_autotune --report "$OUT/select_report.json" --artifacts "$WORK/artifacts"

# The provider contract suite over real Torch-TensorRT builds (skips with the probe's reason).
step pytest_trt_contract 150 bash -c 'cd "$0" && exec "$@"' "$REPO" "${PYTEST[@]}" \
  --junitxml="$LOGS/pytest_trt_contract.xml" packages/dlopt-tensorrt/tests/test_contract.py
exit 0
