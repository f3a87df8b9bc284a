"""surface.loop: generate and speculate sample the exact laws, report plain's logprobs, stop at EOS and the cap.

Sampled tests (@pytest.mark.stat) compare n seeded samples with the exact law: the empirical TV of n exact samples
exceeds sd.tv_noise_bound(law, n) with probability below 1e-6 (E[TV] <= 1/2 sum sqrt(p (1 - p) / n), plus the
McDiarmid deviation sqrt(ln(1e6) / 2n)), so a correct sampler fails by chance less than once in a million runs.
The negative control is a shipped bug (processors="bonus_only", vLLM #42744) whose exact TV to plain is far above
that bound at the same n: the same test must fail it.
"""
from collections import Counter

import pytest
import torch
from surface_support import DRAFT, EOS, PROMPT, TARGET, V, single_thread

import specdec_lib as sd
from specdec_lib.surface import (
    LoopSpec,
    Output,
    Settings,
    alternating,
    generate,
    law_tv,
    logprob,
    plain_law,
    speculate,
    speculative_law,
)

# a grammar, EOS and a cap of 3 leave 28 texts: the bound is 0.25 at N = 300, and the control's exact TV is 0.64
CASE = Settings(repetition_penalty=2.0, logit_bias=((1, -3.0),), grammar=alternating(V), eos=EOS, max_new_tokens=3)
N = 300
one_thread = pytest.fixture(autouse=True, scope="module")(single_thread)


def empirical_tv(outputs, law) -> tuple[float, float]:
    """(TV of the outputs' empirical law to law, the noise bound at this n); texts outside the law count fully."""
    n = len(outputs)
    counts = Counter(out.tokens for out in outputs)
    tv = law_tv({t: c / n for t, c in counts.items()}, law)
    return tv, sd.tv_noise_bound(torch.tensor(list(law.values()), dtype=torch.float64), n)


def run(fn, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [fn(g) for _ in range(n)]


PLAIN = plain_law(TARGET, PROMPT, CASE)


@pytest.mark.stat
def test_generate_samples_the_plain_law():
    tv, bound = empirical_tv(run(lambda g: generate(TARGET, PROMPT, CASE, generator=g), N), PLAIN)
    assert tv < bound


@pytest.mark.stat
@pytest.mark.parametrize("verifier, k", [("token", 2), ("block", 3)])
def test_speculate_samples_the_plain_law_and_a_shipped_bug_fails_the_same_test(verifier, k):
    outs = run(lambda g: speculate(TARGET, DRAFT, PROMPT, CASE, k=k, spec=LoopSpec(verifier=verifier), generator=g), N)
    tv, bound = empirical_tv(outs, PLAIN)
    assert tv < bound
    bug = LoopSpec(verifier=verifier, processors="bonus_only")
    exact_gap = law_tv(speculative_law(TARGET, DRAFT, PROMPT, CASE, k=k, spec=bug), PLAIN)
    assert exact_gap > 2 * bound  # the control has power at this n: its expected empirical TV is >= exact_gap
    outs = run(lambda g: speculate(TARGET, DRAFT, PROMPT, CASE, k=k, spec=bug, generator=g), N, seed=1)
    assert empirical_tv(outs, PLAIN)[0] > bound


@pytest.mark.stat
def test_a_variant_samples_its_own_exact_law():
    spec = LoopSpec(penalties="last_commit", eos="run_past")
    law = speculative_law(TARGET, DRAFT, PROMPT, CASE, k=2, spec=spec)
    tv, bound = empirical_tv(run(lambda g: speculate(TARGET, DRAFT, PROMPT, CASE, k=2, spec=spec, generator=g), N), law)
    assert tv < bound and law_tv(law, PLAIN) > 0.02  # its own law, not plain's


def test_reported_logprobs_are_plains_values_and_stop_says_why():
    g = torch.Generator().manual_seed(5)
    for _ in range(40):
        for out in (generate(TARGET, PROMPT, CASE, generator=g),
                    speculate(TARGET, DRAFT, PROMPT, CASE, k=3, generator=g)):
            assert isinstance(out, Output) and len(out.logprobs) == len(out.tokens) <= CASE.max_new_tokens
            want = [logprob(TARGET, PROMPT, out.tokens[:j], t, CASE) for j, t in enumerate(out.tokens)]
            assert list(out.logprobs) == want  # the same computation: equal, not close
            assert EOS not in out.tokens[:-1]
            assert out.stop == ("eos" if out.tokens[-1] == EOS else "length")
            assert out.stop == "eos" or len(out.tokens) == CASE.max_new_tokens


def test_an_eos_accepted_mid_block_ends_the_text():
    # draft = target: every draft is accepted, so an EOS lands mid-block whenever the draft proposes one
    s = Settings(logit_bias=((EOS, 1.0),), eos=EOS, max_new_tokens=4)
    g = torch.Generator().manual_seed(0)
    outs = [speculate(TARGET, TARGET, PROMPT, s, k=3, generator=g) for _ in range(60)]
    early = [o for o in outs if o.stop == "eos" and len(o.tokens) < 4]
    assert early and all(o.tokens[-1] == EOS for o in early)
    past = [speculate(TARGET, TARGET, PROMPT, s, k=3, spec=LoopSpec(eos="run_past"), generator=g) for _ in range(60)]
    assert any(EOS in o.tokens[:-1] for o in past)  # the bug keeps what follows an accepted EOS


def test_max_new_tokens_cuts_a_block():
    s = Settings(max_new_tokens=2)
    g = torch.Generator().manual_seed(0)
    for k in (1, 3, 5):
        out = speculate(TARGET, TARGET, PROMPT, s, k=k, generator=g)
        assert len(out.tokens) == 2 and out.stop == "length"


def test_greedy_speculation_is_greedy_decoding():
    s = Settings(temperature=0.0, repetition_penalty=2.0, eos=EOS, max_new_tokens=4)
    g = torch.Generator().manual_seed(0)
    plain = generate(TARGET, PROMPT, s, generator=g)
    assert [speculate(TARGET, DRAFT, PROMPT, s, k=k, generator=g).tokens for k in (1, 2, 3)] == [plain.tokens] * 3


def test_bad_arguments():
    g = torch.Generator()
    with pytest.raises(ValueError, match="k must be >= 1"):
        speculate(TARGET, DRAFT, PROMPT, CASE, k=0, generator=g)
    with pytest.raises(TypeError, match="spec must be a LoopSpec"):
        speculate(TARGET, DRAFT, PROMPT, CASE, k=1, spec={"eos": "run_past"}, generator=g)
    with pytest.raises(TypeError, match="settings must be a Settings"):
        generate(TARGET, PROMPT, None, generator=g)
    with pytest.raises(TypeError, match="generator"):
        generate(TARGET, PROMPT, CASE, generator=0)
    with pytest.raises(ValueError, match="prompt\\[1\\] must be >= 0"):
        generate(TARGET, (0, -1), CASE, generator=g)
