"""The randomness tier: the library's verifiers pass every probe; each broken reference fails the probe built for it
and the report names the bug it models. Everything is enumerated exactly (no sampling, no flakes)."""
import pytest
import torch

from specdec_lib.conformance import laws
from specdec_lib.conformance.randomness import (
    BROKEN,
    PROBES,
    audit_randomness,
    keyed_by_position,
    keyed_by_step,
    library_verifier,
)
from specdec_lib.conformance.randomness_probes import (
    TOP,
    GridSource,
    Keys,
    Worlds,
    enumerate_round,
    grid_law,
    rand_cases,
    rounds_case,
)
from specdec_lib.conformance.randomness_refs import broken_verifier
from specdec_lib.markov.spec import DecoderSpec


@pytest.mark.parametrize("method", ["token", "block"])
def test_library_verify_blocks_passes_every_probe(method):
    report = audit_randomness(library_verifier(method), method=method, subject=f"sd.verify_blocks[{method}]")
    assert report.passed, str(report)
    assert [r.name for r in report.probes] == list(PROBES)
    assert all(r.measure <= 1e-12 for r in report.probes)


@pytest.mark.parametrize("method", ["token", "block"])
def test_library_verify_block_passes_the_coin_probes(method):
    # one block a call (sd.verify_block): the edges and the grid law, on a coarser grid to stay in budget
    report = audit_randomness(library_verifier(method, one_block=True), method=method, grid=4,
                              probes=("coin_zero", "coin_top", "grid_law"))
    assert report.passed, str(report)


@pytest.mark.parametrize("name", list(BROKEN))
def test_each_broken_reference_fails_its_probe_and_is_named(name):
    fn, convention, method = broken_verifier(name)
    probe = BROKEN[name][0]
    report = audit_randomness(fn, convention=convention, method=method, probes=(probe,), subject=name)
    assert report.failed() == (probe,), str(report)
    text = str(report)
    assert f"FAILED: {probe}" in text and "catches:" in text and report.probes[0].catches in text


def test_the_poison_probe_compares_against_zeroed_fresh_buffers(monkeypatch):
    """Memory a poisoned run filled with NaN can be handed out again to the next reference run (it flaked once under
    the generic kernels): a reference that read that NaN would agree with the poisoned run and hide a scratch read.
    Simulated here: with every torch.empty_like full of NaN, the plain reference sees no change, the zeroed one does."""
    from specdec_lib.conformance import randomness as rnd

    fn, convention, method = broken_verifier("empty_scratch")
    assert convention == "uniforms"
    fn = keyed_by_step(fn)  # as audit_randomness hands it to the probes
    real = torch.empty_like
    monkeypatch.setattr(torch, "empty_like", lambda *a, **kw: real(*a, **kw).fill_(float("nan")))

    def poisoned(*args):
        return rnd._poisoned(*args, method=method)

    assert rnd._same(fn, poisoned, 8, zero_fresh=False)[0] == 0  # negative control: the read is hidden
    assert rnd._same(fn, poisoned, 8, zero_fresh=True)[0] > 0


def test_controls_that_only_their_probe_catches():
    # float32 coins pass everything but the top edge; a reused coin everything but the grid law
    for name in ("float32_coins", "reused_coin", "position_keyed_block"):
        fn, convention, method = broken_verifier(name)
        report = audit_randomness(fn, convention=convention, method=method, probes=PROBES[:4])
        assert report.failed() == (BROKEN[name][0],), str(report)


def test_position_keys_are_harmless_for_the_token_rule_and_biased_for_block_verification():
    token = audit_randomness(keyed_by_position(library_verifier("token")), convention="keyed", probes=("rounds",))
    block = audit_randomness(keyed_by_position(library_verifier("block")), convention="keyed", method="block",
                             probes=("rounds",))
    assert token.passed and token.probes[0].measure < 1e-12
    # 0.0718: the exact TV (enumeration over the probe's coin grid, no sampling) between the two-round law of
    # position-keyed block verification and the product of its rounds' laws, recorded when the probe was written;
    # a regression pin of an exact number, so the tolerance is only print rounding
    assert not block.passed and block.probes[0].measure == pytest.approx(0.0718, abs=5e-4)


def test_grid_law_converges_to_the_exact_law():
    # the kit's own exact engine (laws.committed_block_law) against the grid law on a fine grid: within 1/m per coin
    for case in rand_cases():
        for method in ("token", "block"):
            exact = laws.committed_block_law(DecoderSpec(verifier=method), case.p, case.q)
            fine = grid_law(case, method, 1024)
            tv = 0.5 * sum(abs(exact.get(s, 0.0) - fine.get(s, 0.0)) for s in set(exact) | set(fine))
            assert tv < 3 * 3 / 1024, (case.name, method, tv)


def test_grid_law_refuses_a_threshold_on_the_grid():
    case = rounds_case()
    with pytest.raises(ValueError, match="sits on the grid"):
        grid_law(type(case)("on_grid", torch.tensor([[0.5, 0.5]] * 3, dtype=torch.float64),
                            torch.tensor([[1.0, 0.0]] * 2, dtype=torch.float64), ""), "token", 4)


def test_the_tape_sees_a_changed_draw_order():
    verify = library_verifier("token")
    p, q = torch.full((1, 3, 2), 0.5, dtype=torch.float64), torch.full((1, 2, 2), 0.5, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="draw order"):
        verify(p, q, torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 3, dtype=torch.float64),
               torch.zeros(1, dtype=torch.float64))


def test_enumeration_refuses_keys_that_depend_on_values():
    inner = keyed_by_step(library_verifier("token"))

    def greedy_reader(p, q, proposals, source, keys):
        first = source(keys.seed, keys.position[:, None], 2)[:, 0]
        extra = torch.where(first > 0, keys.position + 1, keys.position)  # a second key only when the first is > 0
        source(keys.seed, extra[:, None], 2)  # (the discovery run reads every coin as 0, so it never sees that key)
        return inner(p, q, proposals, source, keys)

    with pytest.raises(ValueError, match="depend on the values"):
        enumerate_round(greedy_reader, rand_cases()[0], Worlds.one(), lambda n, _: Keys.of(n, seed=1), 2)


def test_grid_source_keeps_a_keys_value_across_calls():
    src = GridSource(torch.tensor([[3, 1, 2] + [0] * 13]), 4)
    seed, c = torch.tensor([5]), torch.tensor([[7, 8]])
    assert src(seed, c, 0).tolist() == [[0.75, 0.25]]
    assert src(seed, torch.tensor([[8, 9]]), 0).tolist() == [[0.25, 0.5]]
    assert TOP < 1.0 and TOP + 2 ** -53 == 1.0


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="convention must be one of"):
        audit_randomness(library_verifier(), convention="probs")
    with pytest.raises(ValueError, match="probes must be one of"):
        audit_randomness(library_verifier(), probes=("coin_one",))
    with pytest.raises(TypeError, match="probes must be a tuple of probe names"):
        audit_randomness(library_verifier(), probes="batch")
    with pytest.raises(TypeError, match="fn must be callable"):
        audit_randomness(3)
