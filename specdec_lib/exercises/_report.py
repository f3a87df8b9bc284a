"""What every checker shares: the Grade, running the learner's function safely, and law comparisons."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..noise import tv_noise_bound
from ..sampling import total_variation

__all__ = ["DELTA", "Grade", "Stop", "call", "run", "fmt", "as_tensor", "law_verdict", "as_number"]

DELTA = 1e-6  # false-alarm rate of every sampled check: a correct solution fails about once in a million runs


@dataclass
class Grade:
    """What a checker found: `ok`, and one plain-words message per finding (printing a report shows them)."""

    exercise: str
    ok: bool = True
    messages: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.ok = False
        self.messages.append(message)

    def note(self, message: str) -> None:
        self.messages.append(message)

    def __str__(self) -> str:
        head = f"{self.exercise}: {'all checks passed' if self.ok else 'not right yet'}"
        return "\n".join([head] + [f"  - {m}" for m in self.messages])

    def __repr__(self) -> str:
        return f"Grade({self.exercise!r}, ok={self.ok}, {len(self.messages)} message(s))"


class Stop(Exception):
    """Raised inside a checker once a finding makes further checks meaningless."""


def call(fn, *args, on: str, **kwargs):
    """fn(*args): NotImplementedError passes through; any other exception becomes a finding."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except Exception as e:  # the learner's bug, reported in words
        raise Stop(f"your function raised {type(e).__name__}: {e} (on {on})") from None


def run(exercise: str, body, fn, *, raise_on_failure: bool, verbose: bool) -> Grade:
    report = Grade(exercise)
    if not callable(fn):
        report.fail(f"expected a function, got {type(fn).__name__}: pass the function itself, without calling it")
    else:
        try:
            body(fn, report)
        except NotImplementedError:
            raise
        except Stop as stop:
            report.fail(str(stop))
        except Exception as e:  # an output the checker could not read: still a plain-words finding
            report.fail(f"could not read your function's output ({type(e).__name__}: {e})")
    if verbose:
        print(report)
    if raise_on_failure and not report.ok:
        raise AssertionError(f"{exercise}: see the report above" if verbose else str(report))
    return report


def fmt(xs) -> str:
    return "[" + ", ".join(f"{float(x):.4g}" for x in xs) + "]"


def as_tensor(out, name: str, shape=None) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise Stop(f"{name} must return a torch.Tensor, got {type(out).__name__}")
    if shape is not None and tuple(out.shape) != tuple(shape):
        raise Stop(f"{name} must return shape {tuple(shape)}, got {tuple(out.shape)}")
    return out


def law_verdict(report: Grade, what: str, freq: torch.Tensor, law: torch.Tensor, n: int,
                 mistakes: dict, delta: float) -> bool:
    """Measured TV against the noise bound; on failure name every known mistake whose law the samples match."""
    tv, bound = total_variation(freq, law), tv_noise_bound(law, n, delta)
    if tv <= bound:
        return True
    msg = f"{what}: wrong distribution, TV {tv:.4f} from the exact law with {n:,} samples (noise bound {bound:.4f})"
    hits = [text for wrong_law, text in mistakes.values()
            if total_variation(freq, wrong_law) <= tv_noise_bound(wrong_law, n, delta)]
    report.fail(msg + (". It matches a known mistake: " + "; ".join(hits) if hits else ""))
    return False


def as_number(out, name: str, on: str) -> float:
    if isinstance(out, torch.Tensor) and out.numel() == 1:
        out = out.item()
    if isinstance(out, bool) or not isinstance(out, (int, float)):
        raise Stop(f"{name} must return a number, got {type(out).__name__} (on {on})")
    return float(out)
