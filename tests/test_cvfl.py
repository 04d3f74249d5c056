"""C-VFL (Algorithm 1): equality with centralized SGD, stale local iterations, bytes, streaming, joins."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

from streamfl.compression import NoCompression, UniformScalarQuantizer, dither_key
from streamfl.vertical import (CVFL, ConcatFusion, SampleJoiner, Wire, cross_entropy, join_by_id, prequential,
                               split_columns, stream_batches, tanh_embedding, train_epochs)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Models this small only lose time to intra-op threads (badly so on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _problem(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 9))
    y = (X[:, 0] - X[:, 4] + 0.5 * X[:, 8] > 0).astype(np.int64)
    return split_columns(X, y, [[0, 1, 2], [3, 4], [5, 6, 7, 8]])


def _models(data, seed=0):
    torch.manual_seed(seed)
    parties = [tanh_embedding(data.widths[0], 4, 8), tanh_embedding(data.widths[1], 3),
               tanh_embedding(data.widths[2], 5, 6)]
    server = ConcatFusion(nn.Sequential(nn.Linear(12, 7), nn.ReLU(), nn.Linear(7, 2)))
    return parties, server


def _sgd(params, loss, lr):
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        for p, g in zip(params, grads):
            p.sub_(lr * g)


def _squared(outputs, y):
    return ((outputs - y) ** 2).sum(dim=1)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_uncompressed_cvfl_with_q1_equals_centralized_sgd(task):
    # b = 32 and Q = 1: every party's block gradient is the concatenated model's gradient block
    data = _problem()
    loss = cross_entropy
    if task == "regression":                     # 2-D float targets and a per-sample squared loss
        loss = _squared
        data = split_columns(np.hstack(data.parts), np.stack([data.y, 1.0 - data.y], axis=1).astype(np.float32),
                             [[0, 1, 2], [3, 4], [5, 6, 7, 8]])
    parties, server = _models(data)
    ref_parties, ref_server = copy.deepcopy(parties), copy.deepcopy(server)
    model = CVFL(parties, server, local_iterations=1, lr=0.3, compressor=NoCompression(),
                 server_compressor=NoCompression(), loss=loss)
    params = [p for h in ref_parties for p in h.parameters()] + list(ref_server.parameters())
    rng = np.random.default_rng(1)
    for _ in range(40):
        batch = data.take(rng.choice(len(data), 32, replace=False))
        model.step(batch)
        xs = [torch.as_tensor(x, dtype=torch.float32) for x in batch.parts]
        out = ref_server([h(x) for h, x in zip(ref_parties, xs)])
        _sgd(params, loss(out, torch.as_tensor(batch.y)).mean(), 0.3)
    gap = max(float((a - b).detach().abs().max()) for a, b in zip(model.parameters(), params))
    assert gap <= 1e-6
    moved = max(float((a - b).detach().abs().max()) for a, b in zip(model.parameters(),
                                                         [p for h in parties for p in h.parameters()]
                                                         + list(server.parameters())))
    assert moved > 0.05                     # it did train (and the caller's modules were left unchanged)


def test_local_iterations_use_stale_compressed_views():
    # a direct, unstacked implementation of lines 11-14 (one backward per party) gives the same models
    data = _problem(seed=2)
    parties, server = _models(data, seed=3)
    Q, lr, seed = 4, 0.2, 11
    comp, comp0 = UniformScalarQuantizer(3), UniformScalarQuantizer(4, range=None)
    model = CVFL(parties, server, local_iterations=Q, lr=lr, compressor=comp, server_compressor=comp0, seed=seed)
    ref_p, ref_s = copy.deepcopy(parties), copy.deepcopy(server)
    for r in range(5):
        batch = data.take(np.arange(r * 40, r * 40 + 40))
        model.step(batch)
        xs = [torch.as_tensor(x, dtype=torch.float32) for x in batch.parts]
        y = torch.as_tensor(batch.y)
        with torch.no_grad():
            stale = [torch.as_tensor(comp.decode(comp.encode(h(x).numpy(), dither_key(seed, m, r)),
                                                 dither_key(seed, m, r)), dtype=torch.float32)
                     for m, (h, x) in enumerate(zip(ref_p, xs), start=1)]
            vec = torch.nn.utils.parameters_to_vector(ref_s.parameters()).numpy()
            theta0 = torch.as_tensor(comp0.decode(comp0.encode(vec, (seed, 0, r)), (seed, 0, r)), dtype=torch.float32)
        frozen = copy.deepcopy(ref_s)
        torch.nn.utils.vector_to_parameters(theta0, frozen.parameters())
        for p in frozen.parameters():
            p.requires_grad_(False)
        for _ in range(Q):
            for m, h in enumerate(ref_p):
                view = [h(xs[m]) if j == m else stale[j] for j in range(3)]
                _sgd(list(h.parameters()), cross_entropy(frozen(view), y).mean(), lr)
            _sgd(list(ref_s.parameters()), cross_entropy(ref_s(stale), y).mean(), lr)
    ref = [p for h in ref_p for p in h.parameters()] + list(ref_s.parameters())
    assert max(float((a - b).detach().abs().max()) for a, b in zip(model.parameters(), ref)) <= 1e-6


def test_bytes_counted_equal_the_payloads_sent():
    data = _problem()
    parties, server = _models(data)
    wire = Wire(record=True)
    model = CVFL(parties, server, local_iterations=3, lr=0.1, compressor=UniformScalarQuantizer(2),
                 server_compressor=UniformScalarQuantizer(3, range=None), wire=wire)
    reports = [model.step(data.take(np.arange(r * 50, r * 50 + 50))) for r in range(3)]
    up = sum(len(m.payload) for m in wire.messages if m.receiver == 0)
    down = sum(len(m.payload) for m in wire.messages if m.sender == 0)
    assert (wire.bytes_up, wire.bytes_down) == (up, down)
    assert (reports[-1].bytes_up_total, reports[-1].bytes_down_total) == (up, down)
    # per round: M uploads; the server sends each party the M − 1 other embeddings and C_0(θ_0)
    assert len(wire.messages) == 3 * (3 + 3 * 2 + 3)
    emb = [6 + (50 * p * 2 + 7) // 8 for p in (4, 3, 5)]            # header + 2-bit codes of (50, P_m)
    theta0 = 5 + 4 + (107 * 3 + 7) // 8                              # 12·7 + 7 + 7·2 + 2 = 107 parameters
    assert reports[0].bytes_up == sum(emb)
    assert reports[0].bytes_down == sum(sum(emb) - e for e in emb) + 3 * theta0
    # the payloads relayed down are the very bytes sent up
    first = [m.payload for m in wire.messages if m.round == 0]
    to_party = {k: [m.payload for m in wire.messages if m.round == 0 and m.receiver == k] for k in (1, 2, 3)}
    assert to_party[1][:2] == [first[1], first[2]] and to_party[3][:2] == [first[0], first[1]]
    assert to_party[1][2] == to_party[2][2] == to_party[3][2] and len(to_party[1][2]) == theta0


def test_prequential_loss_is_the_servers_loss_before_the_round():
    data = _problem()
    parties, server = _models(data)
    comp = UniformScalarQuantizer(2)
    wire = Wire(record=True)
    model = CVFL(parties, server, local_iterations=5, lr=0.5, compressor=comp, seed=4, wire=wire)
    batch = data.take(np.arange(64))
    report = model.step(batch)
    stale = [torch.as_tensor(comp.decode(m.payload, (4, m.sender, 0)), dtype=torch.float32)
             for m in wire.messages[:3]]
    expected = cross_entropy(server(stale), torch.as_tensor(batch.y)).detach().numpy()
    assert np.allclose(report.sample_losses, expected, atol=1e-6)
    after = float(cross_entropy(model.server(stale), torch.as_tensor(batch.y)).mean().detach())
    assert after < report.loss - 0.05       # the round's updates came after the reported loss


def test_small_run_learns_the_problem():
    data = _problem(n=1200, seed=5)
    train, test = data.take(np.arange(1000)), data.take(np.arange(1000, 1200))
    parties, server = _models(data, seed=6)
    model = CVFL(parties, server, local_iterations=5, lr=0.1, compressor=UniformScalarQuantizer(2),
                 server_compressor=UniformScalarQuantizer(4, range=None), seed=1)
    rows = train_epochs(model, train, epochs=10, batch_size=50, seed=0, test=test)
    assert rows[0]["test_accuracy"] == pytest.approx(0.52)           # untrained: the share of the first class
    assert rows[-1]["test_accuracy"] >= 0.95                         # a linear rule: 2-bit embeddings suffice
    assert rows[-1]["test_loss"] < 0.15 < 0.6 < rows[0]["test_loss"]
    assert rows[-1]["round"] == 10 * 20 and rows[-1]["iterations"] == 10 * 20 * 5


def test_streaming_reports_prequential_losses_and_cumulative_bytes():
    data = _problem(n=2000, seed=7)
    parties, server = _models(data, seed=8)
    model = CVFL(parties, server, local_iterations=2, lr=0.3, compressor=UniformScalarQuantizer(3))
    reports = list(prequential(model, stream_batches(data, 25)))
    assert len(reports) == 80
    early, late = np.mean([r.loss for r in reports[:10]]), np.mean([r.loss for r in reports[-10:]])
    assert late < 0.5 * early
    assert np.all(np.diff([r.bytes_up_total for r in reports]) == reports[0].bytes_up)
    assert reports[-1].bytes_down_total == model.wire.bytes_down


def test_the_model_refuses_what_it_cannot_run():
    data = _problem()
    parties, _ = _models(data)
    with pytest.raises(ValueError, match=r"server model holds buffers \(head.1.running_mean"):
        CVFL(parties, ConcatFusion(nn.Sequential(nn.Linear(12, 3), nn.BatchNorm1d(3))))
    with pytest.raises(ValueError, match="local_iterations \\(Q\\) must be an integer ≥ 1, got 0"):
        CVFL(parties, ConcatFusion(nn.Linear(12, 3)), local_iterations=0)
    model = CVFL(parties[:2], ConcatFusion(nn.Linear(7, 3)))
    with pytest.raises(ValueError, match="the batch has 3 parties' features; the model has 2 parties"):
        model.step(data)


def test_join_by_id_aligns_tables_and_reports_drops():
    batch, report = join_by_id([(np.array([5, 3, 9]), np.array([[0.5], [0.3], [0.9]])),
                                (np.array([9, 5, 3, 4]), np.array([[9, 9], [5, 5], [3, 3], [4, 4]]))],
                               (np.array([3, 5, 7]), np.array([1, 0, 1])))
    assert batch.ids.tolist() == [3, 5]
    assert batch.parts[0].ravel().tolist() == [0.3, 0.5] and batch.parts[1].tolist() == [[3, 3], [5, 5]]
    assert batch.y.tolist() == [1, 0]
    assert report == {"joined": 2, "dropped": {"labels": 1, "party 1": 1, "party 2": 2}}
    with pytest.raises(ValueError, match="party 1 repeats sample ids"):
        join_by_id([(np.array([1, 1]), np.zeros((2, 1)))], (np.array([1]), np.array([0])))


def test_sample_joiner_emits_complete_samples_in_completion_order():
    j = SampleJoiner(2, max_pending=3)
    j.add(1, [1, 2, 3], np.array([[1.0], [2.0], [3.0]]))
    j.add_labels([3, 1], np.array([30, 10]))
    assert j.pop() is None
    j.add(2, [3], np.array([[3.5, 3.6]]))
    j.add(2, [1], np.array([[1.5, 1.6]]))
    b = j.pop()
    assert b.ids.tolist() == [3, 1] and b.y.tolist() == [30, 10] and b.parts[1].tolist() == [[3.5, 3.6], [1.5, 1.6]]
    assert j.pending == 1
    j.add(1, [7], np.array([[7.0]]))
    j.add(2, [7], np.array([[7.5, 7.6]]))
    j.add_labels([7], np.array([70]))
    with pytest.raises(ValueError, match="sample id 7 already complete; party 1 sent it again"):
        j.add(1, [7], np.array([[7.0]]))
    assert j.pop().ids.tolist() == [7]
    with pytest.raises(ValueError, match="party 2 sent rows of width 1 after rows of width 2"):
        j.add(2, [2], np.array([[2.0]]))
    j.add(1, [4, 5], np.array([[4.0], [5.0]]))
    with pytest.raises(ValueError, match="more than 3 sample ids wait .* the oldest is 2"):
        j.add(1, [6], np.array([[6.0]]))


def test_digits_quadrants_give_each_party_one_quadrant():
    from sklearn.datasets import load_digits

    from streamfl.vertical.datasets import digits_quadrants
    train, test = digits_quadrants()
    images = load_digits().images / 16.0
    i = int(test.ids[0])
    assert np.array_equal(test.parts[1][0], images[i, :4, 4:].ravel())      # party 2: top-right
    assert np.array_equal(test.parts[2][0], images[i, 4:, :4].ravel())      # party 3: bottom-left
    assert len(set(train.ids) & set(test.ids)) == 0 and len(train) + len(test) == 1797
