"""The timeline of one step, checked by its rows and the figure's structure, not pixels."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from torch_nsight.profile import Profile
from torch_nsight.record import ProfileMeta
from torch_nsight.render.figure import module_colors
from torch_nsight.render.timeline_layout import timeline_frame
from torch_nsight.render.timeline_plot import MAX_LEGEND_MODULES, plot_timeline, timeline_figure

SOURCE = "trace.json"
BASE_NS = 5_000_000_000.0  # the trace clock does not start at 0
# Step windows per run: start offset from BASE_NS and wall time, both ns.
WINDOWS = {0: (0.0, 1_000_000.0), 1: (2_000_000.0, 1_200_000.0), 2: (4_000_000.0, 900_000.0)}
# One step's activity, offsets from its window's start (ns):
# (kind, module_path, stream, start, duration, launch, thread, direction)
ACTIVITY = [
    ("memcpy", "Net/embed", 7, 10_000, 20_000, 2_000, 100, "fwd"),
    ("kernel", "Net/embed", 7, 40_000, 50_000, 5_000, 100, "fwd"),
    ("kernel", "Net/blocks/blocks.0", 7, 100_000, 200_000, 8_000, 100, "fwd"),
    ("kernel", "Net/blocks/blocks.0", 20, 150_000, 100_000, 9_000, 100, "fwd"),
    ("kernel", "Net/blocks/blocks.1", 7, 500_000, 1_000, 480_000, 200, "bwd"),
    ("memset", "(unattributed)", 20, 520_000, 5_000, None, None, None),
    ("kernel", "Net", 7, 600_000, 300_000, 590_000, 200, "bwd"),
]
# Idle gaps of a step: (start, end, what the CPU was doing), offsets in ns.
GAPS = [(300_000, 500_000, "aten::item"), (525_000, 600_000, "cudaStreamSynchronize")]
# Busy time: [10,30] + [40,90] + [100,300] (holds [150,250]) + [500,501] + [520,525]
# + [600,900] µs = 20 + 50 + 200 + 1 + 5 + 300 = 576 µs.
BUSY_NS = 576_000.0


def kernel_rows(shape: str, runs: dict[int, tuple[float, float]],
                activity: list[tuple]) -> pd.DataFrame:
    rows = []
    for run, (offset, _) in runs.items():
        t0 = BASE_NS + offset
        for kind, path, stream, start, duration, launch, thread, direction in activity:
            rows.append({
                "source": SOURCE, "variant": None, "shape": shape, "run": run, "kind": kind,
                "kernel": f"{kind}_{path.rsplit('/', 1)[-1]}", "start_ns": t0 + start,
                "duration_ns": float(duration), "stream": stream, "device": 0,
                "launch_ns": np.nan if launch is None else t0 + launch,
                "launch_thread": thread, "bytes": 4096.0 if kind != "kernel" else np.nan,
                "copy_kind": "HtoD" if kind == "memcpy" else None, "pinned": False,
                "module": path.rsplit("/", 1)[-1], "module_path": path,
                "direction": direction, "op": None,
            })
    return pd.DataFrame(rows)


def timeline_rows(shape: str, runs: dict[int, tuple[float, float]],
                  gaps: list[tuple[float, float, str]], busy_ns: float) -> pd.DataFrame:
    rows = []
    for run, (offset, wall) in runs.items():
        t0 = BASE_NS + offset
        rows.append({"source": SOURCE, "variant": None, "shape": shape, "run": run,
                     "kind": "step", "start_ns": t0, "end_ns": t0 + wall, "cpu_ns": wall,
                     "busy_ns": busy_ns, "launches": 6, "sync_ns": 0.0, "bare_ns": 0.0,
                     "ranged_ns": wall})
        for start, end, cpu in gaps:
            rows.append({"source": SOURCE, "variant": None, "shape": shape, "run": run,
                         "kind": "gap", "start_ns": t0 + start, "end_ns": t0 + end,
                         "cpu": cpu, "prev_module": None, "next_module": None})
    return pd.DataFrame(rows)


@pytest.fixture()
def small() -> tuple[Profile, pd.DataFrame]:
    """Three steps of shape 1x128: 2 top-level modules + root, 2 streams, a copy, 2 gaps."""
    kernels = kernel_rows("1x128", WINDOWS, ACTIVITY)
    return Profile(kernels=kernels, meta=ProfileMeta()), \
        timeline_rows("1x128", WINDOWS, GAPS, BUSY_NS)


def big_step(kernels_per_stream: int = 75) -> tuple[Profile, pd.DataFrame]:
    """One 150-kernel step: 2 streams, 4 top-level modules, copies, a memset, 5 gaps."""
    rng = np.random.default_rng(0)
    modules = ["embed", "layers.0", "layers.1", "head"]
    activity, clock, launch = [], 20_000.0, 1_000.0
    for index in range(2 * kernels_per_stream):
        module = modules[min(index * len(modules) // (2 * kernels_per_stream), 3)]
        duration = float(rng.choice([1_000, 3_000, 8_000, 25_000, 60_000]))
        kind = "memcpy" if index in (0, 1, 149) else "memset" if index == 70 else "kernel"
        path = f"GPT/{module}/{module}.op" if module != "head" else "GPT/head"
        stream = 7 if index % 3 else 20
        thread = 11 if index < 100 else 12
        activity.append((kind, path, stream, clock, duration, launch, thread,
                         "fwd" if index < 100 else "bwd"))
        launch += float(rng.uniform(4_000, 9_000))
        clock = max(clock + duration * (0.6 if stream == 20 else 1.0), launch + 5_000)
        if index in (30, 60, 95, 120, 140):
            clock += 150_000.0 + 30_000.0 * index / 30
    wall = clock + 50_000.0
    kernels = kernel_rows("8x1024", {3: (0.0, wall)}, activity)
    ends = sorted((a[3], a[3] + a[4]) for a in activity)
    gaps, reach = [], ends[0][1]
    for start, end in ends[1:]:
        if start - reach > 100_000:
            gaps.append((reach, start, "aten::item" if len(gaps) % 2 else "cudaMalloc"))
        reach = max(reach, end)
    busy = sum(a[4] for a in activity) * 0.8
    return Profile(kernels=kernels, meta=ProfileMeta()), \
        timeline_rows("8x1024", {3: (0.0, wall)}, gaps, busy)


def texts(figure: Figure, gid: str) -> list[str]:
    return [t.get_text() for t in figure.axes[0].texts if t.get_gid() == gid]


def collections(figure: Figure, gid: str) -> list:
    return [c for c in figure.axes[0].collections if c.get_gid() == gid]


def test_rows_sit_on_their_lane_at_their_offset(small) -> None:
    profile, timeline = small
    frame = timeline_frame(profile, timeline=timeline)
    # Walls 1.0 ms (run 0), 1.2 ms (run 1), 0.9 ms (run 2): the median is run 0.
    assert set(frame["run"]) == {0}
    assert list(frame["lane"]) == ["GPU0 s7", "GPU0 s7", "GPU0 s7", "GPU0 s20", "GPU0 s7",
                                   "GPU0 s20", "GPU0 s7"]
    # start_ms = (start_ns - window start) / 1e6: 10_000 ns after the window is 0.010 ms.
    assert list(frame["start_ms"]) == pytest.approx([0.010, 0.040, 0.100, 0.150, 0.500,
                                                     0.520, 0.600])
    # end_ms = start_ms + duration_ns / 1e6: the 1-µs kernel at 0.500 ms ends at 0.501.
    assert list(frame["end_ms"]) == pytest.approx([0.030, 0.090, 0.300, 0.250, 0.501,
                                                   0.525, 0.900])
    # The memset has no launch time: no CPU tick, no CPU lane.
    assert list(frame["launch_ms"][:5]) == pytest.approx([0.002, 0.005, 0.008, 0.009, 0.480])
    assert np.isnan(frame["launch_ms"][5])
    # Thread 100 launched 4, thread 200 launched 2, all backward: main and autograd.
    assert list(frame["cpu_lane"]) == ["CPU main"] * 4 + ["CPU autograd", None, "CPU autograd"]
    assert list(frame["top_module"]) == ["embed", "embed", "blocks", "blocks", "blocks",
                                         "(unattributed)", "Net (own kernels)"]


def test_a_given_run_is_placed_from_its_own_window(small) -> None:
    profile, timeline = small
    frame = timeline_frame(profile, timeline=timeline, run=1, shape="1x128")
    assert set(frame["run"]) == {1}
    # Run 1's window starts 2 ms later on the trace clock, and so do its kernels: the same
    # offsets from its own start.
    assert frame["start_ns"].iloc[0] == BASE_NS + 2_000_000 + 10_000
    assert frame["start_ms"].iloc[0] == pytest.approx(0.010)


def test_colors_are_the_profiles_module_colors(small) -> None:
    profile, timeline = small
    frame = timeline_frame(profile, timeline=timeline)
    colors = module_colors(profile, depth=1)
    assert set(frame["top_module"]) <= set(colors)
    assert list(frame["color"]) == [colors[m] for m in frame["top_module"]]
    assert colors["(unattributed)"] == frame.loc[frame["kind"] == "memset", "color"].item()


def test_figure_has_lanes_bars_ticks_and_gaps(small) -> None:
    profile, timeline = small
    figure = timeline_figure(profile, timeline=timeline)
    ax = figure.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == \
        ["CPU main", "CPU autograd", "GPU0 s7", "GPU0 s20"]
    # One collection per (GPU lane, kind): kernels on both streams, the copy on s7, the
    # memset on s20.
    assert len(collections(figure, "kernel-bars")) == 2
    assert len(collections(figure, "copy-bars")) == len(collections(figure, "memset-bars")) == 1
    assert collections(figure, "copy-bars")[0].get_hatch() == "////"
    ticks = sum(len(c.get_segments()) for c in collections(figure, "launch-ticks"))
    assert ticks == 6  # every row but the memset has a launch time
    (gaps,) = collections(figure, "idle-gaps")
    assert len(gaps.get_paths()) == 2
    assert texts(figure, "gap-label") == ["200 µs idle (CPU: aten::item)",
                                          "75 µs idle (CPU: cudaStreamSynchronize)"]
    # busy 576 µs of a 1 ms window; walls 0.9, 1.0, 1.2 ms: median of 3.
    title = ax.get_title(loc="left")
    assert "shape 1x128, step 0 (median of 3 steps)" in title
    assert "wall 1.000 ms, GPU busy 57.6% (0.576 ms)" in title
    assert "5 kernels, 2 copies/memsets, 2 idle gaps (0.275 ms)" in title


def test_the_shortest_kernel_is_at_least_a_pixel_wide(small) -> None:
    profile, timeline = small
    figure = timeline_figure(profile, timeline=timeline)
    figure.draw_without_rendering()
    ax = figure.axes[0]
    widths = [np.ptp(ax.transData.transform(path.vertices)[:, 0])
              for bars in collections(figure, "kernel-bars") for path in bars.get_paths()]
    assert min(widths) >= 1.0
    # The 1-µs kernel would be 0.001 ms of a ~0.92 ms axis over ~1300 px: ~1.4 px anyway;
    # in a 150-kernel step it is far less, so check that case too.
    big, big_timeline = big_step()
    figure = timeline_figure(big, timeline=big_timeline)
    figure.draw_without_rendering()
    ax = figure.axes[0]
    widths = [np.ptp(ax.transData.transform(path.vertices)[:, 0])
              for bars in collections(figure, "kernel-bars") for path in bars.get_paths()]
    assert min(widths) >= 1.0


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_writes_png_and_svg(small, tmp_path: Path, suffix: str) -> None:
    profile, timeline = small
    written = plot_timeline(profile, tmp_path / f"step{suffix}", timeline=timeline)
    assert written == tmp_path / f"step{suffix}"
    data = written.read_bytes()
    if suffix == ".png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    else:
        assert data.startswith(b"<?xml") and b"<svg" in data


def test_a_150_kernel_step_renders(tmp_path: Path) -> None:
    profile, timeline = big_step()
    frame = timeline_frame(profile, timeline=timeline)
    assert len(frame) == 150
    assert set(frame["lane"]) == {"GPU0 s7", "GPU0 s20"}
    figure = timeline_figure(profile, timeline=timeline)
    (legend,) = figure.legends
    # Four module entries, longest GPU time first, then copy, memset, idle, CPU launch.
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[4:] == ["copy", "memset", "GPU idle", "CPU launch"]
    names = [label.split()[0] for label in labels[:4]]
    assert sorted(names) == ["embed", "head", "layers.0", "layers.1"]
    times = frame.groupby("top_module")["duration_ns"].sum()
    assert list(times[names]) == sorted(times, reverse=True)
    assert len(texts(figure, "gap-label")) == 3
    assert plot_timeline(profile, tmp_path / "big.png", timeline=timeline).exists()


def test_legend_folds_modules_past_ten_into_other(small) -> None:
    profile, timeline = small
    activity = [("kernel", f"Net/m{i}", 7, 10_000 * i, 5_000, 1_000 * i, 100, "fwd")
                for i in range(14)]
    kernels = kernel_rows("1x128", {0: WINDOWS[0]}, activity)
    many = Profile(kernels=kernels, meta=ProfileMeta())
    figure = timeline_figure(many, timeline=timeline_rows("1x128", {0: WINDOWS[0]}, [], 0.0))
    labels = [t.get_text() for t in figure.legends[0].get_texts()]
    modules = [label for label in labels if label.startswith(("m", "other"))]
    assert len(modules) == MAX_LEGEND_MODULES
    assert modules[-1] == "other: 5 modules  0.025 ms"


def test_the_profiles_own_timeline_is_the_default(small, tmp_path: Path) -> None:
    profile, timeline = small
    if "timeline" in {f.name for f in dataclasses.fields(Profile)}:
        profile = dataclasses.replace(profile, timeline=timeline)
    else:  # until Profile gains its timeline field
        object.__setattr__(profile, "timeline", timeline)
    assert plot_timeline(profile, tmp_path / "own.png").exists()


def test_errors_say_what_to_do(small, tmp_path: Path) -> None:
    profile, timeline = small
    with pytest.raises(ValueError, match=r"Nsight Compute.*torch_nsight\.timeline\(\)"):
        plot_timeline(profile, tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"shape '2x2' is not in the timeline; it holds: 1x128"):
        timeline_frame(profile, timeline=timeline, shape="2x2")
    with pytest.raises(ValueError, match=r"run 7 is not a measured step of shape 1x128; its "
                                         r"steps are runs 0, 1, 2"):
        plot_timeline(profile, tmp_path / "x.png", timeline=timeline, run=7)
    # The suffix is checked before anything is drawn, even before the missing timeline.
    with pytest.raises(ValueError, match=r"must end in \.png or \.svg"):
        plot_timeline(profile, tmp_path / "x.pdf")
    assert not list(tmp_path.iterdir())


def test_several_shapes_need_a_shape(small) -> None:
    profile, timeline = small
    other_kernels = kernel_rows("1x256", {0: WINDOWS[0]}, ACTIVITY)
    both = Profile(kernels=pd.concat([profile.kernels, other_kernels], ignore_index=True),
                   meta=ProfileMeta())
    timelines = pd.concat([timeline, timeline_rows("1x256", {0: WINDOWS[0]}, GAPS, BUSY_NS)],
                          ignore_index=True)
    with pytest.raises(ValueError, match=r"2 shapes \(1x128, 1x256\); pass shape="):
        timeline_frame(both, timeline=timelines)
    frame = timeline_frame(both, timeline=timelines, shape="1x256")
    assert set(frame["shape"]) == {"1x256"} and len(frame) == len(ACTIVITY)


def test_an_unknown_launch_thread_goes_on_the_main_lane(small) -> None:
    profile, timeline = small
    kernels = profile.kernels.copy()
    # Traces write thread -1 where the launching call has no thread; its launch time is known.
    kernels.loc[kernels["kind"] == "memset", ["launch_ns", "launch_thread"]] = \
        [BASE_NS + 515_000, -1]
    frame = timeline_frame(Profile(kernels=kernels, meta=ProfileMeta()), timeline=timeline)
    assert frame.loc[frame["kind"] == "memset", "cpu_lane"].item() == "CPU main"
    assert frame.loc[frame["kind"] == "memset", "launch_ms"].item() == pytest.approx(0.515)
