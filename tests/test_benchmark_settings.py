"""The benchmarks that train from a shipped config take `podracer train`'s `--set`, and refuse a bad one in one line
before anything trains."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize(("script", "setting", "said"), [
    ("ppo_lr_schedule.py", "hparams.epoch=4", "warp_ant.toml with --set: unknown key hparams.epoch"),
    ("ppo_lr_schedule.py", "hparams.epochs", "--set hparams.epochs: expected SECTION.KEY=VALUE"),
    ("trading_lineage.py", "run.env_kwargs.days=many", "days must be an integer, got 'many'"),
    ("trading_lineage.py", "hparams.gamma=2", "stock_trading.toml with --set: hparams.gamma must be in [0, 1]"),
])
def test_a_bad_setting_ends_the_benchmark_in_one_line(script, setting, said):
    run = subprocess.run([sys.executable, str(BENCHMARKS / script), "--quick", "--set", setting],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == "", run.stdout  # nothing trained, nothing printed
    (line,) = run.stderr.strip().splitlines()[-1:]
    assert line.startswith(f"{script}: error: ") and said in line, run.stderr
