#!/usr/bin/env bash
# Run here, before using the `device` tool: fetches the wheels that the GPU machine's image
# lacks (../.library/device/KINDS.md lists what it has: torch, numpy, pytest, matplotlib, ...
# but no dask, zarr, gymnasium or MuJoCo) and cuts them into parts that device calls can carry.
#
#   benchmarks/device/fetch_wheels.sh          # wheels for the GPU machine's Python 3.12
#   benchmarks/device/fetch_wheels.sh 3.11     # for another Python (to rehearse here)
#
# Why parts: together the wheels are about 180 MiB (warp-lang's alone is 142 MiB: its CUDA
# library is 110 MiB compressed), and one call carries at most 64 MiB, the working tree
# included. So they travel as one tar cut in parts of at most 56 MiB, .device/part1 ... partN,
# one per call while the machine stays warm; docs/developing.md ("GPU figures") has the calls.
set -euo pipefail
cd "$(dirname "$0")/../.."
pyver="${1:-3.12}"

# The versions of docs/benchmarks.md's machine A, so GPU and CPU figures share them.
# mujoco-studio (the viewer) and websockets (its need) are left out: `import mujoco` runs without them.
pins=(
    dask==2026.8.0 distributed==2026.8.0 tornado==6.6.1 tblib==3.2.2 zict==3.0.0 partd==1.4.2 locket==1.0.0
    bokeh==3.9.2 xyzservices==2026.9.1
    zarr==3.1.6 numcodecs==0.16.6 donfig==0.8.1.post1 google-crc32c==1.9.0
    gymnasium==1.4.0 farama-notifications==0.0.6
    mujoco==4.0.0 mujoco-core==4.0.0 glfw==2.11.0 pyopengl==3.1.10
    mujoco-warp==4.0.0 warp-lang==1.19.0
    cryptography==50.0.2 cffi==2.1.1 pycparser==3.12  # the TLS test of the whole suite (on_gpu.sh suite)
)
if [[ "$pyver" != 3.12 ]]; then
    pins+=(importlib-metadata==10.2.0 lazy-importer zipp==4.1.2)  # dask needs them below Python 3.12
fi

rm -rf .device
mkdir -p .device/wheels
platforms=()
for tag in manylinux_2_34 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1 \
           manylinux_2_5; do
    platforms+=(--platform "${tag}_x86_64")
done
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    "${platforms[@]}" -d .device/wheels "${pins[@]}"

tar -cf .device/wheels.tar -C .device wheels
rm -r .device/wheels
part_limit=$((56 * 1024 * 1024))
size=$(stat -c %s .device/wheels.tar)
parts=$(((size + part_limit - 1) / part_limit))
split --number="$parts" --numeric-suffixes=1 --suffix-length=1 .device/wheels.tar .device/wheels.tar.
(cd .device && sha256sum wheels.tar) >.device/wheels.sha256
for i in $(seq 1 "$parts"); do
    mkdir .device/part"$i"
    mv .device/wheels.tar."$i" .device/part"$i"/
    cp .device/wheels.sha256 .device/part"$i"/
    echo "$parts" >.device/part"$i"/parts
done
rm .device/wheels.tar .device/wheels.sha256
du -sh .device/part*
echo "carry each of .device/part1 ... .device/part$parts in one device call (docs/developing.md, \"GPU figures\")"
