#!/usr/bin/env bash
# Runs on the GPU machine of the `device` tool, from the repository root, after
# benchmarks/device/fetch_wheels.sh has cut the wheels into parts here (docs/developing.md, "GPU figures").
#
#   benchmarks/device/on_gpu.sh collect   # in a call carrying .device/partK: keeps that part
#   benchmarks/device/on_gpu.sh envs      # env throughput on CUDA, Ant through MuJoCo Warp
#                                         # (arguments after `envs` go to benchmarks/env_throughput.py)
#   benchmarks/device/on_gpu.sh tests     # the tests that need CUDA, and the env tests
#   benchmarks/device/on_gpu.sh train     # the shipped Pendulum tournament with its segments on CUDA
#   benchmarks/device/on_gpu.sh iteration # one SAC iteration of that tournament on CUDA and on the CPU:
#                                         # ms, torch ops, torch.profiler's top ops
#   benchmarks/device/on_gpu.sh captured  # captured learner updates (issue 23): the CUDA tests of
#                                         # tests/test_captured_updates.py and tests/test_graphed_env.py (a torch
#                                         # env's step as one graph), then benchmarks/captured_updates.py
#                                         # --device cuda (ms per update and per iteration, eager vs one CUDA
#                                         # graph; SAC's row is the shipped Pendulum config's iteration)
#   benchmarks/device/on_gpu.sh pendulum-time ["SEEDS" ["SEEDS"]]  # time to -200 of the shipped Pendulum
#                                         # tournament on CUDA: benchmarks/pendulum_tournament.py with captured
#                                         # updates (seeds 0 1 2), then eager (seed 0)
#   benchmarks/device/on_gpu.sh ppo-warp [ARGS]  # PPO's training throughput on WarpAnt-v0, eager and captured,
#                                         # 4,096 and 16,384 worlds: benchmarks/ppo_throughput.py (issue 23)
#   benchmarks/device/on_gpu.sh actors [ARGS]  # benchmarks/actor_learner.py: learner ingest, policy lag and the
#                                         # scheduler's bytes with 1, 2, 4, 8 actor processes on HalfCheetah-v5, the
#                                         # learner on cuda:0 (issue 25; uses the machine's 16 cores)
#   benchmarks/device/on_gpu.sh apex-race [ARGS]  # benchmarks/apex_race.py: Ape-X DQN against one-task DQN to
#                                         # CartPole 475 (issue 25), where the actors have cores of their own
#   benchmarks/device/on_gpu.sh setup     # the install alone (every step installs first, once)
#   benchmarks/device/on_gpu.sh pack      # everything under $OUT in results.tgz (a call brings back 8 files)
#   benchmarks/device/on_gpu.sh train-captured  # the shipped Pendulum tournament on CUDA with
#                                         # `compile = "auto"` (captured updates), 3-minute budget
#   benchmarks/device/on_gpu.sh shared-gpu # several segments per GPU (issue 23): benchmarks/gpu_members.py
#                                         # --device cuda, the population's env steps/s with 1, 2, 4 and 8
#                                         # members on cuda:0, as processes and as threads (2 segments each),
#                                         # nvidia-smi sampled each second beside it; arguments after
#                                         # `shared-gpu` go to the script (`--sharing threads` runs one mode,
#                                         # to split the step across two calls near the 10-minute limit;
#                                         # `shared-gpu --mps ...` runs it under NVIDIA's MPS daemon, started
#                                         # and stopped by the script as `cluster.mps = true` does)
#   benchmarks/device/on_gpu.sh warp      # the MuJoCo Warp tasks' env steps/s on CUDA (issue 24):
#                                         # benchmarks/warp_throughput.py --device cuda, every task at 4,096,
#                                         # 16,384 and 32,768 worlds (arguments after `warp` go to the script)
#   benchmarks/device/on_gpu.sh integrators [WORLDS]  # MuJoCo Warp's Ant env step under RK4 (gymnasium's), implicitfast
#                                         # and Euler on cuda:0 at WORLDS (16,384) worlds, one captured graph each:
#                                         # benchmarks/integrator_transfer.py (what a cheaper integrator would
#                                         # give, issue 24's 2M steps/s; on the CPU it was 3.8x)
#   benchmarks/device/on_gpu.sh train-warp CONFIG [BUDGET [--set SECTION.KEY=VALUE ...]]  # a shipped GPU
#                                         # config (warp_ant.toml, warp_humanoid.toml) for BUDGET (default 9m) on
#                                         # CUDA, with podracer train's options after BUDGET (--set
#                                         # run.target_return=4000 stops at issue 24's bar, which leaves device
#                                         # time for the next run); its store stays in .device/build while the
#                                         # machine is warm, so a second call right after resumes it; reward vs
#                                         # wall-clock and vs env steps are in the JSON's history
#   benchmarks/device/on_gpu.sh suite [PATHS]  # the test suite (or PATHS), as a user with a GPU would run it;
#                                         # whole, it took over 15 minutes on an H100 machine: split it
#                                         # across calls (docs/developing.md, "GPU figures")
#
# Every step first keeps the parts its call carried; the parts wait in .device/build, which the
# machine keeps between calls while it stays warm. The other steps join them, check the sum and
# install the wheels (once) before they run. Each writes its output to $OUT (the device tool
# brings it back).
set -euo pipefail
cd "$(dirname "$0")/../.."
step="${1:?usage: on_gpu.sh collect|envs|tests|train|iteration|captured|train-captured|pendulum-time|ppo-warp|shared-gpu|warp|integrators|train-warp|actors|suite|setup|pack}"
out="${OUT:-/tmp/podracer-out}"
device="${PODRACER_DEVICE:-cuda}"  # cpu only to rehearse this script on a machine without one
build=.device/build
site="$build/site"
mkdir -p "$build" "$out"

