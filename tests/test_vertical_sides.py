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
