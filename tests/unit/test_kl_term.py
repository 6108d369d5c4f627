"""Unit tests for kl_term.KLTerm (the KL choice as one object) and the config values it and the
losses resolve: KL in the reward in both forms (hand-worked), GSPO/CISPO clip defaults."""

import math

import pytest
import torch

from noma_prorl_bench.algorithms.kl_term import KLTerm
from noma_prorl_bench.config import ConfigError, RunConfig, kl_metric_key, make_config
from noma_prorl_bench.config.specs import RunSpecs

torch.set_num_threads(1)

# One group (B=1, G=2), T=3. KL_t (k1 = logp_old - logp_ref) = [[.1, .2, .3], [.4, .1, (5, masked)]],
# rewards r = [1, 0], beta = .5.
KL_TOK = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.1, 5.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
LOGP_OLD = torch.zeros(2, 3)
LOGP_REF = -KL_TOK  # k1 = logp_old - logp_ref = KL_TOK
R = torch.tensor([1.0, 0.0])


def _adv(form: str, adv: str):
    term = KLTerm(estimator="k1", placement="reward", reward_form=form)
    return term.advantages(R, MASK, adv, 1, 2, beta=0.5, logp_old=LOGP_OLD, logp_ref=LOGP_REF)


@pytest.mark.unit
def test_sequence_form_hand_worked():
    a, m = _adv("sequence", "dr_grpo")
    # sums .6 and .5 -> shaped 1 - .3 = .7 and 0 - .25 = -.25; group mean .225 -> A = [.475, -.475]
    assert a.shape == (2,) and a.tolist() == pytest.approx([0.475, -0.475])
    assert m["reward/kl_penalty_mean"] == pytest.approx(0.275) and m["kl/seq_sum_mean"] == pytest.approx(0.55)
    assert m["reward/shaped_mean"] == pytest.approx(0.225)


@pytest.mark.unit
def test_token_form_hand_worked_group_estimator():
    a, m = _adv("token", "dr_grpo")
    # est(r) = r - mean = [.5, -.5]; return-to-go of KL: [.6, .5, .3], [.5, .1, 0];
    # times beta .5: [.3, .25, .15], [.25, .05, 0] -> A = [.2, .25, .35], [-.75, -.55, 0 (masked)]
    assert a.shape == (2, 3)
    assert torch.allclose(a, torch.tensor([[0.2, 0.25, 0.35], [-0.75, -0.55, 0.0]]))
    # the first token sees the sequence form's full penalty: same shared metrics
    assert m["reward/kl_penalty_mean"] == pytest.approx(0.275) and m["reward/shaped_mean"] == pytest.approx(0.225)


@pytest.mark.unit
def test_token_form_hand_worked_reinforce_pp_whitens_token_returns():
    a, _ = _adv("token", "reinforce_pp")
    # returns r - penalty: [.7, .75, .85], [-.25, -.05]; 5 tokens, mean 2.0 / 5 = .4;
    # deviations .3, .35, .45, -.65, -.45; squares sum 1.04; unbiased var .26, std .509902
    std = math.sqrt(0.26)
    dev = torch.tensor([[0.3, 0.35, 0.45], [-0.65, -0.45, 0.0]])
    assert torch.allclose(a, dev / (std + 1e-6), atol=1e-5)


@pytest.mark.unit
def test_forms_differ_and_agree_where_they_should():
    seq, _ = _adv("sequence", "dr_grpo")
    tok, _ = _adv("token", "dr_grpo")
    # not equal (the old docstring claimed they were): token 2 of row 0 is charged .15, not .3
    assert not torch.allclose(seq[:, None].expand(2, 3) * MASK, tok)
    # beta = 0: the token form of a group estimator is the plain per-sequence advantage, broadcast
    term = KLTerm(estimator="k1", placement="reward", reward_form="token")
    a0, _ = term.advantages(R, MASK, "grpo", 1, 2, beta=0.0, logp_old=LOGP_OLD, logp_ref=LOGP_REF)
    plain, _ = KLTerm().advantages(R, MASK, "grpo", 1, 2, beta=0.0)
    assert torch.allclose(a0, plain[:, None] * MASK)


