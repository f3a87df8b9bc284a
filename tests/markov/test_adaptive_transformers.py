"""transformers' assisted generation as 5.24.0 runs it (markov/hf_assisted.py): the recorded defaults against the
installed package, the ROC re-tuning by hand, where the re-tuned threshold settles, and a sampled text that gets there.
"""
import inspect
import math

import pytest
import torch

import specdec_lib as sd
from specdec_lib.markov import hf_assisted

CH = sd.reference_chain()
C_D, C_V = 0.15, 1.0


def test_the_recorded_defaults_are_the_installed_transformers():
    transformers = pytest.importorskip("transformers")
    from transformers.generation import candidate_generator, stopping_criteria
    from transformers.generation.configuration_utils import GenerationConfig

    assert transformers.__version__ == "5.24.0" and "5.24.0" in sd.markov.TRANSFORMERS.source
    defaults = GenerationConfig._get_default_generation_params()
    assert defaults["num_assistant_tokens"] == sd.markov.TRANSFORMERS.num_assistant_tokens == 20
    assert defaults["num_assistant_tokens_schedule"] == sd.markov.TRANSFORMERS.schedule == "constant"
    assert defaults["assistant_confidence_threshold"] == sd.markov.TRANSFORMERS.confidence == 0.4
    update = inspect.getsource(candidate_generator.AssistedCandidateGenerator.update_candidate_strategy)
    hf = sd.markov.TRANSFORMERS
    for line in ("self.num_assistant_tokens += 2", "max(1, self.num_assistant_tokens - 1)",
                 f"costs = fpr + {hf.fnr_weight:g} * fnr", f"len(self.probs) > {hf.min_records}",
                 "{0, 1}.issubset(self.matches)", "self.matches.append(0)", "is_sklearn_available()"):
        assert line in update, line
    stop = inspect.getsource(stopping_criteria.ConfidenceCriteria.__call__)
    assert "p < self.assistant_confidence_threshold" in stop  # a token below the threshold ends the draft, kept


def test_roc_threshold_by_hand():
    # scores 0.9, 0.5, 0.2 seen accepted 5, 3, 1 times and rejected 0, 2, 4 times (9 positives, 6 negatives):
    # threshold inf: fpr 0, fnr 1, cost 3; 0.9: 0 + 3 * 4/9 = 1.333; 0.5: 2/6 + 3 * 1/9 = 0.667; 0.2: 1 + 0 = 1
    assert hf_assisted.roc_threshold([0.2, 0.9, 0.5], [1, 5, 3], [4, 0, 2]) == 0.5
    assert hf_assisted.roc_threshold([0.2, 0.9, 0.5], [1, 5, 3], [4, 0, 2], fnr_weight=0.1) == 0.9  # fpr dominates
    # equal costs: the first, highest threshold wins (np.argmin over sklearn's descending thresholds)
    assert hf_assisted.roc_threshold([0.8, 0.3], [1, 1], [1, 1], fnr_weight=1.0) == math.inf
    with pytest.raises(ValueError, match="at least one recorded token"):
        hf_assisted.roc_threshold([0.5], [3], [0])


def test_roc_threshold_is_sklearns_choice():
    sklearn = pytest.importorskip("sklearn.metrics")
    import numpy as np

    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        scores = sorted(set(torch.rand(6, generator=g).mul(100).round().div(100).tolist()))
        pos = torch.randint(0, 5, (len(scores),), generator=g).tolist()
        neg = torch.randint(0, 5, (len(scores),), generator=g).tolist()
        if not sum(pos) or not sum(neg):
            continue
        labels = [1] * sum(pos) + [0] * sum(neg)
        probs = [s for s, c in zip(scores, pos) for _ in range(c)] + [s for s, c in zip(scores, neg) for _ in range(c)]
        fpr, tpr, thresholds = sklearn.roc_curve(labels, probs)
        want = float(thresholds[np.argmin(fpr + 3 * (1 - tpr))])
        assert hf_assisted.roc_threshold(scores, pos, neg) == want


