"""benchmarks/ppo_lr_schedule.py's `--set`: settings changed from the config's, checked before anything trains."""

import argparse
import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("ppo_lr_schedule",
                                               Path(__file__).parents[1] / "benchmarks/ppo_lr_schedule.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def test_settings_are_toml_values():
    parser = argparse.ArgumentParser()
    assert bench.parse_settings(["epochs=4", "hidden=[64, 64]", "ent_coef=1e-2", 'lr_schedule="fixed"'], parser) \
        == {"epochs": 4, "hidden": [64, 64], "ent_coef": 0.01, "lr_schedule": "fixed"}
    assert bench.parse_settings([], parser) == {}


@pytest.mark.parametrize(("setting", "said"), [("epoch=4", "PPO has no setting 'epoch'"),
                                               ("epochs=four", "expected KEY=VALUE with a TOML value"),
                                               ("epochs", "expected KEY=VALUE with a TOML value")])
def test_a_bad_setting_is_named_in_one_line(setting, said, capsys):
    with pytest.raises(SystemExit):
        bench.parse_settings([setting], argparse.ArgumentParser(prog="ppo_lr_schedule.py"))
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith(f"ppo_lr_schedule.py: error: --set {setting}: ") and said in line
