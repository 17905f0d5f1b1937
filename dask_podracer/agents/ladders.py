"""Exploration ladders of Ape-X (Horgan et al. 2018): each of N actors explores with its own, fixed amount.

- `epsilon_ladder`: actor i acts epsilon-greedily with eps_i = eps^(1 + alpha * i / (N - 1)) (the DQN family),
  from eps (actor 0) down to eps^(1 + alpha) (actor N - 1): a geometric sequence, so the actors spread over
  orders of magnitude of exploration (0.4 to 0.4^8 = 0.00066 with the paper's eps = 0.4, alpha = 7).
- `noise_ladder`: the same geometric spread for the Gaussian exploration noise of DDPG and TD3, from `largest`
  (actor 0) to `smallest` (actor N - 1), in the agent's `exploration_noise` units (half-action-range).

One actor gets the top of the ladder (eps, or `largest`). `epsilon_ladder` gives the DQN family's Ape-X actors
their rungs (agents/dqn.py), `noise_ladder` those of DDPG and TD3 (agents/ddpg.py: `apex_noise_largest`,
`apex_noise_smallest`); agents/apex.py is the rest of Ape-X.
"""

from __future__ import annotations


def epsilon_ladder(n_actors: int, epsilon: float = 0.4, alpha: float = 7.0) -> list[float]:
    """[eps_0, ..., eps_{N-1}], eps_i = epsilon^(1 + alpha * i / (N - 1)); [epsilon] for one actor."""
    if n_actors < 1:
        raise ValueError(f"n_actors must be >= 1, got {n_actors!r}")
    if not 0 <= epsilon <= 1:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon!r}")
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha!r}")
    if n_actors == 1:
        return [float(epsilon)]
    return [float(epsilon ** (1 + alpha * i / (n_actors - 1))) for i in range(n_actors)]


def noise_ladder(n_actors: int, largest: float = 0.5, smallest: float = 0.02) -> list[float]:
    """[sigma_0, ..., sigma_{N-1}], sigma_i = largest * (smallest / largest)^(i / (N - 1)); [largest] for one
    actor. Geometric, as the epsilon ladder is (which is this with largest = eps, smallest = eps^(1 + alpha))."""
    if n_actors < 1:
        raise ValueError(f"n_actors must be >= 1, got {n_actors!r}")
    if not 0 < smallest <= largest:
        raise ValueError(f"need 0 < smallest <= largest, got smallest={smallest!r}, largest={largest!r}")
    if n_actors == 1:
        return [float(largest)]
    return [float(largest * (smallest / largest) ** (i / (n_actors - 1))) for i in range(n_actors)]
