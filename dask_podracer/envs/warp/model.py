"""A gymnasium locomotion model, loaded as MuJoCo Warp can simulate it."""

from __future__ import annotations

import os
from typing import Any

from dask_podracer.envs.gym_adapter import relay_mujoco_warnings


def gymnasium_asset(xml_file: str) -> str:
    """The path of `xml_file` as gymnasium's `xml_file` keyword resolves it (`mujoco_env.expand_model_path`): as
    given when it starts with "." or "/" (so "./ant.xml" is in the working directory, not gymnasium's ant.xml),
    the home directory's for "~", else one of gymnasium's own MuJoCo assets."""
    if xml_file.startswith((".", "/")):
        return xml_file
    if xml_file.startswith("~"):
        return os.path.expanduser(xml_file)
    import gymnasium.envs.mujoco as gym_mujoco  # imported here: needs the `mujoco` extra

    return os.path.join(os.path.dirname(gym_mujoco.__file__), "assets", xml_file)


def load_mujoco_model(xml_file: str) -> Any:
    """The `mujoco.MjModel` of `xml_file`, with the one change MuJoCo Warp needs: Newton for a PGS solver.

    MuJoCo Warp implements the CG and Newton solvers only (`put_model` refuses PGS, which gymnasium's
    humanoid.xml asks for). Newton is MuJoCo's default. Without active constraints (no contact, no joint
    at its limit) no solver runs, so the steps before contact are the same either way.
    """
    import mujoco

    relay_mujoco_warnings()  # HalfCheetah's deprecated `settotalmass`: a Python warning, not MUJOCO_LOG.TXT
    path = gymnasium_asset(xml_file)
    if not os.path.isfile(path):
        raise ValueError(f"xml_file {xml_file!r}: no such file ({path})")
    try:
        mjm = mujoco.MjModel.from_xml_path(path)
    except ValueError as e:  # MuJoCo's parse errors span lines: one line here, naming the keyword
        raise ValueError(f"xml_file {xml_file!r} is not a model MuJoCo can load: {' '.join(str(e).split())}") from None
    if mjm.opt.solver == mujoco.mjtSolver.mjSOL_PGS:
        mjm.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    # A reset sets qfrc_actuator to zero (what mj_forward computes at ctrl = 0), which holds for
    # actuators without bias and activation only: all of gymnasium's locomotion models.
    if mjm.na or (mjm.actuator_biastype != mujoco.mjtBias.mjBIAS_NONE).any():
        raise ValueError(f"{xml_file}: actuators with activation or bias are not supported by the Warp envs")
    return mjm
