#!/usr/bin/env bash
# Run here, before using the `device` tool: fetches the wheels that the GPU machine's image
# lacks (../.library/device/KINDS.md lists what it has: torch, numpy, pytest, matplotlib, ...
# but no dask, zarr, gymnasium or MuJoCo) and cuts them into parts that device calls can carry.
#
#   benchmarks/device/fetch_wheels.sh          # wheels for the GPU machine's Python 3.12
#   benchmarks/device/fetch_wheels.sh 3.11     # for another Python (to rehearse here)
#
# Why parts: one call carries at most 64 MiB, the working tree included, and the bundle is about 111 MiB
# even after the packing below. So it travels as one xz-compressed tar cut in parts of at most 58 MiB,
# .device/part1 ... partN, one per call while the machine stays warm; docs/developing.md ("GPU figures").
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
# cryptography (the TLS test of the whole suite) is left out to keep the bundle in two parts: that test skips there.
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

# gymnasium (with farama-notifications) also travels loose in part1: with the image's torch it is all the agents
# and the torch envs need, so the first call can measure captured updates before the other parts arrive.
mkdir .device/early
cp .device/wheels/gymnasium-*.whl .device/wheels/farama_notifications-*.whl .device/early/

# warp-lang's wheel is mostly two native libraries: warp.so (CUDA and the NVRTC compiler, 299 MB) and
# warp-clang.so (LLVM, 69 MB), which only builds kernels for the CPU. The GPU machine runs Warp on CUDA alone, so
# for Python 3.12 the wheel travels unpacked without warp-clang.so, its examples and its tests (Warp then reports
# no CPU device), and the whole bundle is compressed with xz, which packs warp.so to 81 MB where the wheel's zip
# takes 110: two parts instead of four, so two device calls instead of four before any figure.
if [[ "$pyver" == 3.12 ]]; then
    mkdir .device/warp
    (cd .device/warp && python3 -m zipfile -e ../wheels/warp_lang-*.whl .)
    rm .device/wheels/warp_lang-*.whl
    rm -r .device/warp/warp/bin/warp-clang.so .device/warp/warp/examples .device/warp/warp/tests
fi
tar -cf - -C .device wheels $([[ -d .device/warp ]] && echo warp) | xz -T2 -6 >.device/wheels.tar
rm -rf .device/wheels .device/warp
part_limit=$((58 * 1024 * 1024))  # with the ~3 MiB working tree, under a call's 64 MiB
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
mv .device/early .device/part1/early
rm .device/wheels.tar .device/wheels.sha256
du -sh .device/part*
echo "carry each of .device/part1 ... .device/part$parts in one device call (docs/developing.md, \"GPU figures\")"
