"""Multi-agent VecEnvs: the contract (an agent dimension after the batch one), its checker, the VMAS and PettingZoo
adapters."""

from dask_podracer.envs.multi_agent.base import MULTI_AGENT_MEMBERS, MultiAgentVecEnv, is_multi_agent
from dask_podracer.envs.multi_agent.checker import check_multi_agent_env
from dask_podracer.envs.multi_agent.pettingzoo_adapter import MPE2_ENVS, ParallelVecEnv
from dask_podracer.envs.multi_agent.vmas_adapter import VMAS_SCENARIOS, VmasVecEnv

__all__ = [
    "MPE2_ENVS",
    "MULTI_AGENT_MEMBERS",
    "VMAS_SCENARIOS",
    "MultiAgentVecEnv",
    "ParallelVecEnv",
    "VmasVecEnv",
    "check_multi_agent_env",
    "is_multi_agent",
]