collect() {
    local part
    for part in .device/part*/; do  # this call's part, and any an earlier call left
        cp "$part"wheels.tar.* "$part"wheels.sha256 "$part"parts "$build/"
        if [[ -d ${part}early ]]; then
            cp -r "${part}early" "$build/"
        fi
    done
    ls "$build"
}

all_parts() {
    local i
    [[ -f $build/parts ]] || return 1
    for i in $(seq 1 "$(cat "$build/parts")"); do
        [[ -f $build/wheels.tar.$i ]] || return 1
    done
}

# Before every part has arrived: part1's loose gymnasium beside the image's own torch, all that the agents and
# the torch envs need (no Dask, Zarr or MuJoCo), so a first call can already measure captured updates.
# Once every part is here, the full install.
install_or_early() {
    if [[ -f $site/.installed ]] || all_parts; then
        install
        return
    fi
    local early="$build/early-site"
    if [[ ! -f $early/.installed ]]; then
        python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$early" "$build"/early/*.whl
        touch "$early/.installed"
    fi
    export PYTHONPATH="$PWD/$early:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
    {
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
        echo "cpus: $(nproc)"
        # physical cores against hardware threads: the actor sweep's 8 actors may share 8 cores (docs/benchmarks.md)
        lscpu 2>/dev/null | grep -E "^(Model name|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)):" || true
        python3 -c "import sys, torch, gymnasium; print(sys.version.split()[0], 'torch', torch.__version__,
              'gymnasium', gymnasium.__version__, '(before the other parts: no Dask, Zarr or MuJoCo)')"
    } | tee "$out/machine.txt"
}