@pytest.mark.unit
def test_loss_placement_leaves_rewards_alone_and_reward_placement_has_no_loss_term():
    a, m = KLTerm().advantages(R, MASK, "dr_grpo", 1, 2, beta=0.5)
    assert a.tolist() == [0.5, -0.5] and "reward/kl_penalty_mean" not in m
    term = KLTerm(estimator="k3", placement="reward")
    kl = term.estimates(LOGP_OLD, LOGP_REF, LOGP_OLD)
    assert torch.all(term.loss_term(kl, LOGP_OLD, LOGP_REF) == 0)
    assert torch.equal(KLTerm().loss_term(kl, LOGP_OLD, LOGP_REF), kl["k3"])


@pytest.mark.unit
def _term(**flags) -> KLTerm:
    return KLTerm.from_spec(RunSpecs.from_config(RunConfig(**flags)).objective.kl)


@pytest.mark.unit
def test_from_spec_and_needs():
    t = _term(kl_estimator="simple")
    assert (t.estimator, t.metric_key, t.key, t.anchor, t.in_reward) == ("k1", "kl/k1", "k1", "ref", False)
    full_b = _term(kl_estimator="full", variant="B")
    assert full_b.needs_old_logits and not full_b.needs_ref_logits
    full_a = _term(kl_estimator="full")
    assert full_a.needs_ref_logits and not full_a.needs_old_logits
    r = _term(kl_in="reward", kl_reward_form="sequence")
    assert r.in_reward and r.reward_form == "sequence"
    assert _term() == KLTerm()  # defaults: k3 in the loss, Variant A
    assert kl_metric_key("k3_ratio") == "kl/k3_ratio" and kl_metric_key("simple") == "kl/k1"  # derived, no table


# ---------------------------------------------------------------- clip and reduction defaults


@pytest.mark.unit
def test_gspo_resolves_to_the_paper_without_clip_flags():
    c = RunConfig(loss="gspo")
    assert (c.eps_lo, c.eps_hi, c.loss_agg_resolved) == (3e-4, 4e-4, "seq-mean-token-mean")
    assert c.clip_used == {"eps_low": 3e-4, "eps_high": 4e-4}
    # any clip flag wins, and then the other bound follows --clip_eps (or its 0.2 default)
    assert (RunConfig(loss="gspo", clip_eps=0.1).eps_lo, RunConfig(loss="gspo", clip_eps=0.1).eps_hi) == (0.1, 0.1)
    assert (RunConfig(loss="gspo", eps_high=0.01).eps_lo, RunConfig(loss="gspo", eps_high=0.01).eps_hi) == (0.2, 0.01)
    assert RunConfig(loss="gspo", loss_agg="token-mean").loss_agg_resolved == "token-mean"
    # other losses keep their defaults
    assert (RunConfig().eps_lo, RunConfig().eps_hi, RunConfig().loss_agg_resolved) == (0.2, 0.2, "token-mean")
    assert RunConfig(loss="dapo").clip_used == {"eps_low": 0.2, "eps_high": 0.28}


@pytest.mark.unit
def test_clip_used_names_only_the_bounds_a_loss_applies():
    assert RunConfig(loss="cispo").clip_used == {"eps_low": None, "eps_high": 0.2}
    assert RunConfig(loss="reinforce").clip_used == {"eps_low": None, "eps_high": None}
    assert RunConfig(loss="noclip").clip_used == {"eps_low": None, "eps_high": None}


@pytest.mark.unit
@pytest.mark.parametrize(
    "values,flag",
    [
        ({"loss": "cispo", "eps_low": 0.5}, "eps_low"),
        ({"loss": "reinforce", "clip_eps": 0.3}, "clip_eps"),
        ({"loss": "noclip", "eps_high": 0.3}, "eps_high"),
        ({"kl_reward_form": "sequence"}, "kl_reward_form"),
        ({"kl_in": "reward", "kl_estimator": "k3_ratio"}, "kl_estimator"),
        ({"target_kl": 0.1, "kl_horizon": 25}, "kl_horizon"),  # 0.2 * 16 * 8 = 25.6 samples
    ],
)
def test_bad_kl_and_clip_combinations_name_their_flag(values, flag):
    with pytest.raises(ConfigError) as e:
        make_config({"outdir": "x", **values})
    assert e.value.flag == flag


@pytest.mark.unit
def test_trainer_reads_no_kl_flag_string():
    # the trainer asks its KLTerm (built by its set-up); neither reads the KL flags itself
    import inspect
    import re

    from noma_prorl_bench.training import setup, trainer

    for module in (trainer, setup):
        assert not re.search(r"\.(kl_estimator|kl_in|k2_mode|kl_reward_form)\b", inspect.getsource(module))
    assert "KLTerm.from_spec(specs.objective.kl)" in inspect.getsource(setup)
