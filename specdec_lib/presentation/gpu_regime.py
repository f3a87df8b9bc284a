"""Act IV on a GPU: the real pair's cost terms measured on one H200 (lab.recordings.recorded("measure-gpu")) beside
the CPU recording's (recorded("measure-real")), and what the cost equation predicts from them.

Text tables a notebook prints and one figure (the batch regime, by cost_model.plot_batch_regime); every number is
read from the two recordings or computed from them here, never typed in.
"""
from __future__ import annotations

from .. import cost
from ..accounting import alpha_from_tokens
from ..lab.gpu_recording import CostColumn, GPURecording
from ..lab.recordings import RealRecording, recorded
from .cost_model import plot_batch_regime
from .real_pair import recorded_c_v

__all__ = ["COLUMNS", "CHAINS", "cpu_run", "terms_table", "passes_table", "drafts_table", "predictions_table",
           "depth_table", "batch_alpha", "plot_gpu_batch_regime", "FIGURES"]

COLUMNS = (("eager", "run1"), ("captured", "run1"), ("captured", "run2"))  # the columns the section compares
CHAINS = (("0.5B", "model", 4), ("lookup", "lookup", 6))  # (GPU draft, CPU draft, k): the CPU recording's greedy runs


def cpu_run(real: RealRecording, task: str, draft: str, k: int):
    """The CPU recording's greedy float32 run of draft at k on task (the one the GPU predictions read E[N] from)."""
    for r in real.runs:
        if (r.task, r.draft, r.k, r.temperature, r.dtype) == (task, draft, k, 0.0, "float32"):
            return r
    raise ValueError(f"(task, draft, k) must name a greedy float32 run of the CPU recording; got {(task, draft, k)}")


def terms_table(gpu: GPURecording, real: RealRecording, *, ks=(1, 2, 4, 8)) -> str:
    """T_1 and c_v(k) at batch 1 per GPU column, then the CPU recording's (float32, its matmul path)."""
    head = f"{'where':<28}{'T_1 (ms)':>10}" + "".join(f"{f'c_v({k})':>9}" for k in ks)
    lines = [head]
    for path, run in COLUMNS:
        c = gpu.column(path, run=run)
        cells = [f"{c.c_v[c.ks.index(k)]:>9.2f}" if k in c.ks else f"{'-':>9}" for k in ks]
        lines.append(f"{f'H200, {path} ({run})':<28}{c.T_1_ms:>10.2f}" + "".join(cells))
    T_1 = min(r.T_1 for r in real.runs if r.dtype == "float32") * 1e3
    lines.append(f"{'CPU, 2 cores (fastest T_1)':<28}{T_1:>10.0f}" + "".join(f"{recorded_c_v(real, k):>9.2f}"
                                                                             for k in ks))
    return "\n".join(lines)


def passes_table(column: CostColumn) -> str:
    """One target pass over T new tokens at batch 1, in plain steps (pass / T_1), for every T the column timed."""
    row = column.pass_ms["1"]
    lines = [f"{'new tokens T':>12}{'pass (ms)':>11}{'in steps':>10}"]
    lines += [f"{T:>12}{row[T]:>11.2f}{row[T] / row['1']:>10.2f}" for T in sorted(row, key=int)]
    return "\n".join(lines)


def drafts_table(column: CostColumn, real: RealRecording) -> str:
    """The drafts by depth: layers, width and c_d against the target's step, then the 0.5B draft's c_d on the CPU."""
    lines = [f"{'draft':<22}{'layers':>7}{'width':>7}{'c_d':>7}"]
    lines += [f"{d.draft:<22}{d.layers:>7}{d.hidden:>7}{d.c_d[0]:>7.3f}" for d in column.drafts]
    cpu = sorted(r.c_d for r in real.runs if r.draft == "model" and r.dtype == "float32")
    lines.append(f"{'0.5B on the CPU':<22}{'24':>7}{'896':>7}   {cpu[0]:.2f}-{cpu[-1]:.2f}")
    return "\n".join(lines)


def predictions_table(gpu: GPURecording, real: RealRecording) -> tuple[str, float]:
    """Per task and chain draft: E[N] and S measured on the CPU, then S = E[N] / (k c_d + c_v(k)) on each GPU column,
    computed here; and the largest gap between that and the recording's own predictions (a check)."""
    cols = "".join(f"{f'{p} {r}':>15}" for p, r in COLUMNS)
    lines, gap = [f"{'task':<7}{'draft':<8}{'k':>3}{'E[N]':>7}{'CPU S':>8}{cols}"], 0.0
    for task in gpu.tasks:
        for draft, cpu_draft, k in CHAINS:
            run = cpu_run(real, task, cpu_draft, k)
            cells = []
            for path, r in COLUMNS:
                p = gpu.prediction(task, draft, path=path, run=r)
                if p.e_n != run.e_n or p.k != k:
                    raise ValueError(f"the GPU prediction for {task}/{draft} must read the CPU run's E[N] at k = {k}")
                s = cost.cost_equation(run.e_n, draft_steps=k, c_d=p.c_d, c_v=p.c_v)
                gap = max(gap, abs(s - p.predicted))
                cells.append(f"{s:>15.2f}")
            lines.append(f"{task:<7}{draft:<8}{k:>3}{run.e_n:>7.2f}{run.measured:>8.2f}" + "".join(cells))
    return "\n".join(lines), gap


def depth_table(gpu: GPURecording, real: RealRecording, *, path: str = "captured", run: str = "run2") -> str:
    """Per task, S at k = 4 for every draft by depth of a column, all at the 0.5B draft's E[N] on the CPU: how S moves
    with c_d alone at one acceptance (a real draft of another depth accepts differently)."""
    column = gpu.column(path, run=run)
    names = [d.draft for d in column.drafts if d.draft != "one_layer_0.5B_width"]
    lines = [f"{'task':<7}{'E[N]':>6}" + "".join(f"{n:>11}" for n in names)]
    for task in gpu.tasks:
        e_n = cpu_run(real, task, "model", 4).e_n
        c_v = column.c_v[column.ks.index(4)]
        cells = [f"{cost.cost_equation(e_n, draft_steps=4, c_d=column.draft(n).c_d[0], c_v=c_v):>11.2f}" for n in names]
        lines.append(f"{task:<7}{e_n:>6.2f}" + "".join(cells))
    return "\n".join(lines)


def batch_alpha(real: RealRecording, *, task: str = "edit") -> float:
    """The constant acceptance rate of the CPU recording's model draft on task (k = 4): its E[N] inverted."""
    return alpha_from_tokens(cpu_run(real, task, "model", 4).e_n, 4)


def plot_gpu_batch_regime(gpu: GPURecording | None = None, real: RealRecording | None = None, *,
                          draft: str = "one_layer"):
    """c_v(k; B) of the captured passes (run 2, B = 1, 4, 16, 64) and the best k per B, at the edit task's alpha and
    a draft's c_d (default: one layer of the target's width)."""
    gpu, real = gpu or recorded("measure-gpu"), real or recorded("measure-real")
    column = gpu.column("captured", run="run2")
    batch = column.batch_cost(alpha=batch_alpha(real), c_d=column.draft(draft).c_d[0])
    return plot_batch_regime(batch)


FIGURES = {"act4_gpu_batch_regime": lambda: plot_gpu_batch_regime()}
