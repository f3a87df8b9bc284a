"""Act IV presentation: the round timeline, the heat map, the k sweep, the cost explorer and FIGURES."""
import base64
import math

import pytest
import torch
from matplotlib.collections import QuadMesh
from matplotlib.figure import Figure

import specdec_lib as sd
from specdec_lib.lab.recordings import recorded
from specdec_lib.presentation import cost_model as views

SMALL = {"alphas": [0.4, 0.6, 0.8, 0.9], "c_ds": [0.05, 0.10, 0.20, 0.30, 0.40]}  # the post's grid


def _gids(ax):
    return [a.get_gid() for a in ax.get_children()]


def _bars(ax, gid):
    """[left, width, left, width, ...] of the bars tagged gid, in drawing order."""
    return [v for p in ax.patches if p.get_gid() == gid for v in (p.get_x(), p.get_width())]


def _fingerprint(out) -> str:
    """The explorer's figure as the fast_png fixture stores it: a repr of titles, texts and data."""
    return base64.b64decode(out.outputs[0]["data"]["image/png"]).decode()


def _lane_ends(ax):
    return [float(ln.get_xdata()[0]) for ln in ax.get_lines() if ln.get_gid() == views.LANE_END_GID]


def test_round_timeline_lanes_are_the_speedup():
    ax = views.plot_round_timeline(k=4, c_d=0.15, c_v=1.6, alpha=0.8).axes[0]
    draft, verify = _bars(ax, views.DRAFT_GID), _bars(ax, views.VERIFY_GID)
    assert draft == pytest.approx([0, 0.15, 0.15, 0.15, 0.30, 0.15, 0.45, 0.15])
    assert verify == pytest.approx([0.6, 1.6]) and _bars(ax, views.OVERHEAD_GID) == []
    e_n = sd.expected_tokens(0.8, 4)  # 3.3616: three whole target steps and a partial one
    plain = _bars(ax, views.PLAIN_GID)
    assert plain == pytest.approx([0, 1, 1, 1, 2, 1, 3, e_n - 3])
    spec_end, plain_end = _lane_ends(ax)
    assert spec_end == pytest.approx(2.2) and plain_end == pytest.approx(e_n)
    assert plain_end / spec_end == pytest.approx(sd.speedup(0.8, c_d=0.15, k=4, c_v=1.6), abs=1e-12)
    assert ax.get_title() == "α = 0.8, k = 4: S = 3.36 / 2.20 = 1.53"
    texts = [t.get_text() for t in ax.texts]
    assert sum("3.36 tokens" in t for t in texts) == 2  # both lanes retire the same expected tokens


def test_round_timeline_overhead_and_growing_c_v():
    c_v = views.LinearCost(1.0, 0.05)  # evaluated at k = 8: 1.4
    ax = views.plot_round_timeline(k=8, c_d=0.2, c_v=c_v, alpha=0.6, overhead=0.3).axes[0]
    assert _bars(ax, views.VERIFY_GID) == pytest.approx([1.6, 1.4])
    assert _bars(ax, views.OVERHEAD_GID) == pytest.approx([3.0, 0.3])
    spec_end, plain_end = _lane_ends(ax)
    assert spec_end == pytest.approx(3.3)
    assert plain_end / spec_end == pytest.approx(sd.speedup(0.6, c_d=0.2, k=8, c_v=c_v, overhead=0.3), abs=1e-12)
    assert "O = 0.3" in ax.get_title() and "S = 2.47 / 3.30 = 0.75" in ax.get_title()


@pytest.mark.parametrize("kwargs, error, message", [
    ({"k": 0}, ValueError, "k must be >= 1"),
    ({"k": 2.0}, TypeError, "k must be an integer"),
    ({"c_d": -0.1}, ValueError, r"c_d must lie in \[0, inf\)"),
    ({"c_v": 0.0}, ValueError, r"c_v must lie in \(0, inf\)"),
    ({"c_v": lambda k: -1.0}, ValueError, r"c_v\(k\) must lie in \(0, inf\)"),
    ({"overhead": math.nan}, ValueError, "overhead must not be NaN"),
    ({"alpha": 1.5}, ValueError, r"alpha must lie in \[0, 1\]"),
])
def test_round_timeline_rejects_bad_input(kwargs, error, message):
    with pytest.raises(error, match=message):
        views.plot_round_timeline(**kwargs)


