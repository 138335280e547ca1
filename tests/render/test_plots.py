"""Roofline and scaling plots, checked by structure (points, roofs, lines), not pixels."""

from __future__ import annotations

from pathlib import Path

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from torch_nsight.profile import Profile
from torch_nsight.render import plot_roofline, plot_scaling
from torch_nsight.render.figure import (
    PALETTE,
    UNATTRIBUTED_COLOR,
    extend_colors,
    module_colors,
    save_figure,
)
from torch_nsight.render.roofline_plot import compute_roofs, precision_label, top_level_module
from torch_nsight.render.scaling import scaling_frame


def points(figure: Figure, gid: str) -> np.ndarray:
    """Offsets of every scatter collection with this gid, on any axes."""
    found = [c.get_offsets() for ax in figure.axes for c in ax.collections
             if isinstance(c, PathCollection) and c.get_gid() == gid]
    return np.concatenate(found) if found else np.empty((0, 2))


def lines(figure: Figure, prefix: str) -> list:
    return [line for line in figure.axes[0].get_lines()
            if (line.get_gid() or "").startswith(prefix)]


def test_every_kernel_with_flops_is_a_point(profile: Profile) -> None:
    figure = plot_roofline(profile)
    kernels = profile.kernels
    with_flops = kernels[kernels["flops"] > 0]
    placed = points(figure, "kernel-points")
    assert len(placed) == len(with_flops) == 36
    assert len(points(figure, "unplaced-kernels")) == 4
    assert len(placed) + len(points(figure, "unplaced-kernels")) == len(kernels)
    assert sorted(placed[:, 0]) == pytest.approx(sorted(with_flops["intensity"]))
    assert sorted(placed[:, 1]) == pytest.approx(sorted(with_flops["achieved_flops_per_s"]))
    strip_times = sorted(points(figure, "unplaced-kernels")[:, 0])
    assert strip_times == pytest.approx([1.76, 3.104, 3.52, 4.768])


def test_roofs_come_from_the_report(profile: Profile) -> None:
    figure = plot_roofline(profile)
    kernels = profile.kernels
    (memory,) = lines(figure, "memory-roof")
    x, y = memory.get_data()
    assert y[0] / x[0] == pytest.approx(kernels["peak_bytes_per_s"].max())
    compute = {frozenset(line.get_gid().split(":")[1].split("+")): line.get_ydata()[0]
               for line in lines(figure, "compute-roof:")}
    # fp32 and fp16 CUDA-core peaks are within 1% on the H200: they share one roof.
    cuda = frozenset({"fp32", "fp16"})
    assert set(compute) == {frozenset({"tensor_bf16"}), cuda}
    peaks = kernels.groupby("precision")["peak_flops_per_s"].max()
    assert compute[frozenset({"tensor_bf16"})] == pytest.approx(peaks["tensor_bf16"])
    assert compute[cuda] == pytest.approx(max(peaks["fp32"], peaks["fp16"]))
    roofs = compute_roofs(kernels)
    assert {p for key in roofs for p in key} == {"tensor_bf16", "fp32", "fp16"}


def test_points_sit_under_the_roof(profile: Profile) -> None:
    kernels = profile.kernels[profile.kernels["flops"] > 0]
    bandwidth = profile.kernels["peak_bytes_per_s"].max()
    ceiling = np.minimum(kernels["peak_flops_per_s"], bandwidth * kernels["intensity"])
    assert (kernels["achieved_flops_per_s"] <= ceiling).all()


def test_colors_by_top_level_module_and_title(profile: Profile) -> None:
    figure = plot_roofline(profile)
    groups = set(profile.kernels["module_path"].map(top_level_module))
    assert groups == {"input_layernorm", "self_attn", "post_attention_layernorm", "mlp",
                      "LlamaBlock (own kernels)", "(unattributed)"}
    colors = {mcolors.to_hex(c.get_facecolors()[0]) for ax in figure.axes
               for c in ax.collections if isinstance(c, PathCollection)}
    assert len(colors) == len(groups)
    legend_names = {t.get_text() for t in figure.legends[0].get_texts()}
    assert legend_names == groups
    title = figure.axes[0].get_title()
    assert "NVIDIA H200" in title and "1x512" in title and "36 of 40" in title


def test_a_saved_figure_keeps_its_title_lines(profile: Profile, tmp_path: Path) -> None:
    """Escaping what came from a file keeps the title's own line breaks: a title drawn as one
    line with a literal backslash-n runs off the figure."""
    figure = plot_roofline(profile)
    lines = figure.axes[0].get_title().split("\n")
    assert len(lines) == 2
    save_figure(figure, tmp_path / "roofline.png")
    assert figure.axes[0].get_title().split("\n") == lines
    figure.axes[0].set_title("NVIDIA H200 \x1b[31m\nsecond line")
    legend = figure.legends[0].get_texts()[0]
    legend.set_text("blocks.0\nnot a line of the figure's own")  # a name read from a file
    save_figure(figure, tmp_path / "again.svg")
    assert figure.axes[0].get_title() == "NVIDIA H200 \\x1b[31m\nsecond line"
    assert legend.get_text() == "blocks.0\\nnot a line of the figure's own"


