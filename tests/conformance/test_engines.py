"""conformance.engines on an engine made of the kit's own loops: its plain and correct speculative modes pass,
a mode that counts the penalties from the round's start fails (the negative control), the same-seed count tells a
sample-and-match mode from a rejection one, and the interface's contract is checked."""
import pytest
import torch

from specdec_lib.conformance.engines import EngineChain, audit_engine, engine_cases, same_seed, with_settings
from specdec_lib.conformance.generation_battery import DRAFT, TARGET
from specdec_lib.surface import grammar as grammars
from specdec_lib.surface.loop import LoopSpec, generate, speculate

STALE = LoopSpec(penalties="round_start")  # a shipped bug: every row of a round counts the text before the round


class KitEngine:
    """The kit's loops behind the Engine interface: "plain" (generate), "spec" (speculate, correct), "stale"
    (speculate with STALE), "match" (sample-and-match: the target's own draw, kept where a draft equals it)."""

    name, version, modes, vocab = "kit", "test", ("plain", "spec", "stale", "match"), 4

    def __init__(self):
        self.calls = 0

    def logits(self, context):
        self.calls += 1
        return TARGET(context)

    def unsupported(self, settings, mode):
        return "no grammar here" if settings.grammar is not None else None

    def generate(self, mode, prompt, settings, k, seeds):
        out = []
        for seed in seeds:
            g = torch.Generator().manual_seed(seed)
            if mode in ("plain", "match"):  # sample-and-match emits exactly the target's own draws
                o = generate(TARGET, prompt, settings, generator=g)
            else:
                o = speculate(TARGET, DRAFT, prompt, settings, k=k, spec=LoopSpec() if mode == "spec" else STALE,
                              generator=g)
            out.append((o.tokens, o.logprobs, o.stop))
        return out

    def close(self):
        pass


def _cases(engine, names=("plain", "repetition", "frequency", "eos")):
    cases = engine_cases(EngineChain("kit target", engine), prompt=(1,), eos=3)
    return [c for c in cases if c.name in names]


def test_plain_and_the_correct_loop_pass_and_a_stale_penalty_fails():
    engine = KitEngine()
    cases = _cases(engine)
    for mode in ("plain", "spec"):
        report, left = audit_engine(engine, mode, cases=cases)
        assert report.passed and left == {}, str(report)
        assert report.subject == f"kit test ({mode})"
        for c in report.cases:  # the law table: every sample counted once, plain's masses whole, the TV its own
            assert sum(seen for _, _, seen in c.law) == c.num_samples
            assert abs(sum(mass for _, mass, _ in c.law) - 1) < 1e-12
            assert abs(0.5 * sum(abs(seen / c.num_samples - mass) for _, mass, seen in c.law) - c.tv) < 1e-12
    report, _ = audit_engine(engine, "stale", cases=cases)  # negative control
    failed = {c.name for c in report.cases if not c.passed}
    assert not report.passed and {"repetition", "frequency"} <= failed and "plain" not in failed


def test_the_chain_reads_each_context_once_and_left_out_cases_are_named():
    engine = KitEngine()
    chain = EngineChain("kit target", engine)
    assert torch.equal(chain((1, 2)), TARGET((1, 2))) and torch.equal(chain((1, 2)), TARGET((1, 2)))
    assert engine.calls == 1
    grammar = with_settings(_cases(engine, ("plain",))[0], grammar=None, top_k=2)
    assert grammar.settings.top_k == 2 and grammar.settings.max_new_tokens == 2
    banned = with_settings(grammar, grammar=grammars.no_immediate_repeat(4))
    report, left = audit_engine(engine, "plain", cases=[grammar, banned], num_samples=200)
    assert [c.name for c in report.cases] == ["plain"] and left == {"plain": "no grammar here"}


def test_same_seed_tells_sample_and_match_from_rejection():
    engine = KitEngine()
    case = _cases(engine, ("plain",))[0]
    match = same_seed(engine, "match", case, n=60)
    assert match.all_equal and match.equal == match.n == 60 and match.first_difference is None
    rejection = same_seed(engine, "spec", case, n=60)  # another coin sequence: most draws differ
    assert not rejection.all_equal and rejection.first_difference[0] >= 0


def test_bad_engines_and_modes_raise():
    engine = KitEngine()
    with pytest.raises(ValueError, match="mode must be one of 'plain', 'spec', 'stale', 'match'"):
        audit_engine(engine, "fast", cases=_cases(engine))
    with pytest.raises(TypeError, match="engine must follow the Engine interface"):
        audit_engine(object(), "plain", cases=_cases(engine))
    with pytest.raises(ValueError, match="cases must be given"):
        audit_engine(engine, "plain")
    only_grammar = [with_settings(c, grammar=grammars.no_immediate_repeat(4)) for c in _cases(engine, ("plain",))]
    with pytest.raises(ValueError, match="serves none of the cases"):
        audit_engine(engine, "plain", cases=only_grammar)

    class Wrong(KitEngine):
        def logits(self, context):
            return torch.tensor([0.0, float("nan"), 0.0, 0.0])

    with pytest.raises(ValueError, match="must be 4 finite floats"):
        EngineChain("wrong", Wrong())((1,))
