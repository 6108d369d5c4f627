"""--micro_batch (gradient accumulation), --logprob_chunk and --dtype bf16_mixed through the Trainer,
and their bad-input messages. The reference for every fast path is the same Trainer without it:
gradients of one minibatch (tolerance float32 rounding), metrics of one update."""

import pytest
import torch

from noma_prorl_bench.config import ConfigError, make_config
from noma_prorl_bench.training import micro
from noma_prorl_bench.training.trainer import Trainer

pytestmark = pytest.mark.unit

TINY = {
    "outdir": "/tmp/unused",
    "model": "transformer",
    "d_model": 32,
    "n_layers": 2,
    "batch_size": 3,
    "group_size": 4,
    "warmstart_steps": 2,
    "n_val": 8,
    "eval_every": 100,
    "quiet": True,
    "minibatches": 1,
    "ppo_epochs": 1,
    "variant": "A",
    "ref_compute": "cached",
    "beta": 0.1,
}


def _update(trainer=False, **over):
    """One Trainer, one rollout, one minibatch step over all N=12 rows -> (grads, metrics).
    Fixed random advantages (not the rewards, which may all be 0 this early), so the gradient is
    never trivially zero; pi_ref is perturbed so the KL term has a gradient too."""
    tr = Trainer.from_config(make_config({**TINY, **over})).start()
    batch = tr.collector.collect()[0]
    with torch.no_grad():
        for p in tr.ref.model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    tr.ref.prepare(batch.tokens, batch.prompt_len)
    batch.advantages = torch.randn(batch.n, generator=torch.Generator().manual_seed(1))
    tr.policy.train()
    inp, _ = tr.learner.update_inputs(batch)
    out = tr.learner.minibatch_step(batch, slice(0, batch.n), inp, tr.ref)
    grads = {n: p.grad.clone() for n, p in tr.policy.named_parameters()}
    assert sum(float(g.abs().sum()) for g in grads.values()) > 0
    return (grads, out, tr) if trainer else (grads, out)


def test_slices_cover_the_minibatch_in_order():
    assert micro.slices(slice(3, 10), 0) == [slice(3, 10)]
    assert micro.slices(slice(3, 10), 3) == [slice(3, 6), slice(6, 9), slice(9, 10)]
    assert micro.slices(slice(0, 4), 8) == [slice(0, 4)]


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_aggregate_in_sums_to_the_minibatch_aggregate(agg):
    from noma_prorl_bench.algorithms.losses import aggregate

    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 5, generator=g)
    mask = (torch.rand(7, 5, generator=g) > 0.3).float()
    mask[2] = 0.0  # a row with no response token
    ctx = slice(10, 17)  # absolute rows of the minibatch
    parts = sum(micro.aggregate_in(x[m.start - 10 : m.stop - 10], mask, m, ctx, agg, 8.0) for m in micro.slices(ctx, 3))
    assert torch.allclose(parts, aggregate(x, mask, agg, norm_const=8.0), atol=1e-6)


@pytest.mark.parametrize("over", [{}, {"loss_agg": "seq-mean-token-mean"}, {"loss": "gspo"}])
def test_micro_batch_grads_equal_the_full_minibatch(over):
    full_g, full_m = _update(**over)
    acc_g, acc_m = _update(micro_batch=5, **over)  # 12 rows -> 5 + 5 + 2
    for n in full_g:
        assert torch.allclose(full_g[n], acc_g[n], atol=1e-6, rtol=1e-4), n
    for k in ("loss/total", "loss/pg", "loss/kl", "kl/k3", "policy/entropy", "optim/grad_norm", "clip/frac"):
        assert full_m[k] == pytest.approx(acc_m[k], rel=1e-4, abs=1e-6), k


def test_logprob_chunk_trainer_update_equals_unchunked():
    full_g, full_m = _update()
    ch_g, ch_m = _update(logprob_chunk=7)
    for n in full_g:
        assert torch.allclose(full_g[n], ch_g[n], atol=1e-6, rtol=1e-4), n
    assert full_m["policy/entropy"] == pytest.approx(ch_m["policy/entropy"], rel=1e-5)


def test_grad_checkpoint_trainer_update_equals_plain():
    full_g, _ = _update()
    ck_g, _ = _update(grad_checkpoint=True)
    for n in full_g:
        assert torch.allclose(full_g[n], ck_g[n], atol=1e-6, rtol=1e-4), n


def test_bf16_mixed_trainer_keeps_float32_masters():
    grads, out, tr = _update(trainer=True, dtype="bf16_mixed", lr=1e-6)
    assert tr.policy.compute_dtype == torch.bfloat16 and tr.ref.model.compute_dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in tr.policy.parameters())
    assert all(s["exp_avg_sq"].dtype == torch.float32 for s in tr.optimizer.state.values())
    fp32_g, _ = _update()  # bf16 compute: close, not equal
    num = sum(float((grads[n] - fp32_g[n]).norm() ** 2) for n in grads) ** 0.5
    den = sum(float(fp32_g[n].norm() ** 2) for n in grads) ** 0.5
    assert 0 < num / den < 0.1


@pytest.mark.parametrize(
    "over, flag",
    [
        ({"micro_batch": -1}, "micro_batch"),
        ({"logprob_chunk": -2}, "logprob_chunk"),
        ({"model": "gru", "grad_checkpoint": True}, "grad_checkpoint"),
        ({"model": "gru", "logprob_chunk": 64}, "logprob_chunk"),
        ({"model": "gru", "dtype": "bf16_mixed"}, "dtype"),
        ({"logprob_chunk": 64, "kl_estimator": "full"}, "logprob_chunk"),
    ],
)
def test_bad_memory_flags_name_the_flag(over, flag):
    with pytest.raises(ConfigError) as e:
        make_config({**TINY, **over})
    assert e.value.field == flag if hasattr(e.value, "field") else flag in str(e.value)