install() {
    if [[ ! -f $site/.installed ]]; then
        local i missing=()
        if [[ ! -f $build/parts ]]; then
            missing=(".device/part1 ...")
        else
            for i in $(seq 1 "$(cat "$build/parts")"); do
                [[ -f $build/wheels.tar.$i ]] || missing+=(".device/part$i")
            done
        fi
        if ((${#missing[@]})); then
            echo "on_gpu.sh: wheels missing: carry ${missing[*]} with 'on_gpu.sh collect' first" \
                 "(a machine that went cold has lost what earlier calls carried)" >&2
            exit 1
        fi
        cat "$build"/wheels.tar.? >"$build/wheels.tar"
        (cd "$build" && sha256sum --check --quiet wheels.sha256)
        # an xz-compressed tar (fetch_wheels.sh): the wheels, and warp-lang unpacked without its CPU compiler
        python3 -c "import sys, tarfile; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2], filter='tar')" \
            "$build/wheels.tar" "$build"
        python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$site" "$build"/wheels/*.whl
        if [[ -d $build/warp ]]; then
            cp -r "$build"/warp/. "$site"/
        fi
        rm -rf "$build/wheels.tar" "$build/wheels" "$build/warp"
        # dask_podracer itself, as a user installs it: the tests run the `podracer` console script
        python3 -m pip install --quiet --no-index --no-deps --no-build-isolation --no-cache-dir -e .
        touch "$site/.installed"
    fi
    export PYTHONPATH="$PWD/$site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
    {
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
        echo "cpus: $(nproc)"
        # physical cores against hardware threads: the actor sweep's 8 actors may share 8 cores (docs/benchmarks.md)
        lscpu 2>/dev/null | grep -E "^(Model name|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)):" || true
        python3 -c "import sys, torch, dask, zarr, gymnasium; print(sys.version.split()[0], 'torch', torch.__version__,
              'dask', dask.__version__, 'zarr', zarr.__version__, 'gymnasium', gymnasium.__version__)"
    } | tee "$out/machine.txt"
}

# workflows/configs/pendulum.toml with `compile = "auto"` written out: captured updates on CUDA, whatever the default
captured_config() {
    sed 's/^\[hparams\].*/&\ncompile = "auto"/' workflows/configs/pendulum.toml >"$build/pendulum_captured.toml"
    grep -q '^compile = "auto"' "$build/pendulum_captured.toml"
}

collect >"$out/collect.txt"
case "$step" in
collect)
    cat "$out/collect.txt"
    ;;
envs)
    install
    python3 benchmarks/env_throughput.py --device "$device" --ant "${@:2}" 2>&1 | tee "$out/env_throughput.txt"
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
iteration)
    install
    for dev in cuda cpu; do
        python3 benchmarks/iteration_cost.py --device "$dev" --profile "${@:2}"
    done 2>&1 | tee "$out/iteration.txt"
    ;;
captured)
    install_or_early
    {
        python3 -m pytest -q -rs -p no:cacheprovider tests/test_captured_updates.py -k "cuda or setting or checkpoint" \
            || echo "on_gpu.sh: captured-update tests failed (exit $?)"
        python3 -m pytest -q -rs -p no:cacheprovider tests/test_graphed_env.py \
            || echo "on_gpu.sh: graphed-env tests failed (exit $?)"
        python3 benchmarks/captured_updates.py --device "$device" "${@:2}"
    } 2>&1 | tee "$out/captured.txt"
    grep "^{" "$out/captured.txt" | tail -n 1 >"$out/captured.json"
    python3 - "$out/captured.json" <<'PY' | tee "$out/captured_summary.txt"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['device']}: ms per update and per iteration, eager -> captured (issue 23 asks SAC's iteration <= 3 ms, "
      "every update >= 3x)")
for name, row in r["results"].items():
    e, c = row["eager"], row["captured"]
    print(f"  {name:5s} update {e['ms_per_update']:8.3f} -> {c['ms_per_update']:7.3f} ms ({row['update_speedup']}x)"
          f"   iteration {e['ms_per_iteration']:8.3f} -> {c['ms_per_iteration']:7.3f} ms ({row['iteration_speedup']}x)"
          f"   env step {e.get('ms_per_env_step')} -> {c.get('ms_per_env_step')} ms (graphed: {c.get('env_graphed')})")
PY
    ;;
train-captured)
    install
    captured_config
    python3 -m dask_podracer.cli train "$build/pendulum_captured.toml" --store "$build/pendulum_captured.zarr" \
        --budget 3m --json "$out/train_captured.json" --quiet 2>&1 | tee "$out/train_captured.txt"
    ;;
pendulum-time)
    install
    captured_config
    {
        python3 benchmarks/pendulum_tournament.py --config "$build/pendulum_captured.toml" --seeds ${2:-0 1 2}
        python3 benchmarks/pendulum_tournament.py --config workflows/configs/pendulum.toml --seeds ${3:-0}
    } 2>&1 | tee "$out/pendulum_time.txt"
    ;;
