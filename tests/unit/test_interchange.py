"""Unit tests for interchange.py: the safetensors/JSON schema and an exact round trip."""

import copy
import json
import os

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from noma_prorl_bench.models.lora import adapter_rank, attach_lora
from noma_prorl_bench.training.growth import grow_adapters
from noma_prorl_bench.training.interchange import BATCH_KEYS, export_state, import_state

torch.set_num_threads(1)
V, D, N, P, T = 7, 8, 4, 3, 4


class TokPolicy(nn.Module):
    """tokens[N, L] -> logits[N, L, V]; has a Linear named ``head`` and a buffer."""

    def __init__(self):
        super().__init__()
        self.emb, self.body, self.head = nn.Embedding(V, D), nn.Linear(D, D), nn.Linear(D, V)
        self.register_buffer("temp", torch.tensor(1.0))

    def forward(self, tokens):
        return self.head(torch.tanh(self.body(self.emb(tokens)))) / self.temp


def _logp(model, tokens):  # -> logp[N, T]
    logits = model(tokens)[:, P - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, tokens[:, P:, None]).squeeze(-1)


def _loss(model, b):
    logp = _logp(model, b["tokens"])
    ratio = torch.exp(logp - b["logp_old"])
    pg = -(ratio * b["advantages"][:, None] * b["mask"]).sum() / b["mask"].sum()
    if b["logp_ref"] is None:
        return pg
    log_r = b["logp_ref"] - logp
    return pg + 0.1 * ((log_r.exp() - 1 - log_r) * b["mask"]).sum() / b["mask"].sum()


def _setup(seed, lr_base=1e-3, lr_ad=1e-2):
    torch.manual_seed(seed)
    m = TokPolicy()
    attach_lora(m, ["head"], rank=2, alpha=2.0, freeze_base=False, seed=seed)
    base = [p for n, p in m.named_parameters() if "lora_" not in n]
    ad = [m.head.lora_A, m.head.lora_B]
    opt = torch.optim.AdamW(
        [{"params": base, "lr": lr_base}, {"params": ad, "lr": lr_ad, "weight_decay": 0.05}], betas=(0.9, 0.99)
    )
    return m, opt


def _batch(model, with_ref=True):
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, V, (N, P + T), generator=g)
    mask = torch.ones(N, T)
    mask[0, -1] = 0.0
    with torch.no_grad():
        logp_old = _logp(model, tokens)
    logp_ref = logp_old - 0.05 * torch.rand(N, T, generator=g) if with_ref else None
    return {
        "tokens": tokens,
        "mask": mask,
        "logp_old": logp_old,
        "logp_ref": logp_ref,
        "advantages": torch.randn(N, generator=g),
    }


def _trained_grown():
    m, opt = _setup(0)
    b = _batch(m)
    for step in range(5):
        if step == 3:
            opt = grow_adapters(m, opt, new_rank=4, mode="preserve")
        opt.zero_grad()
        _loss(m, b).backward()
        opt.step()
    return m, opt, b


def _step(model, opt, batch):
    opt.zero_grad()
    _loss(model, batch).backward()
    opt.step()