def test_assisted_text_retunes_as_transformers_does():
    # replay a sampled text's rounds through transformers' own update_candidate_strategy (it needs scikit-learn)
    pytest.importorskip("sklearn")
    from transformers.generation.candidate_generator import AssistedCandidateGenerator
    from transformers.generation.configuration_utils import GenerationConfig

    text = sd.markov.assisted_text(CH.P, CH.Q, c_d=C_D, c_v=C_V, rounds=300, generator=torch.Generator().manual_seed(2))
    gen = object.__new__(AssistedCandidateGenerator)  # no models: only the strategy's state is needed
    gen.assistant_generation_config = GenerationConfig(assistant_confidence_threshold=0.4,
                                                       num_assistant_tokens_schedule="constant")
    gen.generation_config = GenerationConfig(assistant_confidence_threshold=0.4)
    gen.probs, gen.matches = [], []
    for n, q, t in zip(text.tokens, text.draft_q, text.thresholds):
        gen.probs.extend(q)  # what _generate_candidates records
        gen.update_candidate_strategy(None, torch.zeros(1, len(q) + 1, 5), n - 1)
        assert float(gen.assistant_generation_config.assistant_confidence_threshold) == pytest.approx(t, abs=1e-12)
    assert len(set(text.thresholds)) > 2  # negative control: the threshold really moved


def test_the_threshold_settles_at_a_fixed_point():
    settled = sd.markov.settled_threshold(CH.P, CH.Q, c_d=C_D, c_v=C_V)
    assert settled.path[0] == 0.4 and settled.path[-1] == settled.threshold
    assert settled.threshold in set(CH.Q.double().div(CH.Q.double().sum(-1, keepdim=True)).flatten().tolist())
    again = sd.markov.settled_threshold(CH.P, CH.Q, c_d=C_D, c_v=C_V, start=settled.threshold)
    assert again.path == (settled.threshold,)  # a fixed point maps to itself at once
    frozen = sd.policy_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, policy="confidence", confidence=settled.threshold, k=20)
    assert settled.result.speedup == pytest.approx(frozen.speedup, abs=1e-12)


@pytest.mark.stat
def test_a_sampled_text_retunes_to_the_settled_threshold():
    settled = sd.markov.settled_threshold(CH.P, CH.Q, c_d=C_D, c_v=C_V)
    frozen = sd.policy_speedup(CH.P, CH.Q, c_d=C_D, c_v=C_V, policy="confidence", confidence=0.4, k=20)
    texts = [sd.markov.assisted_text(CH.P, CH.Q, c_d=C_D, c_v=C_V, rounds=1000,
                              generator=torch.Generator().manual_seed(80 + i)) for i in range(20)]
    assert sum(t.thresholds[-1] == settled.threshold for t in texts) >= 18  # nearly every text has settled there
    values = [t.speedup for t in texts]
    mean = sum(values) / len(values)
    sd_ = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    # 5 standard errors estimated from 20 independent texts, plus 0.03 for the rounds before a text settles
    noise = 5 * sd_ / math.sqrt(len(values)) + 0.03
    assert abs(mean - settled.result.speedup) < noise
    assert abs(mean - frozen.speedup) > noise  # negative control: the frozen threshold's speedup is far away
    untuned = sd.markov.assisted_text(CH.P, CH.Q, c_d=C_D, c_v=C_V, rounds=200,
                               settings=hf_assisted.AssistedSettings(retune=False),
                               generator=torch.Generator().manual_seed(1))
    assert set(untuned.thresholds) == {0.4}  # without scikit-learn transformers keeps 0.4


def test_assisted_text_validation():
    with pytest.raises(ValueError, match="schedule must be one of 'constant', 'heuristic'"):
        hf_assisted.AssistedSettings(schedule="dynamic")
    with pytest.raises(ValueError, match="k must be >= 1"):
        hf_assisted.AssistedSettings(k=0)
    with pytest.raises(TypeError, match="settings must be an AssistedSettings, got dict"):
        sd.markov.assisted_text(CH.P, CH.Q, c_d=C_D, c_v=C_V, rounds=10, settings={"k": 3}, generator=None)
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        sd.markov.assisted_text(CH.P, CH.Q, c_d=C_D, c_v=C_V, rounds=0, generator=None)
