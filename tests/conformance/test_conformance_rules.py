"""The kit's rules are DecoderSpec values read for one block: validation of that reading, the registry's specs by
name, and every known verifier's exact block law pinned to the numbers the kit computed before its rules became
specs (fingerprints of each law, recorded from the former `Rule`-based law, compared to 1e-12)."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from kit_support import sampled_law

import specdec_lib as sd
from specdec_lib.conformance import (
    BLOCK_VERIFIERS,
    FIELD_GUIDE,
    battery,
    block_rule,
    committed_block_law,
    complete,
    known_verifiers,
    rule_verifier,
)
from specdec_lib.markov.registry import MODES
from specdec_lib.markov.spec import DecoderSpec


def _phi1(t: tuple) -> float:
    return sum((x + 1) * 3.0 ** -i for i, x in enumerate(t)) + 0.5 * len(t)


def _phi2(t: tuple) -> float:
    return sum((x + 1) ** 2 * 7.0 ** -i for i, x in enumerate(t)) - 0.01 * len(t) ** 2


# (verifier, case, outcomes, E phi1(t), E phi2(t), sum_i completed[i] (i mod 7 + 1)), from the Rule-based kit
BEFORE = [
    ("correct", "post_pair", 27, 2.3755103877342107, 4.55382134777932, 2.176737394534543),
    ("correct", "reused_uniform", 11, 2.9759999997044604, 4.627699999914506, 3.9499999999999997),
    ("correct", "likely_proposal", 5, 2.5500000013038515, 2.669928571855117, 2.5),
    ("correct", "wide_residual", 21, 3.6007500000259314, 7.115627857169506, 3.6800000000000015),
    ("correct", "forbidden", 14, 2.6999999898009834, 2.9137142759062806, 4.050000014901162),
    ("correct", "positions_differ", 31, 3.3822222374545206, 2.968857149575437, 2.4709999999999996),
    ("correct", "binary_k3", 23, 2.8502000282715314, 1.585320014912699, 4.4247999792873856),
    ("correct", "binary_k4", 47, 3.990826660218416, 3.170005925332416, 3.25576002039373),
    ("softmax_residual", "post_pair", 30, 3.4055813975504607, 9.704176396860571, 3.6328458555476137),
    ("softmax_residual", "reused_uniform", 12, 2.975999999704461, 4.489875369713187, 4.0464772411409236),
    ("softmax_residual", "likely_proposal", 6, 2.374787656949169, 2.1442915387910695, 2.1495753112906346),
    ("softmax_residual", "wide_residual", 25, 4.32829371600719, 10.7533464370758, 3.956466612072879),
    ("softmax_residual", "forbidden", 17, 2.888448078836412, 3.8660518779879487, 3.9927855882995895),
    ("softmax_residual", "positions_differ", 39, 3.51880869364187, 3.559549227246837, 2.874550895706342),
    ("softmax_residual", "binary_k3", 30, 2.956817936263452, 1.934837313457738, 4.131402399001768),
    ("softmax_residual", "binary_k4", 62, 3.9072714089911025, 2.9124632680641183, 3.4573416043737755),
    ("target_on_reject", "post_pair", 30, 2.5807496515902715, 5.5413357821399165, 2.446517161316757),
    ("target_on_reject", "reused_uniform", 12, 2.9759999997044604, 4.382699999756181, 4.121500000110828),
    ("target_on_reject", "likely_proposal", 6, 2.3250000019557775, 1.9949285738108946, 2.050000001303852),
    ("target_on_reject", "wide_residual", 24, 4.080150000005188, 9.19302785707961, 3.951659999988244),
    ("target_on_reject", "forbidden", 14, 2.679999990198348, 2.870857133900633, 4.0800000143051145),
    ("target_on_reject", "positions_differ", 39, 3.426222236024009, 3.1591428579688063, 2.6009999965548527),
    ("target_on_reject", "binary_k3", 30, 2.8727333615207558, 1.6609200150889585, 4.248999978745283),
    ("target_on_reject", "binary_k4", 62, 3.929973328492907, 2.9933869209178003, 3.379872018194675),
    ("reused_uniform", "post_pair", 27, 2.41154853208731, 4.734012069544814, 2.1887501093189092),
    ("reused_uniform", "reused_uniform", 10, 3.4660000000211104, 6.587700001181104, 5.077000000728295),
    ("reused_uniform", "likely_proposal", 5, 2.5500000013038515, 2.669928571855117, 2.5),
    ("reused_uniform", "wide_residual", 21, 3.6007500000259314, 7.115627857169506, 3.6800000000000015),
    ("reused_uniform", "forbidden", 14, 2.6999999898009834, 2.9137142759062806, 4.050000014901162),
    ("reused_uniform", "positions_differ", 31, 3.3822222374545206, 2.968857149575437, 2.4709999999999996),
    ("reused_uniform", "binary_k3", 23, 2.8502000282715314, 1.585320014912699, 4.4247999792873856),
    ("reused_uniform", "binary_k4", 47, 3.990826660218416, 3.170005925332416, 3.25576002039373),
    ("single_token_residual", "post_pair", 30, 2.569148088628792, 5.5089415244619335, 2.3937130492263865),
    ("single_token_residual", "reused_uniform", 11, 2.9759999997044604, 4.627699999914506, 3.9499999999999997),
    ("single_token_residual", "likely_proposal", 5, 2.5500000013038515, 2.669928571855117, 2.5),
    ("single_token_residual", "wide_residual", 24, 4.000350000012102, 8.847227857109575, 3.906439999992163),
    ("single_token_residual", "forbidden", 14, 2.679999990198348, 2.870857133900633, 4.0800000143051145),
    ("single_token_residual", "positions_differ", 39, 3.406666681104236, 3.0745714320161976, 2.5432222203082513),
    ("single_token_residual", "binary_k3", 23, 2.8502000282715314, 1.585320014912699, 4.4247999792873856),
    ("single_token_residual", "binary_k4", 47, 3.990826660218416, 3.170005925332416, 3.25576002039373),
    ("off_by_one", "post_pair", 27, 2.3755103877342107, 4.55382134777932, 2.176737394534543),
    ("off_by_one", "reused_uniform", 11, 1.902666666371127, 2.1196999999145048, 2.06),
    ("off_by_one", "likely_proposal", 5, 2.5500000013038515, 2.669928571855117, 2.5),
    ("off_by_one", "wide_residual", 27, 4.401500000051862, 11.916398571481867, 3.7600000000000016),
    ("off_by_one", "forbidden", 14, 4.471999984724654, 7.965999935961197, 4.625999991357328),
    ("off_by_one", "positions_differ", 31, 3.7822222170233726, 7.923714283930404, 4.431000006258489),
    ("off_by_one", "binary_k3", 23, 3.426933338183827, 3.511572246075594, 3.960800002789497),
    ("off_by_one", "binary_k4", 47, 2.9777229733462525, 1.808087572448443, 4.212540008946061),
    ("bonus_from_draft", "post_pair", 27, 2.440913035376716, 4.665578409953676, 2.091061428925437),
    ("bonus_from_draft", "reused_uniform", 11, 3.0949999996305757, 4.766857142662178, 4.279175000653882),
    ("bonus_from_draft", "likely_proposal", 5, 2.4675000013473136, 2.563857143339568, 2.252500000130385),
    ("bonus_from_draft", "wide_residual", 21, 3.600750000025932, 7.001532857176106, 3.866199999983864),
    ("bonus_from_draft", "forbidden", 18, 2.697777768009239, 2.9108571333349973, 4.086000013768673),
    ("bonus_from_draft", "positions_differ", 31, 3.4106666829586025, 2.9975918443872, 2.9440000066161147),
    ("bonus_from_draft", "binary_k3", 23, 2.8512889170240476, 1.585577157737637, 4.391199983741344),
    ("bonus_from_draft", "binary_k4", 47, 3.9863466602830537, 3.1695525142602397, 3.4828400068205596),
    ("mismatched_q", "post_pair", 27, 2.3755103877342107, 4.55382134777932, 2.176737394534543),
    ("mismatched_q", "reused_uniform", 11, 2.9759999997044604, 4.627699999914506, 3.9499999999999997),
    ("mismatched_q", "likely_proposal", 5, 2.5500000013038515, 2.669928571855117, 2.5),
    ("mismatched_q", "wide_residual", 21, 3.6007500000259314, 7.115627857169506, 3.6800000000000015),
    ("mismatched_q", "forbidden", 14, 2.9666666332218385, 3.742285638061106, 3.566000055193901),
    ("mismatched_q", "positions_differ", 31, 3.114320999253925, 2.416412698635585, 2.267444441852747),
    ("mismatched_q", "binary_k3", 23, 2.7518772708556125, 1.449081915317102, 4.399104742096895),
    ("mismatched_q", "binary_k4", 47, 3.710606015269797, 3.487046037688695, 3.0010410926518984),
    ("rejected_kept", "post_pair", 25, 4.410198860509618, 9.742052953354175, 4.720247795565737),
    ("rejected_kept", "reused_uniform", 9, 3.547666666740552, 4.472999999814534, 4.63600000044331),
    ("rejected_kept", "likely_proposal", 4, 2.625000001086543, 1.5635714322035867, 1.8250000019557775),
    ("rejected_kept", "wide_residual", 21, 4.733666666678192, 10.630714285854234, 4.081000000034578),
    ("rejected_kept", "forbidden", 14, 4.233333337439431, 6.808163303301042, 3.9199999922513955),
    ("rejected_kept", "positions_differ", 29, 3.9022222223546765, 3.964244874065019, 3.3949999758005145),
    ("rejected_kept", "binary_k3", 19, 3.608903709533811, 2.4346714122329294, 3.945400001062452),
    ("rejected_kept", "binary_k4", 39, 4.198026670850413, 2.688336793587083, 4.142440011562704),
    ("first_unverified", "post_pair", 25, 4.478611948461637, 9.883126443977117, 4.701593972583421),
    ("first_unverified", "reused_uniform", 9, 3.4333333333333345, 4.269999999683351, 4.293000000221656),
    ("first_unverified", "likely_proposal", 4, 2.550000001303851, 1.467142861054412, 1.6000000026077033),
    ("first_unverified", "wide_residual", 25, 5.0, 11.20142857154382, 4.132399999967729),
    ("first_unverified", "forbidden", 18, 4.650000009520186, 7.449285744293308, 3.9599999764561655),
    ("first_unverified", "positions_differ", 30, 4.07777777314186, 4.288571396001747, 2.8819999877512457),
    ("first_unverified", "binary_k3", 22, 3.6860000043930827, 2.611885695905101, 4.523199971103668),
    ("first_unverified", "binary_k4", 46, 4.238533306817436, 2.5900074498787764, 3.5580000047236693),
    ("tempting", "post_pair", 30, 2.2814898780766324, 4.593957395844082, 2.2358362978389383),
    ("tempting", "reused_uniform", 12, 2.964333333407219, 4.37807499990263, 4.122375000083121),
    ("tempting", "likely_proposal", 6, 2.275000000651926, 1.978571430527206, 2.050000001303852),
    ("tempting", "wide_residual", 24, 3.1595999999861712, 7.189885714225786, 3.770439999992164),
    ("tempting", "forbidden", 14, 2.3107999948567817, 2.6969285663301843, 4.052100015074013),
    ("tempting", "positions_differ", 39, 2.6439288962237035, 2.3349599976902353, 2.2827119952640533),
    ("tempting", "binary_k3", 30, 2.477713343460886, 1.4910189058892231, 4.382003179330707),
    ("tempting", "binary_k4", 62, 2.9855945913896647, 3.157211950931616, 3.23632056558947),
    ("match_acceptance", "post_pair", 30, 2.2540991971589146, 4.4846795876228365, 2.1767373945345425),
    ("match_acceptance", "reused_uniform", 12, 2.964333333407219, 4.624325000021375, 3.9500000000000006),
    ("match_acceptance", "likely_proposal", 6, 2.5, 2.653571428571429, 2.5),
    ("match_acceptance", "wide_residual", 24, 3.0000000000000004, 6.498285714285717, 3.6800000000000015),
    ("match_acceptance", "forbidden", 14, 2.3121999949720173, 2.6999285665771184, 4.05000001490116),
    ("match_acceptance", "positions_differ", 39, 2.7232888978640233, 2.656057147476503, 2.471000000000001),
    ("match_acceptance", "binary_k3", 30, 2.493006678544244, 1.5435274823692704, 4.424799979287386),
    ("match_acceptance", "binary_k4", 62, 2.9982121908300865, 3.1719075349942654, 3.25576002039373),
]


# what came after the Rule-based kit, so has no fingerprint: the block verifiers and the block paper's toy
NEW_CASES = {"block_gain"}


def test_every_known_law_is_unchanged_from_the_rule_based_kit():
    laws = {(kv.name, c.name): (committed_block_law(kv.spec, c.p_rows, c.q_rows), c) for kv in known_verifiers()
            for c in battery()}
    old = {key for key in laws if key[0] not in BLOCK_VERIFIERS and key[1] not in NEW_CASES}
    assert old == {(name, case) for name, case, *_ in BEFORE} and len(old) == 12 * 8
    for name, case, outcomes, e1, e2, e3 in BEFORE:
        law, c = laws[(name, case)]
        completed = complete(law, c.p_rows).reshape(-1).tolist()
        got = (sum(m * _phi1(t) for t, m in law.items()), sum(m * _phi2(t) for t, m in law.items()),
               sum(x * (i % 7 + 1) for i, x in enumerate(completed)))
        assert len(law) == outcomes, (name, case)
        assert max(abs(g - w) for g, w in zip(got, (e1, e2, e3))) < 1e-12, (name, case, got)


def test_the_field_guide_verifiers_are_the_registry_specs_by_name():
    specs = {kv.name: kv.spec for kv in known_verifiers()}
    for name in ("correct", *FIELD_GUIDE, *BLOCK_VERIFIERS):
        assert specs[name] is MODES[name].spec
    assert specs["match_acceptance"] == MODES["match_acceptance"].spec
    assert all(isinstance(s, DecoderSpec) for s in specs.values())


@pytest.mark.parametrize("change", [dict(draft_context="own_last_proposal"), dict(proposer="ngram"),
                                    dict(schedule="hf"), dict(stop="coin"), dict(phantom=True),
                                    dict(policy=(("top_p", 0.8),)), dict(policy_on_target=False),
                                    dict(propose="argmax_Q")], ids=lambda d: next(iter(d)))
def test_a_spec_a_one_block_verifier_cannot_follow_raises_naming_the_field(change):
    spec = dataclasses.replace(DecoderSpec(), **change)
    field = next(iter(change))
    with pytest.raises(ValueError, match=f"DecoderSpec.{field}="):
        block_rule(spec)
    with pytest.raises(ValueError, match=f"DecoderSpec.{field}="):
        rule_verifier(spec)
    c = battery()[0]
    with pytest.raises(ValueError, match=f"DecoderSpec.{field}="):
        committed_block_law(spec, c.p_rows, c.q_rows)


def test_typos_and_non_specs_raise():
    with pytest.raises(ValueError, match="judge"):
        DecoderSpec(judge="late")
    with pytest.raises(ValueError, match="residual"):
        DecoderSpec(residual="normalized")
    with pytest.raises(TypeError, match="spec must be a DecoderSpec"):
        block_rule({"judge": "aligned"})


def test_mismatched_q_reads_the_wrong_slots_draft_row():
    """ratio="Q_bad" in one block: proposal j is judged with q_{j-1} (q_k for the first), proposals still from q_j."""
    c = next(c for c in battery() if c.name == "positions_differ")
    rolled = dataclasses.replace(c, q_rows=c.q_rows.roll(1, dims=0))
    bug = committed_block_law(MODES["mismatched_q"].spec, c.p_rows, c.q_rows)
    assert bug != committed_block_law(DecoderSpec(), c.p_rows, c.q_rows)
    # the proposals' own law is not rolled
    assert committed_block_law(DecoderSpec(), rolled.p_rows, rolled.q_rows) != bug


def test_a_new_spec_value_reaches_the_kit_through_semantics():
    """Medusa's typical acceptance (a registry spec of chapter 07) is a one-block rule too: its law is a law, its
    sampler lands on it, and the kit needs no entry of its own for it."""
    spec = MODES["typical_acceptance"].spec
    g = torch.Generator().manual_seed(2)
    for case in battery():
        law = committed_block_law(spec, case.p_rows, case.q_rows)
        assert abs(sum(law.values()) - 1) < 1e-12
        n = 4000
        exact = complete(law, case.p_rows)
        assert sd.total_variation(sampled_law(rule_verifier(spec), case, n, g), exact) <= sd.tv_noise_bound(exact, n)