def test_heatmap_marks_slower_region_and_point():
    fig = views.plot_speedup_heatmap(point=(0.8, 0.15), **SMALL)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]  # fig.axes[1] is the colour bar
    assert len(fig.axes) == 2
    assert "k = 8" in ax.get_title() and "c_v = 1.6" in ax.get_title()
    gids = _gids(ax)
    assert views.SLOWER_GID in gids and views.PARITY_GID in gids and views.BEST_K_GID in gids
    (slower,) = [a for a in ax.get_children() if a.get_gid() == views.SLOWER_GID]
    assert slower.hatches == ["//"]
    texts = [t.get_text() for t in ax.texts]
    assert any("best k = 6" in t and "S(8) = 1.55" in t for t in texts)


def test_heatmap_with_overhead_and_growing_c_v():
    c_v = views.LinearCost(1.6, 0.05)
    fig = views.plot_speedup_heatmap(point=(0.8, 0.15), c_v=c_v, overhead=0.3, **SMALL)
    ax = fig.axes[0]
    assert "k = 8, c_v(k) = 1.6 + 0.05 k, O = 0.3" in ax.get_title()
    s = sd.speedup(0.8, c_d=0.15, k=8, c_v=c_v, overhead=0.3)  # 1.24, against 1.55 with neither term
    best = sd.best_k(0.8, c_d=0.15, c_v=c_v, k_max=32, overhead=0.3)
    assert [t.get_text() for t in ax.texts] == [f"S(8) = {s:.2f}\nbest k = {best.k} (S = {best.speedup:.2f})"]
    assert f"{s:.2f}" != "1.55"


def test_heatmap_without_slower_region_has_no_hatch():
    fig = views.plot_speedup_heatmap(alphas=[0.9, 0.95], c_ds=[0.0, 0.05])  # all faster than plain
    gids = _gids(fig.axes[0])
    assert views.SLOWER_GID not in gids and views.BEST_K_GID not in gids


def test_k_sweep_lines_and_best_k():
    fig = views.plot_k_sweep()
    ax = fig.axes[0]
    assert len([ln for ln in ax.get_lines() if ln.get_gid() is None]) == 3  # one curve per alpha
    stars = [ln for ln in ax.get_lines() if ln.get_gid() == views.BEST_K_GID]
    assert [int(s.get_xdata()[0]) for s in stars] == [1, 3, 7]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[2] == "α = 0.9  (best k = 7)"
    assert "1 + 0.05 k" in ax.get_title()


def test_k_sweep_compute_bound_says_do_not_speculate():
    fig = views.plot_k_sweep(c_v=views.COMPUTE_BOUND)
    ax = fig.axes[0]
    assert len([ln for ln in ax.get_lines() if ln.get_gid() == views.BEST_K_GID]) == 2  # alpha 0.5: k = 0
    assert "do not speculate" in ax.get_legend().get_texts()[0].get_text()


def _controls(box):
    """The explorer's sliders by name, and its Output."""
    (alpha, k), (c_d, c_v), (b, overhead) = (row.children for row in box.children[:3])
    return {"alpha": alpha, "k": k, "c_d": c_d, "c_v": c_v, "b": b, "overhead": overhead}, box.children[3]


def test_explorer_sliders_update_output(fast_png):
    sliders, out = _controls(views.cost_explorer())
    assert "S(8) = 1.55x" in out.outputs[1]["text"] and "best k in 0..32 = 6" in out.outputs[1]["text"]
    before = out.outputs
    sliders["k"].value = 4
    assert out.outputs != before and "S(4) = 1.53x" in out.outputs[1]["text"]
    before = out.outputs
    sliders["b"].value = 0.05  # c_v(4) = 1.6 + 0.05 * 4 = 1.8
    s = sd.speedup(0.8, c_d=0.15, k=4, c_v=views.LinearCost(1.6, 0.05))
    assert out.outputs != before and f"c_v(k) = 1.6 + 0.05 k: S(4) = {s:.2f}x" in out.outputs[1]["text"]
    assert "k = 4, c_v(k) = 1.6 + 0.05 k\\nhatched" in _fingerprint(out)  # the heat map's title
    before = out.outputs
    sliders["overhead"].value = 0.2
    s = sd.speedup(0.8, c_d=0.15, k=4, c_v=views.LinearCost(1.6, 0.05), overhead=0.2)
    best = sd.best_k(0.8, c_d=0.15, c_v=views.LinearCost(1.6, 0.05), k_max=32, overhead=0.2)
    assert out.outputs != before and f"O = 0.20: S(4) = {s:.2f}x" in out.outputs[1]["text"]
    assert f"best k in 0..32 = {best.k} with S = {best.speedup:.2f}x" in out.outputs[1]["text"]
    assert "c_v(k) = 1.6 + 0.05 k, O = 0.2\\nhatched" in _fingerprint(out)
    assert f"S(4) = {s:.2f}\\nbest k = {best.k} (S = {best.speedup:.2f})" in _fingerprint(out)  # the dot's box
    sliders["alpha"].value = 0.4
    assert "SLOWER" in out.outputs[1]["text"]
    assert "image/png" in out.outputs[0]["data"]