def test_no_strip_when_every_kernel_has_flops(profile: Profile) -> None:
    kernels = profile.kernels[profile.kernels["flops"] > 0]
    figure = plot_roofline(Profile(kernels.reset_index(drop=True), profile.meta))
    assert len(figure.axes) == 1
    assert len(points(figure, "kernel-points")) == 36


def test_roofline_of_one_shape(sweep_profile: Profile) -> None:
    figure = plot_roofline(sweep_profile, shape="1x1024")
    assert len(points(figure, "kernel-points")) == 2 * 36
    assert "1x1024" in figure.axes[0].get_title()
    with pytest.raises(ValueError, match="1x256, 1x512, 1x1024"):
        plot_roofline(sweep_profile, shape="8x8")


@pytest.mark.parametrize("plot", [plot_roofline, plot_scaling])
@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_files_by_suffix(profile: Profile, tmp_path: Path, plot, suffix: str,
                         magic: bytes) -> None:
    target = tmp_path / f"plot{suffix}"
    assert isinstance(plot(profile, target), Figure)
    assert target.read_bytes().startswith(magic)


@pytest.mark.parametrize("plot", [plot_roofline, plot_scaling])
def test_unknown_suffix(profile: Profile, tmp_path: Path, plot) -> None:
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        plot(profile, tmp_path / "plot.pdf")
    assert not (tmp_path / "plot.pdf").exists()


def test_scaling_one_shape_accounts_for_all_time(profile: Profile) -> None:
    figure = plot_scaling(profile)
    bars = [p for p in figure.axes[0].patches if p.get_gid() == "module-time"]
    assert len(bars) == 6
    total_us = profile.kernels["duration_ns"].sum() / 1e3
    assert sum(bar.get_width() for bar in bars) == pytest.approx(total_us)
    assert "one shape only" in figure.axes[0].get_title()
    # the y axis names the modules: no legend repeats them
    assert figure.legends == []
    assert len(figure.axes[0].get_yticklabels()) == len(bars)


def test_scaling_lines_per_module_and_variant(sweep_profile: Profile) -> None:
    figure = plot_scaling(sweep_profile)
    drawn = lines(figure, "module-time")
    assert len(drawn) == 6 * 2
    assert all(len(line.get_xdata()) == 3 for line in drawn)
    ticks = [t.get_text() for t in figure.axes[0].get_xticklabels()]
    assert ticks == ["1x256", "1x512", "1x1024"]
    styles = {line.get_label().split("[")[1].rstrip("]"): line.get_linestyle()
              for line in drawn}
    assert styles["eager"] != styles["sdpa"]
    assert len(figure.legends) == 2
    assert [t.get_text() for t in figure.legends[1].get_texts()] == ["eager", "sdpa"]
    # Module legend: longest first at the last shape.
    assert [t.get_text() for t in figure.legends[0].get_texts()][:2] == ["mlp", "self_attn"]


def test_scaling_frame_adds_up(sweep_profile: Profile) -> None:
    frame = scaling_frame(sweep_profile, depth=1)
    totals = frame.groupby(["variant", "shape"])["time_ns"].sum()
    expected = sweep_profile.kernels.groupby(["variant", "shape"])["duration_ns"].sum()
    pd.testing.assert_series_equal(totals.sort_index(), expected.sort_index(),
                                   check_names=False)
    assert "LlamaBlock (own kernels)" in set(frame["module"])
    assert set(scaling_frame(sweep_profile, depth=0)["module"]) == {"LlamaBlock",
                                                                   "(unattributed)"}
    with pytest.raises(ValueError, match="depth"):
        scaling_frame(sweep_profile, depth=-1)


def test_precision_labels() -> None:
    assert precision_label(("tensor_bf16",)) == "bf16 tensor core"
    assert precision_label(("fp32", "fp16")) == "fp32, fp16 CUDA core"
    assert top_level_module("Root") == "Root (own kernels)"
    assert top_level_module(None) == "(unattributed)"
    assert top_level_module("Root/a/a.b") == "a"


def legend_colors(legend) -> dict[str, str]:
    """Label -> color of a figure legend's handles."""
    return {text.get_text(): mcolors.to_hex(handle.get_color())
            for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)}


def test_one_color_per_module_in_both_charts(profile: Profile) -> None:
    roofline = legend_colors(plot_roofline(profile).legends[0])
    ax = plot_scaling(profile).axes[0]  # one shape: a bar per module, named on the y axis
    bars = [p for p in ax.patches if p.get_gid() == "module-time"]
    scaling = {label.get_text(): mcolors.to_hex(bar.get_facecolor())
               for label, bar in zip(ax.get_yticklabels(), bars, strict=True)}
    assert set(roofline) == set(scaling) == {
        "input_layernorm", "self_attn", "post_attention_layernorm", "mlp",
        "LlamaBlock (own kernels)", "(unattributed)"}
    assert roofline == scaling
    assert roofline["(unattributed)"] == UNATTRIBUTED_COLOR
    assert len(set(roofline.values())) == len(roofline)


