"""The compiled MLP/NeuMF trainer (streamfl.models.ncf_kernel) against torch: one hand-sized case, then rounds."""

import numpy as np
import pytest
import torch

from streamfl.generators.movielens import load_ml100k
from streamfl.models.ncf import build
from streamfl.models.ncf_kernel import train_ncf_compiled
from streamfl.models.stacked_torch import LocalSchedule, train_stacked
from streamfl.runtime.fedncf import FederatedNCF, NCFSettings, round_samples, submodels
from test_ncf import tiny_file

LAYERS = (8, 6, 4)


def _alive(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Embeddings of std 0.5 and small positive tower biases, so the ReLU units are a mix of active and not.

    With NCF's initialisation (embeddings of std 0.01, biases 0) a small tower's
    units can all be off for every sample, and then the tower receives no
    gradient at all — a comparison of trainers would not exercise it.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("user.weight") or name.endswith("item.weight"):
                p.normal_(0.0, 0.5, generator=g)
            elif "tower" in name and name.endswith("bias"):
                p.uniform_(0.0, 0.2, generator=g)
    return model


@pytest.mark.parametrize("lazy", [True, False], ids=["SparseAdam", "Adam"])
@pytest.mark.parametrize("kind", ["mlp", "neumf"])
def test_two_one_sample_steps_equal_torch_autograd_and_its_optimisers(kind, lazy):
    """One client, two steps of one sample each (items 3 then 5), float64: torch's own Adam / SparseAdam.

    Two steps, not one: at step 2 dense Adam still moves item 3's row on its
    momentum, SparseAdam does not, so the two settings differ and both are checked.
    """
    m = _alive(build(kind, 1, 7, dim=3, layers=LAYERS, generator=torch.Generator().manual_seed(0))).double()
    start = {n: p.detach().clone() for n, p in m.named_parameters()}
    items, labels = torch.tensor([3, 5]), torch.tensor([1.0, 0.0], dtype=torch.float64)
    tables = [n for n in start if n.endswith("user.weight") or n.endswith("item.weight")]
    named = dict(m.named_parameters())
    if lazy:
        m.sparse_grad = True
        opts = [torch.optim.SparseAdam([named[n] for n in tables], lr=0.05),
                torch.optim.Adam([p for n, p in named.items() if n not in tables], lr=0.05)]
    else:
        opts = [torch.optim.Adam(m.parameters(), lr=0.05)]
    want_loss = 0.0
    for j in range(2):
        for opt in opts:
            opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(m(torch.tensor([0]), items[j:j + 1]),
                                                                    labels[j:j + 1])
        loss.backward()
        for opt in opts:
            opt.step()
        want_loss += float(loss.detach()) / 2
    schedule = LocalSchedule(inputs=(torch.zeros(1, 2, 1, dtype=torch.long), items.view(1, 2, 1)),
                             labels=labels.view(1, 2, 1), w=torch.ones(1, 2, 1, dtype=torch.float64),
                             n_steps=np.array([2]))
    got, got_loss = train_ncf_compiled({n: v[None] for n, v in start.items()}, schedule, 0.05, lazy, model=kind)
    for n, p in m.named_parameters():
        torch.testing.assert_close(got[n][0], p.detach(), rtol=0, atol=1e-12, msg=n)
        assert not torch.equal(got[n][0], start[n]) or n.endswith("item.weight"), n      # everything trained
    assert got_loss[0].item() == pytest.approx(want_loss, rel=1e-6)                    # reported in float32
    moved = (got[tables[-1]][0] != start[tables[-1]]).any(dim=1).nonzero().ravel().tolist()
    assert moved == [3, 5]


def _round_inputs(tmp_path, kind, K=5):
    """A round's stacked parameters and schedule (tiny data, partial batches, clients of different lengths)."""
    d = load_ml100k(tiny_file(tmp_path, n_users=10, n_items=40, per_user=18), n_test_negatives=10)
    s = NCFSettings(model=kind, dim=4, layers=LAYERS, batch_size=8)
    fed = FederatedNCF(d, s, seed=1, init=_alive(build(kind, d.n_users, d.n_items, 4, LAYERS,
                                                       torch.Generator().manual_seed(1))))
    users = np.arange(K)
    rs = round_samples(d, users, 4, 8, 2, np.random.default_rng(0))
    sub = submodels(rs.owner, rs.items, K, d.n_items)
    params = fed.client_params(users, sub)
    schedule = LocalSchedule.from_samples(K, 8, rs.owner, rs.step, rs.col, (np.zeros_like(rs.owner), sub.local),
                                          rs.labels)
    return fed, params, schedule


@pytest.mark.parametrize("lazy", [True, False], ids=["SparseAdam", "Adam"])
@pytest.mark.parametrize("kind", ["mlp", "neumf"])
def test_compiled_round_equals_train_stacked(tmp_path, kind, lazy):
    fed, params, schedule = _round_inputs(tmp_path, kind)
    assert len(set(schedule.n_steps.tolist())) > 1 and (schedule.w[:, :, -1] == 0).any()   # ragged and padded
    ref, ref_loss = train_stacked(fed.client, params, schedule, 1e-2, sparse=fed._sparse if lazy else None)
    got, loss = train_ncf_compiled(params, schedule, 1e-2, lazy, model=kind)
    assert list(got) == list(params)
    for k in ref:
        assert got[k].shape == params[k].shape and got[k].dtype == params[k].dtype
        torch.testing.assert_close(got[k], ref[k], rtol=1e-5, atol=2e-6, msg=k)
        assert not torch.equal(got[k], params[k]), k                                   # every tensor trained
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    pre = "mlp." if kind == "neumf" else ""                       # the tower's units: some on, some off
    x = torch.cat([got[f"{pre}user.weight"].expand(-1, got[f"{pre}item.weight"].shape[1], -1),
                   got[f"{pre}item.weight"]], dim=-1)
    for l in range(len(LAYERS) - 1):
        x = torch.relu(x @ got[f"{pre}tower.{l}.weight"].transpose(1, 2) + got[f"{pre}tower.{l}.bias"][:, None])
    assert 0.1 < (x > 0).float().mean() < 0.9


@pytest.mark.parametrize("embedding_adam", ["sparse", "dense"])
@pytest.mark.parametrize("kind", ["mlp", "neumf"])
def test_federated_rounds_with_the_compiled_trainer_equal_the_batched_ones(tmp_path, kind, embedding_adam):
    d = load_ml100k(tiny_file(tmp_path, n_users=12, n_items=40, per_user=18), n_test_negatives=10)
    s = NCFSettings(model=kind, dim=4, layers=LAYERS, batch_size=8, clients_per_round=4, embedding_adam=embedding_adam)
    models, losses = {}, {}
    for trainer in ("compiled", "batched"):
        init = _alive(build(kind, d.n_users, d.n_items, 4, LAYERS, torch.Generator().manual_seed(2)), seed=3)
        fed = FederatedNCF(d, s, seed=0, trainer=trainer, init=init)
        losses[trainer] = [fed.run_round(users) for users in np.arange(12).reshape(3, 4)]
        models[trainer] = {k: v.detach().clone() for k, v in fed.model.named_parameters()}
    for k, v in models["batched"].items():
        torch.testing.assert_close(models["compiled"][k], v, rtol=1e-5, atol=5e-6, msg=k)
    np.testing.assert_allclose(losses["compiled"], losses["batched"], rtol=1e-5)


def test_params_of_another_model_are_refused():
    p = {k: v.detach()[None] for k, v in build("mlp", 1, 5, layers=LAYERS).named_parameters()}
    with pytest.raises(ValueError, match="params do not name a 'neumf' model's parameters"):
        train_ncf_compiled(p, None, model="neumf")
    with pytest.raises(ValueError, match=r"The 'model' parameter must be one of \['mlp', 'neumf'\]"):
        train_ncf_compiled(p, None, model="gmf")


@pytest.mark.parametrize("lazy", [True, False], ids=["SparseAdam", "Adam"])
@pytest.mark.parametrize("kind", ["mlp", "neumf"])
def test_in_float64_the_compiled_round_equals_train_stacked_to_rounding(tmp_path, kind, lazy):
    """With torch in float64 too, the only difference left is the order of the sums (float32 hides more)."""
    fed, params, schedule = _round_inputs(tmp_path, kind)
    params = {k: v.double() for k, v in params.items()}
    schedule = LocalSchedule(inputs=schedule.inputs, labels=schedule.labels.double(), w=schedule.w.double(),
                             n_steps=schedule.n_steps)
    ref, _ = train_stacked(fed.client.double(), params, schedule, 1e-2, sparse=fed._sparse if lazy else None)
    got, _ = train_ncf_compiled(params, schedule, 1e-2, lazy, model=kind)
    for k in ref:
        assert got[k].dtype == torch.float64
        torch.testing.assert_close(got[k], ref[k], rtol=0, atol=1e-12, msg=k)
