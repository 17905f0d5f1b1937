#!/usr/bin/env bash
# Runs on the GPU machine of the `device` tool, from the repository root, after
# benchmarks/device/fetch_wheels.sh has packed the wheels here (docs/developing.md, "GPU figures").
#
#   benchmarks/device/on_gpu.sh collect   # calls carrying .device/part1, then .device/part2
#   benchmarks/device/on_gpu.sh envs      # carrying .device/part3: env throughput on CUDA, Ant through MuJoCo Warp
#                                         # (arguments after `envs` go to benchmarks/env_throughput.py)
#   benchmarks/device/on_gpu.sh tests     # the tests that need CUDA, and the env tests
#   benchmarks/device/on_gpu.sh train     # the shipped Pendulum tournament with its segments on CUDA
#
# Each writes its output to $OUT (the device tool brings it back). The parts of warp-lang's
# wheel wait in .device/build, which the machine keeps between calls while it stays warm;
# if it went cold in between, `envs` says so and times the torch envs without MuJoCo Warp.
set -euo pipefail
cd "$(dirname "$0")/../.."
step="${1:?usage: on_gpu.sh collect|envs|tests|train}"
out="${OUT:-/tmp/podracer-out}"
device="${PODRACER_DEVICE:-cuda}"  # cpu only to rehearse this script on a machine without one
build=.device/build
site="$build/site"
mkdir -p "$build" "$out"

install() {
    local wheels=(.device/part3/*.whl)
    if [[ -f $build/warp.whl.0 && -f $build/warp.whl.1 && -f .device/part3/warp.whl.2 ]]; then
        local name
        name=$(cut -d' ' -f3 .device/part3/warp.sha256)
        cat "$build/warp.whl.0" "$build/warp.whl.1" .device/part3/warp.whl.2 >"$build/$name"
        (cd "$build" && sha256sum --check --quiet ../part3/warp.sha256)
        wheels+=("$build/$name")
        have_warp=1
    else
        echo "warp-lang's first parts are not in $build (the machine went cold since the collect calls?):" \
             "MuJoCo Warp is left out" | tee -a "$out/machine.txt"
        have_warp=0
    fi
    python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "${wheels[@]}"
    export PYTHONPATH="$PWD/$site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
    {
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
        nproc
        python3 -c "import sys, torch, dask, zarr, gymnasium; print(sys.version.split()[0], 'torch', torch.__version__,
              'dask', dask.__version__, 'zarr', zarr.__version__, 'gymnasium', gymnasium.__version__)"
    } | tee -a "$out/machine.txt"
}

case "$step" in
collect)
    cp .device/part*/warp.whl.[01] "$build/"
    ls -l "$build" | tee "$out/collect.txt"
    ;;
envs)
    install
    ant=()
    [[ $have_warp == 1 ]] && ant=(--ant)
    python3 benchmarks/env_throughput.py --device "$device" "${ant[@]}" "${@:2}" 2>&1 | tee "$out/env_throughput.txt"
    ;;
tests)
    install
    python3 -m pytest -q -rs -p no:cacheprovider tests/test_pipeline.py tests/test_isaacgym_adapter.py \
        tests/test_envs.py tests/test_envs_warp.py tests/test_check_vec_env.py 2>&1 | tee "$out/tests.txt"
    ;;
train)
    install
    python3 -m dask_podracer.cli train workflows/configs/pendulum.toml --store "$build/pendulum.zarr" \
        --budget 3m --json "$out/train.json" --quiet 2>&1 | tee "$out/train.txt"
    ;;
*)
    echo "unknown step '$step': collect, envs, tests or train" >&2
    exit 2
    ;;
esac