def test_colors_hold_across_shapes_and_depths(sweep_profile: Profile) -> None:
    scaling = legend_colors(plot_scaling(sweep_profile).legends[0])
    for shape in ("1x256", "1x1024"):
        assert legend_colors(plot_roofline(sweep_profile, shape=shape).legends[0]) == scaling
    # The lines themselves wear their module's color.
    for line in lines(plot_scaling(sweep_profile), "module-time"):
        assert mcolors.to_hex(line.get_color()) == scaling[line.get_label().split(" [")[0]]
    deeper = legend_colors(plot_scaling(sweep_profile, depth=2).legends[0])
    assert {"self_attn.qkv_proj", "mlp (own kernels)"} <= set(deeper)
    for module in ("input_layernorm", "post_attention_layernorm", "LlamaBlock (own kernels)",
                   "(unattributed)"):
        assert deeper[module] == scaling[module]
    assert len(set(deeper.values())) == len(deeper)


def test_module_colors_follow_the_call_tree(profile: Profile) -> None:
    colors = module_colors(profile)
    assert list(colors) == ["LlamaBlock (own kernels)", "input_layernorm", "self_attn",
                             "post_attention_layernorm", "mlp", "(unattributed)"]
    assert list(colors.values())[:5] == list(PALETTE[:5])
    assert extend_colors(colors, ["new"])["new"] == PALETTE[5]


def test_scaling_error_bars_with_several_runs(profile: Profile) -> None:
    parts = []
    for shape, size in (("1x256", 1.0), ("1x512", 2.0)):
        for run, jitter in ((0, 1.0), (1, 1.1)):
            kernels = profile.kernels.copy()
            kernels["shape"], kernels["run"] = shape, run
            kernels["duration_ns"] = kernels["duration_ns"] * size * jitter
            parts.append(profile.with_kernels(kernels))
    figure = plot_scaling(Profile.concat(parts))
    ax = figure.axes[0]
    bars = [c for c in ax.collections if c.get_gid() == "module-time-ci95"]
    assert len(bars) == len([line for line in ax.get_lines() if line.get_gid() == "module-time"])


@pytest.fixture(scope="module")
def sweep_stack() -> Profile:
    """The recorded sweep of a stack of four decoder blocks (``0``-``3``), two shapes."""
    import torch_nsight

    return torch_nsight.load(Path(__file__).resolve().parents[1] / "data" / "sweep_stack")


def _alike_blocks(profile: Profile) -> list[str]:
    """The top-level blocks of ``profile`` that launched the same kernels as another."""
    kernels = profile.kernels.assign(group=profile.kernels["module_path"].map(top_level_module))
    launched = {name: tuple(sorted(part["kernel"])) for name, part in kernels.groupby("group")}
    return [name for name in ("0", "1", "2", "3")
            if sum(k == launched[name] for k in launched.values()) > 1]


def _legend_colors(figure: Figure) -> dict[str, str]:
    """The first legend's entries: name -> color."""
    legend = figure.legends[0]
    return {text.get_text(): mcolors.to_hex(handle.get_color() if isinstance(handle, Line2D)
                                            else handle.get_facecolor())
            for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)}


def test_repeated_blocks_share_one_color_and_one_legend_entry(sweep_stack: Profile) -> None:
    """sweep_stack's top-level modules are the blocks ``0``-``3`` of an ``nn.Sequential``:
    the blocks that launched the same kernels (as many of each) are one legend entry with
    their count and one color, their points drawn on one another; a block that launched
    others keeps its own (issue 47)."""
    profile = sweep_stack
    alike = _alike_blocks(profile)
    assert len(alike) >= 2  # the recording holds repeated blocks
    figure = plot_roofline(profile)
    names = [t.get_text() for t in figure.legends[0].get_texts()]
    assert not set(alike) & set(names)
    assert f"{{{alike[0]}-{alike[-1]}}} ×{len(alike)}" in names
    colors = {mcolors.to_hex(c.get_facecolors()[0]) for c in figure.axes[0].collections
              if isinstance(c, PathCollection)}
    assert len(colors) <= len(names)


def test_the_scaling_plot_groups_repeated_blocks_as_the_roofline_does(
        sweep_stack: Profile) -> None:
    """The scaling plot of sweep_stack (two shapes) draws the alike blocks in one color under
    one legend entry with their count: the roofline's groups and colors (issue 47)."""
    alike = _alike_blocks(sweep_stack)
    assert len(alike) >= 2
    family = f"{{{alike[0]}-{alike[-1]}}} ×{len(alike)}"
    scaling = _legend_colors(plot_scaling(sweep_stack))
    assert family in scaling and not set(alike) & set(scaling)
    assert scaling == _legend_colors(plot_roofline(sweep_stack))
    figure = plot_scaling(sweep_stack)
    line_colors = {line.get_label(): mcolors.to_hex(line.get_color())
                   for line in figure.axes[0].get_lines() if line.get_gid() == "module-time"}
    assert {line_colors[name] for name in alike} == {scaling[family]}
