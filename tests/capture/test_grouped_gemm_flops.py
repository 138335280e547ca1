"""A grouped GEMM's FLOPs (``torch._grouped_mm``, which torch's FLOP registry does not count):
the count the calls table records for one call equals what ``FlopCounterMode`` counts for the
same products done group by group with ``mm``, for each of the op's four operand layouts, and
the call's own output is those products (the layouts are read right)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from torch_nsight.capture.calls.op_flops import op_flops
from torch_nsight.shape_flops import shape_flops

_OFFS = torch.tensor([8, 8, 20, 32], dtype=torch.int32)  # one group empty
_BOUNDS = list(zip([0, *_OFFS.tolist()[:-1]], _OFFS.tolist(), strict=True))


def _rows_split() -> tuple[tuple[torch.Tensor, ...], list[tuple[torch.Tensor, torch.Tensor]]]:
    a, b = torch.randn(32, 24), torch.randn(4, 24, 16)  # each row in one group
    return (a, b, _OFFS), [(a[lo:hi], b[g]) for g, (lo, hi) in enumerate(_BOUNDS)]


def _columns_split() -> tuple[tuple[torch.Tensor, ...], list[tuple[torch.Tensor, torch.Tensor]]]:
    a, b = torch.randn(4, 12, 24), torch.randn(24, 32)  # each column in one group
    return (a, b, _OFFS), [(a[g], b[:, lo:hi]) for g, (lo, hi) in enumerate(_BOUNDS)]


def _inner_split() -> tuple[tuple[torch.Tensor, ...], list[tuple[torch.Tensor, torch.Tensor]]]:
    a, b = torch.randn(12, 32), torch.randn(32, 16)  # K split into groups: a weight gradient
    return (a, b, _OFFS), [(a[:, lo:hi], b[lo:hi]) for lo, hi in _BOUNDS]


def _batched() -> tuple[tuple[torch.Tensor, ...], list[tuple[torch.Tensor, torch.Tensor]]]:
    a, b = torch.randn(4, 12, 24), torch.randn(4, 24, 16)
    return (a, b), [(a[g], b[g]) for g in range(4)]


@pytest.mark.parametrize("layout", [_rows_split, _columns_split, _inner_split, _batched])
def test_a_grouped_gemm_counts_its_groups_products(layout) -> None:  # type: ignore[no-untyped-def]
    args, groups = layout()
    out = torch._grouped_mm(*args)
    products = [x @ w for x, w in groups]
    # the layout is read as the op computes it: its output is the groups' products
    if args[0].dim() == 2 and args[1].dim() == 2:
        assert torch.allclose(out, torch.stack(products), atol=1e-4)
    elif args[0].dim() == 3 and args[1].dim() == 2:
        assert torch.allclose(out, torch.cat(products, dim=1), atol=1e-4)
    elif args[0].dim() == 2:
        assert torch.allclose(out, torch.cat(products), atol=1e-4)
    else:
        assert torch.allclose(out, torch.stack(products), atol=1e-4)
    with FlopCounterMode(display=False) as counter:
        for x, w in groups:
            torch.mm(x, w)
    counted = op_flops(torch.ops.aten._grouped_mm, args, {}, out)
    assert counted == counter.get_total_flops() > 0
    # the same from the shapes alone (a calls table recorded before the count was made)
    assert shape_flops("_grouped_mm", [list(t.shape) for t in args]) == counted


def test_shapes_it_does_not_cover_give_no_count() -> None:
    assert shape_flops("_grouped_mm", [[8], [8, 4]]) is None
    assert shape_flops("mm", [[8, 4], [4, 2]]) is None  # the registry's, not counted here
