"""Per-group reductions over a flat batch of responses, without a Python loop over groups.

A batch holds N responses; `group_ids[i]` says which prompt response i answers. Groups need not be
contiguous nor of equal size. Every function here returns per-response views (shape [N]) so callers
can combine them elementwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GroupIndex:
    """Dense group numbering for a batch.

    inverse: [N] long, group number 0..num_groups-1 of each response.
    counts:  [num_groups] long, responses per group.
    """

    inverse: torch.Tensor
    counts: torch.Tensor

    @property
    def num_groups(self) -> int:
        return int(self.counts.numel())

    @staticmethod
    def from_ids(group_ids: torch.Tensor) -> GroupIndex:
        if group_ids.dim() != 1:
            raise ValueError(f"group_ids must be 1-D, got shape {tuple(group_ids.shape)}")
        _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
        return GroupIndex(inverse=inverse, counts=counts)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Per-group sums, shape [num_groups]."""
        out = torch.zeros(self.num_groups, dtype=values.dtype, device=values.device)
        return out.index_add_(0, self.inverse, values)

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """Per-group means, shape [num_groups]."""
        return self.sum(values) / self.counts.to(values.dtype)

    def std(self, values: torch.Tensor, ddof: int = 0) -> torch.Tensor:
        """Per-group standard deviations, shape [num_groups]; 0 where a group has ≤ ddof members."""
        centred = values - self.mean(values)[self.inverse]
        dof = (self.counts - ddof).clamp(min=1).to(values.dtype)
        var = self.sum(centred * centred) / dof
        return torch.where(self.counts > ddof, var.clamp(min=0).sqrt(), torch.zeros_like(var))

    def is_constant(self, values: torch.Tensor) -> torch.Tensor:
        """Per-group bool, True where every member has the same value (a degenerate group)."""
        init_max = torch.full((self.num_groups,), -torch.inf, dtype=values.dtype, device=values.device)
        init_min = torch.full((self.num_groups,), torch.inf, dtype=values.dtype, device=values.device)
        gmax = init_max.scatter_reduce(0, self.inverse, values, reduce="amax")
        gmin = init_min.scatter_reduce(0, self.inverse, values, reduce="amin")
        return gmax == gmin


def as_group_index(groups: torch.Tensor | GroupIndex) -> GroupIndex:
    return groups if isinstance(groups, GroupIndex) else GroupIndex.from_ids(groups)


def group_mean(values: torch.Tensor, groups: torch.Tensor | GroupIndex) -> torch.Tensor:
    """Each response's group mean (e.g. p̂ from a 0/1 correctness reward). [N] -> [N].

    groups: [N] group ids, or a GroupIndex already built for the batch.
    """
    index = as_group_index(groups)
    return index.mean(values.to(torch.float32))[index.inverse]