TODAY = [  # what the explorer printed before O and b existed, for the same slider moves
    ({}, "α = 0.80, c_d = 0.15, c_v = 1.6: S(8) = 1.55x (faster than plain); best k in 0..32 = 6 with S = 1.58x\n"),
    ({"c_d": 0.3},
     "α = 0.80, c_d = 0.30, c_v = 1.6: S(8) = 1.08x (faster than plain); best k in 0..32 = 4 with S = 1.20x\n"),
    ({"c_v": 2.0, "k": 5},
     "α = 0.80, c_d = 0.30, c_v = 2.0: S(5) = 1.05x (faster than plain); best k in 0..32 = 5 with S = 1.05x\n"),
]


@pytest.mark.heavy
def test_explorer_at_zero_overhead_and_slope_reports_as_before(fast_png):
    sliders, out = _controls(views.cost_explorer())
    assert sliders["b"].value == 0 and sliders["overhead"].value == 0
    for moves, text in TODAY:
        for name, value in moves.items():
            sliders[name].value = value
        assert out.outputs[1]["text"] == text
    assert repr("S(k) at k = 5, c_v = 2\nhatched below the S = 1 line: slower than plain decoding") in _fingerprint(out)
    shown = out.outputs
    sliders["b"].value, sliders["overhead"].value = 0.1, 0.1
    assert out.outputs != shown
    sliders["b"].value, sliders["overhead"].value = 0.0, 0.0
    assert out.outputs == shown  # back at O = 0 and b = 0: the same figure and text


def _s(alpha, k, c_d, c_v):
    """S(k) = E[N] / (k c_d + c_v(k)) by hand, E[N] = (1 - a^(k+1)) / (1 - a); k = 0 is plain decoding, 1."""
    return 1.0 if k == 0 else (1 - alpha ** (k + 1)) / (1 - alpha) / (k * c_d + c_v(k))


def _best(alpha, c_d, c_v, k_max):
    """(k, S) of the largest S(k) over k = 0..k_max, ties to the smaller k."""
    return max(((k, _s(alpha, k, c_d, c_v)) for k in range(k_max + 1)), key=lambda ks: (ks[1], -ks[0]))


def _check_timeline(ax):
    """The defaults k = 4, c_d = 0.15, c_v = 1.6, alpha = 0.8: four draft bars, the verification, E[N] plain steps."""
    e_n = (1 - 0.8 ** 5) / (1 - 0.8)  # 3.3616
    assert max(abs(a - b) for a, b in zip(_bars(ax, views.DRAFT_GID), [0, .15, .15, .15, .3, .15, .45, .15])) < 1e-12
    assert len(_bars(ax, views.DRAFT_GID)) == 8 and _bars(ax, views.OVERHEAD_GID) == []
    assert max(abs(a - b) for a, b in zip(_bars(ax, views.VERIFY_GID), [0.6, 1.6])) < 1e-12
    plain = _bars(ax, views.PLAIN_GID)
    assert len(plain) == 8 and max(abs(a - b) for a, b in zip(plain, [0, 1, 1, 1, 2, 1, 3, e_n - 3])) < 1e-12
    spec_end, plain_end = _lane_ends(ax)
    assert abs(spec_end - 2.2) < 1e-12 and abs(plain_end - e_n) < 1e-12
    assert abs(plain_end / spec_end - _s(0.8, 4, 0.15, lambda k: 1.6)) < 1e-12
    assert ax.get_title() == f"α = 0.8, k = 4: S = {e_n:.2f} / 2.20 = {e_n / 2.2:.2f}"


