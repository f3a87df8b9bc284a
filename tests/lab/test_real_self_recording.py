"""The reader of `make measure-real-self`'s JSON: a round trip, each validation with its negative control, the
lookups, and the committed recording's own promises (every greedy run equal to plain, predictions that follow from
the stored terms, the same target files as the real-pair recording)."""
import dataclasses
import json

import pytest

from specdec_lib.lab import real_recording as rr
from specdec_lib.lab import real_self_recording as rs


def synthetic(*, tiny: bool = True) -> dict:
    """A small recording as measure_real_self writes it: two tasks, exits at 7 and 14 of 28 both ways, lookahead."""
    exits, lookahead = [], []
    for task in ("code", "edit"):
        for L in (7, 14):
            for cache, k in (("own", 4), ("shared", 1), ("shared", 4)):
                c_d, c_v, e_n = 0.3 + L / 56, 1.1 + (0.4 if cache == "own" else 0.1) * k, 1.0 + 0.02 * k
                exits.append(dict(task=task, exit_layer=L, layers=28, cache=cache, k=k, T_1=0.8, c_d=c_d, c_v=c_v,
                                  e_n=e_n, alpha=[0.02] + [None] * (k - 1), predicted=e_n / (k * c_d + c_v),
                                  measured=0.9 * e_n / (k * c_d + c_v), equal_to_plain=True, first_divergence=None))
        lookahead.append(dict(task=task, window=4, ngram=3, guesses=4, nodes=17, T_1=0.8, c_d=0.01, c_v=1.7,
                              e_n=1.4, predicted=1.4 / 1.71, measured=0.8, equal_to_plain=True))
    manifest = dict(role="target", name="tiny-qwen2", source="random init", licence="none",
                    files=[dict(path="model.safetensors", bytes=1234, sha256="ab" * 32)],
                    header={"general.architecture": "qwen2"}, params=5000)
    return dict(schema=1, machine=dict(platform="linux", threads=1), models=[manifest],
                prompts={"code": 40, "edit": 60}, n_new=48, exits=exits, lookahead=lookahead, tiny=tiny)


def write(tmp_path, data) -> str:
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_written_recording_round_trips_and_finds_each_run(tmp_path):
    rec = rs.load_real_self_recording(write(tmp_path, synthetic()))
    assert rec.tasks == ["code", "edit"] and len(rec.exits) == 12 and len(rec.lookahead) == 2
    r = rec.exit("edit", 14, cache="own", k=4)
    assert (r.task, r.exit_layer, r.cache, r.k) == ("edit", 14, "own", 4)
    assert rec.best_exit("code").measured == max(x.measured for x in rec.exits if x.task == "code")
    with pytest.raises(ValueError, match=r"\(task, exit_layer, cache, k\) must be one of"):
        rec.exit("code", 3)
    with pytest.raises(ValueError, match="task must be one of"):
        rec.best_exit("prose")
    assert len(rec.table().splitlines()) == 1 + 12 + 2


@pytest.mark.parametrize("edit, error, match", [
    (lambda d: d.update(schema=2), ValueError, "schema must be 1"),
    (lambda d: d["exits"][0].pop("cache"), ValueError, r"exits\[0\] \(ExitRun\): missing fields \['cache'\]"),
    (lambda d: d["exits"][0].update(cache="private"), ValueError, r"exits\[0\]\.cache must be one of 'shared', 'own'"),
    (lambda d: d["exits"][1].update(c_v=True), TypeError, r"exits\[1\]\.c_v must be float, got bool"),
    (lambda d: d["exits"][2].update(alpha=[0.1]), ValueError, r"exits\[2\] must have .* k rates in alpha"),
    (lambda d: d["exits"][0].update(exit_layer=28), ValueError, r"exits\[0\] must have 1 <= exit_layer < layers"),
    (lambda d: d["lookahead"][0].update(task="prose"), ValueError, r"lookahead\[0\]\.task must be one of"),
    (lambda d: d["lookahead"][1].update(measured=0.0), ValueError, r"lookahead\[1\]: T_1, measured and predicted"),
    (lambda d: d.update(models=[]), ValueError, "models must be the target's manifest alone"),
])
def test_bad_fields_are_named(tmp_path, edit, error, match):
    data = synthetic(tiny=False)
    rs.load_real_self_recording(write(tmp_path, data))  # the unedited file loads: the control
    edit(data)
    with pytest.raises(error, match=match):
        rs.load_real_self_recording(write(tmp_path, data))


def test_path_and_file_shape_are_checked(tmp_path):
    with pytest.raises(TypeError, match="path must be a str or pathlib.Path"):
        rs.load_real_self_recording(3)
    with pytest.raises(TypeError, match="path must hold a JSON object"):
        rs.load_real_self_recording(write(tmp_path, [1, 2]))


def off_the_equation(rec) -> list:
    """The runs whose stored prediction is not E[N] / (k c_d + c_v) (exits) or E[N] / (c_d + c_v) (lookahead)."""
    exits = [r for r in rec.exits if abs(r.predicted - r.e_n / (r.k * r.c_d + r.c_v)) > 1e-9 * r.predicted]
    return exits + [r for r in rec.lookahead if abs(r.predicted - r.e_n / (r.c_d + r.c_v)) > 1e-9 * r.predicted]


def test_off_the_equation_finds_a_prediction_that_does_not_follow(tmp_path):
    rec = rs.load_real_self_recording(write(tmp_path, synthetic()))
    assert off_the_equation(rec) == []
    bent = dataclasses.replace(rec, exits=[dataclasses.replace(rec.exits[3], predicted=rec.exits[3].predicted * 1.01)])
    assert len(off_the_equation(bent)) == 1  # the negative control


def test_the_committed_recording_keeps_its_promises():
    rec = rs.real_self_recorded()
    assert rec is rs.real_self_recorded() and not rec.tiny  # read once; the real target
    assert all(r.equal_to_plain is True and r.first_divergence is None for r in rec.exits)
    assert all(r.equal_to_plain is True for r in rec.lookahead)
    assert off_the_equation(rec) == []
    drafts = {(L, cache, k) for L in (7, 14) for cache, k in (("own", 4), ("shared", 1), ("shared", 4))}
    assert {(r.exit_layer, r.cache, r.k) for r in rec.exits} == drafts
    real_pair = rr.real_recorded().model("target")
    assert rec.models[0].files == real_pair.files and rec.models[0].name == real_pair.name  # the same weights
