"""tools/gpu_smoke.py (make gpu-smoke): its checks cover every lab decoder the issue names, on tiny models and on the
byte pair; main runs them all on the CPU with few samples and passes; a failing check, or a law off the exact one,
fails the run (exit status 1)."""
import sys
from pathlib import Path

import pytest
import torch

from specdec_lib.lab.generation import Decoding, generate_speculative

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))  # as tests/tools/test_real_pair_files.py does
import gpu_smoke  # noqa: E402


@pytest.fixture
def smoke():
    return gpu_smoke


def test_the_checks_cover_every_lab_decoder_greedy_and_on_the_byte_pair(smoke):
    named = {"model draft", "prompt lookup", "n-gram table", "token rule", "block verification", "draft tree",
             "lookahead", "early exit, shared cache", "early exit, own cache", "medusa", "eagle",
             "static cache"}  # issue 39's list, and its part 2's captured decode path
    assert set(smoke.DECODERS) == named == {c.decoder for c in smoke.CHECKS}
    laws = {c.decoder for c in smoke.CHECKS if c.name.startswith("law: ")}
    greedy = {c.decoder for c in smoke.CHECKS if not c.name.startswith("law: ")}
    assert greedy == named - {"token rule", "block verification"}  # greedy tests no rule: both keep the argmax
    assert {"token rule", "block verification", "draft tree", "early exit, shared cache", "static cache"} <= laws
    byte = {c.decoder for c in smoke.CHECKS if c.name.startswith("byte pair: ")}
    assert byte == greedy - {"early exit, own cache"}  # the byte pair is a lab model, not a transformers one
    assert len({c.name for c in smoke.CHECKS}) == len(smoke.CHECKS)


@pytest.mark.heavy
def test_main_passes_every_check_on_the_cpu(smoke, capsys):
    assert smoke.main(["--device", "cpu", "--samples", "40"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("gpu-smoke on cpu (the CPU)")
    lines = {line.split("  ")[0]: line for line in out[1:-1]}
    assert set(lines) == {c.name for c in smoke.CHECKS}
    assert all(" cpu   ok " in line for line in lines.values()), out
    assert out[-1].startswith(f"gpu-smoke: {len(smoke.CHECKS)} of {len(smoke.CHECKS)} checks pass on cpu")


def test_a_failing_check_fails_the_run_and_the_others_still_run(smoke, capsys, monkeypatch):
    def broken(device, samples):
        raise RuntimeError("expected self and mask to be on the same device")

    first = smoke.CHECKS[0]
    monkeypatch.setattr(smoke, "CHECKS", (smoke.Check("broken", "model draft", broken), first))
    assert smoke.main(["--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "expected self and mask" in out and f"{first.name}" in out
    assert "1 of 2 checks pass" in out


@pytest.mark.heavy
def test_the_law_check_fails_a_sampler_off_the_exact_law(smoke):
    """Negative control: proposals verified against the target at temperature 0.5 while the exact law is at 1."""
    def wrong(target, drafter, prompt, decoding):
        return generate_speculative(target, drafter, prompt, smoke.HORIZON, 2, decoding=Decoding(
            0.5, None, decoding.generator))

    build = [c for c in smoke.CHECKS if c.name == "law: token rule, model draft, lab"][0]
    assert "TV" in build.run(torch.device("cpu"), 1000)
    check = smoke._law(lambda d: (smoke._lab(d, vocab=smoke.V), smoke._lab(d, vocab=smoke.V, layers=1, seed=6)),
                       wrong)
    with pytest.raises(AssertionError, match="to the exact law"):
        check(torch.device("cpu"), 1000)


def test_arguments_are_checked(smoke):
    with pytest.raises(SystemExit):
        smoke.main(["--samples", "0"])
    with pytest.raises(SystemExit):
        smoke.main(["--only", "no such check"])
    with pytest.raises(ValueError, match="device must be one of auto, cpu, cuda"):
        smoke.pick_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch sees no CUDA device"):
            smoke.pick_device("cuda")
    assert smoke.pick_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