def _check_heatmap(ax):
    """S(8) at c_v = 1.6 in every cell (rows alpha, columns c_d), the parity line on S = 1, the post's 0.90 cell."""
    c_v = lambda k: 1.6  # noqa: E731
    mesh = next(c for c in ax.collections if isinstance(c, QuadMesh))
    want = torch.tensor([[_s(a, 8, c, c_v) for c in views.C_DS_FINE] for a in views.ALPHAS_FINE], dtype=torch.float64)
    drawn = torch.as_tensor(mesh.get_array(), dtype=torch.float64).reshape(want.shape)
    assert drawn.sub(want).abs().max() < 1e-12 and mesh.get_array().size == 66 * 51
    centres = mesh.get_coordinates()[:-1, :-1] + mesh.get_coordinates()[1:, 1:]  # (66, 51, 2): twice each centre
    assert max(abs(x / 2 - c) for x, c in zip(centres[0, :, 0], views.C_DS_FINE)) < 1e-12  # columns: c_d
    assert max(abs(y / 2 - a) for y, a in zip(centres[:, 0, 1], views.ALPHAS_FINE)) < 1e-12  # rows: alpha
    parity = next(c for c in ax.get_children() if c.get_gid() == views.PARITY_GID)
    vertices = [v for path in parity.get_paths() for v in path.vertices]
    assert len(vertices) > 10  # linear interpolation between cells: within 2e-3 of S = 1 everywhere on the line
    assert max(abs(_s(float(a), 8, float(c), c_v) - 1) for c, a in vertices) < 2e-3
    assert any(c.get_gid() == views.SLOWER_GID for c in ax.get_children())
    point = next(ln for ln in ax.get_lines() if ln.get_gid() == views.BEST_K_GID)
    assert list(point.get_xdata()) == [0.40] and list(point.get_ydata()) == [0.8]
    best_k, best_s = _best(0.8, 0.40, c_v, 32)
    assert f"{_s(0.8, 8, 0.40, c_v):.2f}" == "0.90" and best_k == 3  # the post's cell: slower at k = 8, not at 3
    assert f"S(8) = 0.90\nbest k = {best_k} (S = {best_s:.2f})" in [t.get_text() for t in ax.texts]


def _check_batch(fig):
    """The recorded run's c_v(k; B) points, each B's least-squares line, the best k per B by hand over 0..max(ks)."""
    batch = recorded("measure").batch
    ax, bx = fig.axes
    measured = [ln for ln in ax.get_lines() if ln.get_gid() == views.MEASURED_GID]
    assert len(measured) == len(batch.batches)
    bests = []
    for b, (B, points) in enumerate(zip(batch.batches, measured)):
        ks, c_v = list(batch.ks), list(batch.c_v[b])
        assert list(points.get_xdata()) == ks and list(points.get_ydata()) == c_v
        mk, mc = sum(ks) / len(ks), sum(c_v) / len(c_v)
        slope = sum((k - mk) * (c - mc) for k, c in zip(ks, c_v)) / sum((k - mk) ** 2 for k in ks)
        c0 = mc - slope * mk
        line = next(ln for ln in ax.get_lines() if ln.get_label().startswith(f"B = {B}: "))
        assert list(line.get_xdata()) == [0, *ks]
        assert max(abs(y - (c0 + slope * k)) for y, k in zip(line.get_ydata(), [0, *ks])) < 1e-12
        assert line.get_label() == f"B = {B}: {c0:.2f} + {slope:.3f} k"
        bests.append(_best(batch.alpha, batch.c_d, lambda k, c0=c0, s=slope: c0 + s * k, max(ks)))
    illustrative = [ln for ln in ax.get_lines() if ln.get_gid() == views.ILLUSTRATIVE_GID]
    assert len(illustrative) == 2  # the notebook's memory-bound 1 + 0.05 k and compute-bound 1 + 0.5 k
    for ln, slope in zip(illustrative, (0.05, 0.5)):
        assert max(abs(y - (1 + slope * k)) for y, k in zip(ln.get_ydata(), ln.get_xdata())) < 1e-12
    best_line = next(ln for ln in bx.get_lines() if ln.get_gid() == views.BEST_K_GID)
    assert list(best_line.get_xdata()) == list(batch.batches) and list(best_line.get_ydata()) == [k for k, _ in bests]
    assert [t.get_text() for t in bx.texts] == [f"S = {s:.2f}" for _, s in bests]
    assert len({k for k, _ in bests}) > 1  # the recorded run's best k falls with the batch size


