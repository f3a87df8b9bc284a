"""Act IV on a GPU: the tables read the two recordings and recompute the equation; the batch figure is the lab's."""
import dataclasses

import pytest

from specdec_lib import cost
from specdec_lib.lab.recordings import recorded
from specdec_lib.presentation import gpu_regime as views
from specdec_lib.presentation.cost_model import BEST_K_GID

GPU, REAL = recorded("measure-gpu"), recorded("measure-real")


def test_predictions_are_recomputed_from_the_cpu_acceptance_and_the_gpu_terms():
    table, gap = views.predictions_table(GPU, REAL)
    assert gap < 1e-12
    run = views.cpu_run(REAL, "edit", "lookup", 6)
    p = GPU.prediction("edit", "lookup", path="eager", run="run1")
    s = cost.cost_equation(run.e_n, draft_steps=6, c_d=p.c_d, c_v=p.c_v)
    assert f"{s:.2f}" in table.splitlines()[-1] and f"{run.measured:.2f}" in table.splitlines()[-1]
    assert len(table.splitlines()) == 1 + len(GPU.tasks) * len(views.CHAINS)


def test_a_prediction_that_read_another_acceptance_is_refused():
    """Negative control: a GPU prediction whose E[N] is not the CPU run's must not be printed as if it were."""
    bent = [dataclasses.replace(p, e_n=p.e_n + 0.5) if (p.task, p.draft) == ("code", "0.5B") else p
            for p in GPU.predictions]
    with pytest.raises(ValueError, match="must read the CPU run's E\\[N\\]"):
        views.predictions_table(dataclasses.replace(GPU, predictions=bent), REAL)


def test_terms_passes_and_depth_tables_print_the_recorded_terms():
    terms = views.terms_table(GPU, REAL).splitlines()
    eager = GPU.column("eager")
    assert terms[1].split()[-4:] == [f"{eager.c_v[eager.ks.index(k)]:.2f}" for k in (1, 2, 4, 8)]
    run2 = GPU.column("captured", run="run2")
    passes = views.passes_table(run2).splitlines()
    assert len(passes) == 1 + len(run2.pass_ms["1"]) and passes[1].split()[-1] == "1.00"
    depth = views.depth_table(GPU, REAL).splitlines()
    e_n = views.cpu_run(REAL, "edit", "model", 4).e_n
    one = cost.cost_equation(e_n, draft_steps=4, c_d=run2.draft("one_layer").c_d[0], c_v=run2.c_v[run2.ks.index(4)])
    assert depth[0].split()[-1] == "one_layer" and depth[-1].split()[-1] == f"{one:.2f}"
    with pytest.raises(ValueError, match="greedy float32 run"):
        views.cpu_run(REAL, "edit", "model", 3)


def test_the_gpu_batch_figure_is_the_lab_batch_regime_of_the_captured_passes():
    fig = views.plot_gpu_batch_regime(GPU, REAL)
    stars = [a for ax in fig.axes for a in ax.get_children() if getattr(a, "get_gid", lambda: None)() == BEST_K_GID]
    assert len(stars) == 1 and list(stars[0].get_xdata()) == GPU.column("captured", run="run2").batches
    assert 0.95 < views.batch_alpha(REAL) < 0.96  # the edit task's E[N] 4.57 at k = 4
