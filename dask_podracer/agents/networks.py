"""Networks shared by the algorithms: MLPs, a tanh-squashed Gaussian actor, critic ensembles."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn


def mlp(sizes: Sequence[int], activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """Linear layers of `sizes` with `activation` between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


class ActionScale(nn.Module):
    """Maps actions in [-1, 1] to a Box's [low, high] (buffers, so they follow .to(device))."""

    def __init__(self, low: Sequence[float], high: Sequence[float]) -> None:
        super().__init__()
        low_t = torch.as_tensor(low, dtype=torch.float32)
        high_t = torch.as_tensor(high, dtype=torch.float32)
        infinite = int((~torch.isfinite(low_t)).sum() + (~torch.isfinite(high_t)).sum())
        if infinite:  # scaled into infinite bounds, every action is inf or NaN, and every segment diverges
            raise ValueError(f"the action space's bounds must be finite (actions are scaled into them), but "
                             f"{infinite} of its {low_t.numel() + high_t.numel()} are not: give the env's Box "
                             f"finite low and high")
        self.register_buffer("center", (high_t + low_t) / 2)
        self.register_buffer("half_range", (high_t - low_t) / 2)

    def forward(self, unit_action: Tensor) -> Tensor:
        return self.center + self.half_range * unit_action


class SquashedGaussianActor(nn.Module):
    """pi(a|s) = center + half_range * tanh(N(mu(s), sigma(s))), with its exact log-density."""

    log_std_min, log_std_max = -5.0, 2.0

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], low, high) -> None:
        super().__init__()
        self.body = mlp([obs_dim, *hidden, 2 * act_dim])
        self.scale = ActionScale(low, high)

    def forward(self, obs: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """obs [B, obs_dim] -> action [B, act_dim] in bounds, log_prob [B]."""
        mu, log_std = self.body(obs).chunk(2, dim=-1)
        if deterministic:
            return self.scale(torch.tanh(mu)), torch.zeros(obs.shape[0], device=obs.device)
        log_std = log_std.clamp(self.log_std_min, self.log_std_max)
        std = log_std.exp()
        noise = torch.randn_like(mu)
        pre_tanh = mu + std * noise
        unit = torch.tanh(pre_tanh)
        # log N(pre_tanh) - log|d tanh/dx|, the latter in the stable form 2(log2 - x - softplus(-2x)).
        log_prob = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - (2 * (math.log(2) - pre_tanh - nn.functional.softplus(-2 * pre_tanh))).sum(-1)
        log_prob = log_prob - torch.log(self.scale.half_range).sum()
        return self.scale(unit), log_prob


class EnsembleLinear(nn.Module):
    """`size` independent linear layers applied as one batched matmul.

    Input `[E, B, in]` (or `[B, in]`, shared by all members) -> output `[E, B, out]`.
    """

    def __init__(self, size: int, fan_in: int, fan_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(size, fan_in, fan_out))
        self.bias = nn.Parameter(torch.empty(size, 1, fan_out))
        bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default init, member by member
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.weight.shape[0], -1, -1)
        return torch.baddbmm(self.bias, x, self.weight)


class CriticEnsemble(nn.Module):
    """`size` Q-networks Q_i(s, a) held as stacked parameters; forward gives all of them at once."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], size: int = 2) -> None:
        super().__init__()
        sizes = [obs_dim + act_dim, *hidden, 1]
        layers: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(EnsembleLinear(size, fan_in, fan_out))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)
        self.size = size

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        """obs [B, obs_dim], action [B, act_dim] -> Q values [E, B]."""
        return self.net(torch.cat([obs, action], dim=-1)).squeeze(-1)


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """target <- (1 - tau) * target + tau * source, parameter by parameter."""
    for t, s in zip(target.parameters(), source.parameters()):
        t.lerp_(s, tau)


class DeterministicActor(nn.Module):
    """mu(s) = center + half_range * tanh(mlp(s)): DDPG's and TD3's policy."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], low, high) -> None:
        super().__init__()
        self.body = mlp([obs_dim, *hidden, act_dim])
        self.scale = ActionScale(low, high)

    def forward(self, obs: Tensor) -> Tensor:
        """obs [B, obs_dim] -> action [B, act_dim] in bounds."""
        return self.scale(torch.tanh(self.body(obs)))