@pytest.mark.unit
def test_schema_names_and_meta(tmp_path):
    m, opt, b = _trained_grown()
    paths = export_state(str(tmp_path), m, opt, b, {"step": 5, "kl_coef": 0.1, "prompt_len": P})
    assert sorted(os.listdir(tmp_path)) == ["batch.safetensors", "meta.json", "optim.safetensors", "params.safetensors"]
    params = load_file(paths["params.safetensors"])
    assert set(params) == {f"param/{n}" for n, _ in m.named_parameters()} | {"buffer/temp"}
    assert params["param/head.lora_A"].shape == (4, D)
    optim = load_file(paths["optim.safetensors"])
    # 7 params x (m, v) + the cohort tensor of each grown adapter parameter (adam_cohorts)
    assert "optim/head.lora_B/exp_avg_sq" in optim and len(optim) == 2 * 7 + 2
    assert (
        optim["optim/head.lora_A/entry_cohort"][2:].eq(1).all()
        and optim["optim/head.lora_A/entry_cohort"][:2].eq(0).all()
    )
    assert set(load_file(paths["batch.safetensors"])) == {f"batch/{k}" for k in BATCH_KEYS}
    meta = json.load(open(paths["meta.json"]))
    assert meta["schema_version"] == 1 and meta["adapter_rank"] == 4
    assert meta["optimizer"]["class"] == "AdamW"
    assert meta["optimizer"]["param_groups"][1]["params"] == ["head.lora_A", "head.lora_B"]
    assert meta["optimizer"]["param_groups"][1]["lr"] == 1e-2
    assert meta["optimizer"]["state_scalars"]["head.lora_A"]["step"] == {"value": 5.0, "dtype": "float32"}
    # grown at step 3 (after 3 updates), then 2 more updates: the new entries have had 2
    assert meta["optimizer"]["state_scalars"]["head.lora_A"]["cohort_steps"] == {"value": [2], "dtype": None}
    assert meta["scalars"] == {"step": 5, "kl_coef": 0.1, "prompt_len": P}


@pytest.mark.unit
def test_round_trip_reproduces_next_update_bit_for_bit(tmp_path):
    m, opt, b = _trained_grown()
    export_state(str(tmp_path), m, opt, b, {"step": 5})
    m2, opt2 = _setup(seed=1, lr_base=0.5, lr_ad=0.5)  # other init, other hyperparameters
    assert adapter_rank(m2) == 2
    b2, scalars = import_state(str(tmp_path), m2, opt2)
    assert adapter_rank(m2) == 4 and scalars == {"step": 5}
    assert all(torch.equal(b[k], b2[k]) for k in BATCH_KEYS)
    assert [g["lr"] for g in opt2.param_groups] == [1e-3, 1e-2]
    assert opt2.param_groups[0]["betas"] == (0.9, 0.99)
    _step(m, opt, b)
    _step(m2, opt2, b2)
    for (n, p), (n2, p2) in zip(m.named_parameters(), m2.named_parameters()):
        assert n == n2 and torch.equal(p, p2), n
    names = {id(p): n for n, p in m.named_parameters()}
    names2 = {id(p): n for n, p in m2.named_parameters()}
    s1 = {names[id(p)]: s for p, s in opt.state.items()}
    s2 = {names2[id(p)]: s for p, s in opt2.state.items()}
    assert s1.keys() == s2.keys()
    for n in s1:
        for k in s1[n]:
            if not torch.is_tensor(s1[n][k]):
                assert s1[n][k] == s2[n][k], (n, k)  # cohort_steps (a list)
                continue
            assert torch.equal(s1[n][k], s2[n][k]) and s1[n][k].dtype == s2[n][k].dtype, (n, k)


@pytest.mark.unit
def test_variant_b_batch_and_mismatches(tmp_path):
    m, opt = _setup(0)
    b = _batch(m, with_ref=False)
    _step(m, opt, b)
    export_state(str(tmp_path), m, opt, b, {})
    m2, opt2 = _setup(3)
    b2, _ = import_state(str(tmp_path), m2, opt2)
    assert b2["logp_ref"] is None and torch.equal(b2["tokens"], b["tokens"])
    m3 = copy.deepcopy(m2)
    with pytest.raises(ValueError):  # other optimizer class
        import_state(str(tmp_path), m3, torch.optim.SGD(m3.parameters(), lr=0.1))
    m4, opt4 = _setup(0)
    grow_adapters(m4, opt4, new_rank=3)
    with pytest.raises(ValueError):  # cannot shrink 3 -> 2
        import_state(str(tmp_path), m4, opt4)
    m5 = TokPolicy()
    with pytest.raises(ValueError):  # no adapters to grow
        import_state(str(tmp_path), m5, torch.optim.AdamW(m5.parameters()))
