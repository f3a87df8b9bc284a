"""Lab presentation: predicted against measured speedup, from a recorded table (no timing in tests)."""
from matplotlib.figure import Figure

from specdec_lib.presentation import figure_files as figures
from specdec_lib.presentation import measure_it as views


def test_plot_measured_speedup_from_reference():
    fig = views.plot_measured_speedup(views.REFERENCE)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    ax = fig.axes[0]
    gids = [a.get_gid() for a in ax.get_children()]
    assert views.MEASURED_GID in gids and views.PARITY_GID in gids
    assert "max rel. error" in ax.get_title()


def test_registered_for_make_figures():
    assert "measure_it" in figures.ACTS
    assert "lab_measured_speedup" in figures.all_figures()
