#!/usr/bin/env bash
# BenchMARL's own venv for benchmarks/benchmarl_vmas.py (its default --benchmarl-python is <venv>/bin/python).
#
#     bash benchmarks/setup_benchmarl_venv.sh [VENV]        # VENV defaults to /work/venv-benchmarl
#
# Why a venv of its own: BenchMARL 1.5.2 requires torchrl <0.12 (which pins tensordict 0.11), hydra-core, av <14
# and torchvision, none of which our package needs; and an unpinned torchvision resolves to its newest release,
# which requires a newer torch and so replaces ours with a multi-GB CUDA build. So torch is installed first and
# held by a constraints file, with torchvision held to torch's pair (set TORCH and TORCHVISION together to use
# another torch). For the CPU build on an ordinary machine, export
# PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu first.
set -euo pipefail

VENV=${1:-/work/venv-benchmarl}
TORCH=${TORCH:-2.13.0}
TORCHVISION=${TORCHVISION:-0.28.*}   # torch 2.13's pair: benchmarl requires torchvision
BENCHMARL=${BENCHMARL:-1.5.2}
REPO=$(cd "$(dirname "$0")/.." && pwd)

python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install "torch==$TORCH"

constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
"$VENV/bin/python" - "$constraints" "$TORCHVISION" <<'EOF'
import sys, torch
with open(sys.argv[1], "w") as f:  # exactly the torch just installed (its local tag too: +cpu stays +cpu)
    f.write(f"torch=={torch.__version__}\ntorchvision=={sys.argv[2]}\n")
EOF
"$VENV/bin/pip" install --constraint "$constraints" "benchmarl==$BENCHMARL" "vmas>=1.5"
"$VENV/bin/python" -c "import benchmarl, torch, torchrl, tensordict, vmas; \
print('benchmarl', benchmarl.__version__, 'torch', torch.__version__, 'torchrl', torchrl.__version__, \
'tensordict', tensordict.__version__, 'vmas', vmas.__version__)"
echo "BenchMARL venv ready: python $REPO/benchmarks/benchmarl_vmas.py --benchmarl-python $VENV/bin/python"
