"""The split sides of C-VFL (one party / the server, as the Kafka roles run them) equal CVFL.step exactly."""

import pytest

from streamfl.vertical.spec import compressors, initial_models, run_embedded, stream_data, vertical_config


def _split_run(cfg):
    """The streaming run driven through PartySide/ServerSide in one process (what the Kafka roles do)."""
    from streamfl.vertical.sides import PartySide, ServerSide
    from streamfl.vertical.train import stream_batches
    data, K = stream_data(cfg)
    parties, server = initial_models(cfg, data.widths, K)
    cm, c0 = compressors(cfg)
    kw = dict(local_iterations=cfg.local_iterations, lr=cfg.lr, compressor=cm, server_compressor=c0, seed=cfg.seed)
    M = len(parties)
    sides = [PartySide(m, M, parties[m - 1], server, **kw) for m in range(1, M + 1)]
    srv = ServerSide(M, server, **kw)
    losses, up, down = [], 0, 0
    for r, b in enumerate(stream_batches(data, cfg.batch_size)):
        payloads = [s.embed(r, X) for s, X in zip(sides, b.parts)]
        up += sum(map(len, payloads))
        relayed = srv.relay(r, payloads)
        down += sum(len(p) for ps in relayed for p in ps)
        for s, ps in zip(sides, relayed):
            s.local_steps(r, ps, b.y)
        losses.append(srv.local_steps(r, b.y)[0].mean())
    return losses, up, down


@pytest.mark.parametrize("compressor", [{"kind": "scalar", "bits": 2}, {"kind": "lattice", "bits": 3},
                                        {"kind": "topk", "bits": 4}, {"kind": "none", "bits": 32}])
def test_split_sides_equal_embedded_cvfl(compressor):
    cfg = vertical_config({"kind": "vertical", "seed": 3, "samples": 100, "batch_size": 16, "local_iterations": 3,
                           "compressor": compressor})
    rows = run_embedded(cfg)
    losses, up, down = _split_run(cfg)
    assert [r["loss"] for r in rows] == [float(x) for x in losses]     # exact, every round
    assert (rows[-1]["bytes_up"], rows[-1]["bytes_down"]) == (up, down)
    assert len(rows) == 7 and rows[-1]["samples"] == 100


def _uneven_problem():
    """Three parties of different widths and embedding sizes (no vectorised encode), a 2-D regression target."""
    import numpy as np
    import torch
    from torch import nn

    from streamfl.vertical import ConcatFusion, split_columns, tanh_embedding
    rng = np.random.default_rng(4)
    X = rng.normal(size=(120, 7))
    y = np.stack([X[:, 0] - X[:, 5], X[:, 3]], axis=1).astype(np.float32)
    data = split_columns(X, y, [[0, 1], [2, 3, 4], [5, 6]])
    torch.manual_seed(2)
    parties = [tanh_embedding(2, 3), tanh_embedding(3, 2, 4), tanh_embedding(2, 4)]
    return data, parties, ConcatFusion(nn.Sequential(nn.Linear(9, 5), nn.ReLU(), nn.Linear(5, 2)))


def test_one_party_sides_with_their_own_decoders_equal_cvfl_for_uneven_parties():
    # the Kafka path (each side alone: its own decoder, one-party objective, one backward per side)
    # against the composed one (shared decoder, stacked views, one backward for all)
    import numpy as np
    import torch

    from streamfl.compression import UniformScalarQuantizer
    from streamfl.vertical import CVFL
    from streamfl.vertical.sides import PartySide, ServerSide

    def squared(out, y):
        return ((out - y) ** 2).sum(dim=1)

    data, parties, server = _uneven_problem()
    kw = dict(local_iterations=3, lr=lambda r: 0.2 / (1 + r), compressor=UniformScalarQuantizer(3),
              server_compressor=UniformScalarQuantizer(4, range=None), loss=squared, seed=9)
    model = CVFL(parties, server, **kw)
    sides = [PartySide(m, 3, parties[m - 1], server, **kw) for m in (1, 2, 3)]
    srv = ServerSide(3, server, **kw)
    for r in range(6):
        b = data.take(np.arange(r * 20, r * 20 + 20))
        report = model.step(b)
        relayed = srv.relay(r, [s.embed(r, X) for s, X in zip(sides, b.parts)])
        for s, ps in zip(sides, relayed):
            s.local_steps(r, ps, b.y)
        losses, outputs = srv.local_steps(r, b.y)
        assert np.array_equal(report.sample_losses, losses) and np.array_equal(report.outputs, outputs)
    split = [p for s in sides for p in s.party.parameters()] + list(srv.server.parameters())
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), split))
    first = [p.detach().clone() for p in CVFL(parties, server, **kw).parameters()]
    assert max(  # it trained
        float((a.detach() - b).abs().max()) for a, b in zip(model.parameters(), first)) > 0.01


def test_payload_decoder_decodes_each_payload_once_per_round():
    import numpy as np
    import torch

    from streamfl.compression import UniformScalarQuantizer, dither_key
    from streamfl.vertical.sides import PayloadDecoder

    class Counting(UniformScalarQuantizer):
        calls = 0

        def decode_batch(self, payloads, keys=None):
            Counting.calls += len(payloads)
            return super().decode_batch(payloads, keys)

    c = Counting(2)
    x = [np.full((2, 3), v) for v in (0.5, -0.5, 0.25)]
    p = [c.encode(a, dither_key(1, j, 7)) for j, a in enumerate(x, start=1)]
    d = PayloadDecoder(c, seed=1, dtype=torch.float64)
    got = d.decode(7, [(2, p[1]), (3, p[2])]) + d.decode(7, [(1, p[0]), (3, p[2])])
    assert Counting.calls == 3                              # party 3's payload decoded once for both receivers
    plain = UniformScalarQuantizer(2)
    expected = [plain.decode(p[j - 1], dither_key(1, j, 7)) for j in (2, 3, 1, 3)]
    assert all(np.array_equal(g.numpy(), e) for g, e in zip(got, expected))
    assert got[1] is got[3]
    d.decode(8, [(3, p[2])])                                # a new round forgets the last one's payloads
    assert Counting.calls == 4


def test_sides_refuse_calls_out_of_order():
    import numpy as np

    from streamfl.vertical.sides import PartySide, ServerSide
    data, parties, server = _uneven_problem()
    kw = dict(local_iterations=1, lr=0.1)
    side = PartySide(1, 3, parties[0], server, **kw)
    with pytest.raises(ValueError, match="party 1 has not sent its embedding of round 0"):
        side.local_steps(0, [b"", b"", b""], data.y[:4])
    side.embed(0, data.parts[0][:4])
    with pytest.raises(ValueError, match="party 1 expects 2 embeddings and the server model, got 1 payloads"):
        side.local_steps(0, [b""], data.y[:4])
    other = PartySide(1, 3, parties[0], server, **kw)
    other.embed(0, data.parts[0][:4])
    with pytest.raises(ValueError, match="distinct parties of one run"):
        PartySide.objective_all([side, other], 0, [[b""] * 3] * 2, data.y[:4])
    with pytest.raises(ValueError, match="the server has not relayed round 0"):
        ServerSide(3, server, **kw).local_steps(0, np.zeros(4))
    with pytest.raises(ValueError, match=r"local_iterations \(Q\) must be an integer ≥ 1, got 0"):
        ServerSide(3, server, local_iterations=0, lr=0.1)