@pytest.mark.parametrize("name", sorted(views.FIGURES))
def test_figures_build(name):
    """Every figure draws the cost equation S(k) = E[N] / (k c_d + c_v(k)) computed by hand, E[N] =
    (1 - a^(k+1)) / (1 - a): the round timeline's lanes (draft, verification and E[N] plain steps) and their ends;
    the heat map's every cell at k = 8, c_v = 1.6 to 1e-12, its parity line on S = 1 and the marked cell's best k;
    the two k sweeps at c_d = 0.15, c_v(k) = 1 + 0.05 k (memory bound) or 1 + 0.5 k (compute bound), to 1e-12, each
    curve's best k; the batch regime's measured points, least-squares lines and best k per batch size."""
    fig = views.FIGURES[name]()
    assert isinstance(fig, Figure)
    if name.startswith("act4_k_sweep"):
        slope = 0.5 if name.endswith("compute_bound") else 0.05
        curves = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("α = ")]
        assert [ln.get_label().split()[2] for ln in curves] == ["0.5", "0.7", "0.9"]
        for ln, a in zip(curves, (0.5, 0.7, 0.9)):
            want = [(1 - a ** (k + 1)) / (1 - a) / (0.15 * k + 1 + slope * k) for k in range(1, 33)]
            assert max(abs(y - w) for y, w in zip(ln.get_ydata(), want)) < 1e-12 and len(ln.get_ydata()) == 32
            best = max(range(1, 33), key=lambda k: want[k - 1])
            assert f"best k = {best if want[best - 1] > 1 else 0}" in ln.get_label()
    elif name == "act4_round_timeline":
        _check_timeline(fig.axes[0])
    elif name == "act4_speedup_heatmap":
        _check_heatmap(fig.axes[0])
    else:
        _check_batch(fig)


def _batch(slopes, best_ks):
    """A BatchCost with lines c_v(k; B) = 1 + slope k measured exactly at k = 1..4, and the given best k per B."""
    from specdec_lib.lab.batch_cost import BatchCost
    ks = [1, 2, 3, 4]
    return BatchCost(batches=[1, 4, 16][:len(slopes)], ks=ks, T_1=[1e-3] * len(slopes),
                     c_v=[[1 + s * k for k in ks] for s in slopes], fits=[(1.0, s) for s in slopes],
                     best=[sd.BestK(k=k, speedup=1.0 + 0.1 * k, speedups=[1.0]) for k in best_ks], alpha=0.6, c_d=0.02)


@pytest.mark.heavy
def test_batch_regime_draws_each_line_the_illustrative_slopes_and_best_k():
    fig = views.plot_batch_regime(_batch([0.05, 0.2, 0.4], [3, 2, 0]))
    ax, bx = fig.axes
    measured = [ln for ln in ax.get_lines() if ln.get_gid() == views.MEASURED_GID]
    assert [list(ln.get_ydata()) for ln in measured] == [[1 + s * k for k in (1, 2, 3, 4)] for s in (0.05, 0.2, 0.4)]
    illustrative = [ln for ln in ax.get_lines() if ln.get_gid() == views.ILLUSTRATIVE_GID]
    assert [ln.get_ydata()[-1] for ln in illustrative] == pytest.approx([1.2, 3.0])  # 1 + 0.05 k, 1 + 0.5 k at k = 4
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:3] == ["B = 1: 1.00 + 0.050 k", "B = 4: 1.00 + 0.200 k", "B = 16: 1.00 + 0.400 k"]
    (stars,) = [ln for ln in bx.get_lines() if ln.get_gid() == views.BEST_K_GID]
    assert list(stars.get_xdata()) == [1, 4, 16] and list(stars.get_ydata()) == [3, 2, 0]
    assert [t.get_text() for t in bx.texts] == ["S = 1.30", "S = 1.20", "S = 1.00"]
    other = views.plot_batch_regime(_batch([0.05, 0.2, 0.4], [3, 3, 3])).axes[1]  # negative control: k unchanged
    assert list([ln for ln in other.get_lines() if ln.get_gid() == views.BEST_K_GID][0].get_ydata()) == [3, 3, 3]


def test_batch_regime_of_the_recorded_run():
    from specdec_lib.presentation.measure_it import RECORDED
    bx = views.FIGURES["act4_batch_regime"]().axes[1]
    (stars,) = [ln for ln in bx.get_lines() if ln.get_gid() == views.BEST_K_GID]
    assert list(stars.get_ydata()) == [b.k for b in RECORDED.batch.best]
    assert f"α = {RECORDED.batch.alpha:.2f}" in bx.get_title()