ppo-warp)
    install
    python3 benchmarks/ppo_throughput.py --device "$device" "${@:2}" 2>&1 | tee "$out/ppo_throughput.txt"
    ;;
actors)  # one IMPALA agent fed by 1, 2, 4, 8 actor processes on HalfCheetah-v5, the learner on the GPU (issue 25)
    install
    python3 benchmarks/actor_learner.py "${@:2}" 2>&1 | tee "$out/actor_learner.txt"
    ;;
apex-race)  # Ape-X DQN against one-task DQN to CartPole 475 on the 16-core machine (issue 25; on 2 cores the shipped config is sooner)
    install
    python3 benchmarks/apex_race.py "${@:2}" 2>&1 | tee "$out/apex_race.txt"
    ;;
setup)  # the install alone, so that a time limit on the next step does not cut it short
    install
    ;;
pack)  # everything under $OUT in one file: the device tool brings back at most 8
    tar -czf /tmp/podracer-results.tgz -C "$out" --exclude=collect.txt .
    find "$out" -mindepth 1 -delete
    mv /tmp/podracer-results.tgz "$out/results.tgz"
    ;;
shared-gpu)
    install
    smi=""
    if command -v nvidia-smi >/dev/null; then  # GPU utilisation and memory while the members train
        nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 1 >"$out/shared_gpu_smi.csv" &
        smi=$!
    fi
    status=0
    # `shared-gpu --mps ...`: the script runs NVIDIA's MPS daemon around each run, through the code behind
    # `cluster.mps = true` (population/gpu_mps.py); on 2026-11-28 this step started the daemon itself instead
    python3 benchmarks/gpu_members.py --device "$device" --members 1 2 4 8 --sharing processes threads \
        --segments 2 "${@:2}" 2>&1 | tee "$out/shared_gpu.txt" || status=$?
    [[ -z $smi ]] || kill "$smi"  # the sampler stops whether or not the benchmark finished
    grep "^{" "$out/shared_gpu.txt" | tail -n 1 >"$out/shared_gpu.json" || true
    exit "$status"
    ;;
warp)
    install
    # appended, so that several `warp` steps in one call (other --worlds, --nconmax/--njmax) all come back
    echo "== warp ${*:2}" >>"$out/warp_throughput.txt"
    python3 benchmarks/warp_throughput.py --device "$device" --envs WarpAnt-v0 WarpHumanoid-v0 WarpHalfCheetah-v0 \
        WarpHopper-v0 WarpWalker2d-v0 "${@:2}" 2>&1 | tee "$out/warp.last.txt"
    cat "$out/warp.last.txt" >>"$out/warp_throughput.txt"
    grep "^{" "$out/warp.last.txt" | tail -n 1 >>"$out/warp_throughput.json" || true
    rm -f "$out/warp.last.txt"
    ;;
integrators)
    install
    python3 benchmarks/integrator_transfer.py --warp-worlds "${2:-16384}" --warp-device cuda:0 --warp-steps 50 2>&1 \
        | tee "$out/integrators.txt"
    ;;
train-warp)
    install
    config="${2:?usage: on_gpu.sh train-warp CONFIG [BUDGET [--set SECTION.KEY=VALUE ...]]}"
    name="$(basename "$config" .toml)"
    python3 -m dask_podracer.cli train "$config" --store "$build/$name.zarr" --budget "${3:-9m}" \
        --json "$out/train_$name.json" --quiet "${@:4}" 2>&1 | tee "$out/train_$name.txt"
    ;;
suite)
    install
    python3 -m pytest -q -rs -p no:cacheprovider --durations=20 "${@:2}" 2>&1 | tee "$out/suite.txt"
    ;;
*)
    echo "unknown step '$step': collect, envs, tests, train, iteration, captured, train-captured, pendulum-time," \
         "ppo-warp, shared-gpu, warp, integrators, train-warp, actors, apex-race, suite, setup or pack" >&2
    exit 2
    ;;
esac
