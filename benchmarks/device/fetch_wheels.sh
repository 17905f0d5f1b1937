#!/usr/bin/env bash
# Run here, before using the `device` tool: fetches the wheels that the GPU machine's image
# lacks (../.library/device/KINDS.md lists what it has: torch, numpy, pytest, ... but no dask,
# zarr, gymnasium or MuJoCo) and packs them into what three device calls can carry.
#
#   benchmarks/device/fetch_wheels.sh          # wheels for the GPU machine's Python 3.12
#   benchmarks/device/fetch_wheels.sh 3.11     # for another Python (to rehearse here)
#
# Why three calls: warp-lang's wheel is about 150 MB (its CUDA library alone is 115 MB
# compressed), and one call carries at most 64 MiB, the working tree included. So the wheel
# is cut in three and the calls carry .device/part1, .device/part2 and .device/part3 in turn
# while the machine stays warm; docs/developing.md ("GPU figures") has the calls.
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
)
if [[ "$pyver" != 3.12 ]]; then
    pins+=(importlib-metadata==10.2.0 lazy-importer zipp==4.1.2)  # dask needs them below Python 3.12
fi

rm -rf .device
mkdir -p .device/wheels .device/part1 .device/part2 .device/part3
platforms=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1 manylinux_2_5; do
    platforms+=(--platform "${tag}_x86_64")
done
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    "${platforms[@]}" -d .device/wheels "${pins[@]}"

warp=$(ls .device/wheels/warp_lang-*.whl)
(cd .device/wheels && sha256sum "$(basename "$warp")") >.device/part3/warp.sha256
split --bytes=60M --numeric-suffixes --suffix-length=1 "$warp" .device/warp.whl.
mv .device/warp.whl.0 .device/part1/
mv .device/warp.whl.1 .device/part2/
mv .device/warp.whl.2 .device/part3/
rm "$warp"
mv .device/wheels/*.whl .device/part3/
rmdir .device/wheels
du -sh .device/part1 .device/part2 .device/part3
