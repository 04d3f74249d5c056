"""The run header: how the input was read, and what was inferred, dropped or skipped.

Nothing the program decides about the user's input is silent. Before the
live view starts, the CLI prints :func:`header_lines` of
:func:`describe_inputs`, and ``summary.json`` carries the same dict under
``"inputs"`` (embedded runs, ``streamfl run --broker`` and the ``streamfl
track`` role alike). The facts come from the stream's attributes
(``task_rule_``, ``columns_``, ``notes_``, ``n_dropped_``, …; see
:class:`streamfl.generators.base.Stream`), so the header says what the
stream actually did.
"""

from __future__ import annotations

__all__ = ["describe_inputs", "header_lines"]

#: Order of the column groups in the header.
READ_AS = ("number", "time", "category", "label", "client", "unused", "dropped")


def _source_text(src) -> str:
    if src.kind == "synthetic":
        return "synthetic SEA adversary"
    if src.kind == "river_synth":
        return f"River generator {src.name}"
    if src.kind == "movielens":
        return f"MovieLens interactions {src.path}"
    if src.kind == "sparse_powerlaw":
        return "drifting power-law sparse features (FedSubAvg's setting)"
    if src.kind == "river_dataset":
        return f"River data set {src.name}"
    return f"file {src.path}"


def describe_inputs(cfg, stream) -> dict:
    """How ``cfg``'s input was read into ``stream``: a JSON-ready dict.

    Parameters
    ----------
    cfg : ExperimentConfig
    stream : Stream
        ``build_stream(cfg)``.

    Returns
    -------
    dict
        * ``source``: what was read (text);
        * ``shape``: ``{"n_steps", "n_clients", "n_features", "batch_size"}`` (T, M, d, b);
        * ``task``: ``{"value", "source", "rule"}``; ``source`` is "config"
          (written in the config), "default" (the field's default) or
          "inferred" (then ``rule`` says how);
        * ``columns``: one ``{"column", "read_as", "why"}`` per input column
          (real tables and River generators; empty for the synthetic
          adversary);
        * ``rows``: for real tables, ``{"read", "streamed",
          "dropped_incomplete_batches", "beyond_steps"}``, else ``None``;
        * ``idle_clients``: ids of clients that never play;
        * ``notes``: one line per thing inferred, dropped or skipped;
        * ``step_size`` (linear client models): the main learner's η_1
          against the smoothness of its loss
          (:func:`~streamfl.regret.stability.step_size_check`), and
          ``warnings``: its line when η_t·L > 2 for some step (empty otherwise).

    Examples
    --------
    >>> from streamfl.config import default_config
    >>> from streamfl.generators.build import build_stream
    >>> cfg = default_config()
    >>> inputs = describe_inputs(cfg, build_stream(cfg))
    >>> inputs["task"], inputs["notes"]
    ({'value': 'logistic', 'source': 'config', 'rule': None}, [])
    """
    src = cfg.source
    if getattr(stream, "kind", None) == "sparse":
        return {"source": _source_text(src),
                "shape": {"n_steps": int(stream.n_steps), "n_clients": int(stream.n_clients),
                          "n_features": int(stream.n_features), "batch_size": int(stream.batch_size),
                          "nnz": int(stream.nnz)},
                "task": {"value": "logistic (sparse binary features, learner.model sparse_logistic)",
                         "source": "config", "rule": None},
                "columns": [], "rows": None, "idle_clients": [], "notes": sparse_notes(cfg, stream)}
    rule = stream.task_rule_
    if rule is not None:
        task = {"value": stream.task, "source": "inferred", "rule": rule}
    else:
        task = {"value": stream.task, "source": "config" if "task" in src.model_fields_set else "default",
                "rule": None}
    notes = list(stream.notes_)
    if cfg.learner.model == "gmf":
        notes.extend(gmf_notes(cfg, stream))
    comp = cfg.learner.compression
    if comp is not None and comp.kind == "topk":
        p = stream.n_features * (stream.n_classes if stream.task == "softmax" else 1)
        if p * comp.bits // 32 == 0:      # TopK keeps max(1, ⌊P·b/32⌋) (streamfl.compression.topk)
            notes.append(f"learner.compression top-k: ⌊P·b/32⌋ = ⌊{p}·{comp.bits}/32⌋ = 0 for a model of "
                         f"P = {p} weights; each upload keeps k = 1")
    if getattr(stream, "kind", None) != "interactions":
        from ..regret.tracker import client_columns_plan
        why = client_columns_plan(int(stream.n_clients), cfg.output.client_columns, cfg.output.client_columns_max)[1]
        if why:
            notes.append(why)
        from ..regret.tracker import client_hindsight_note
        from .chunks import chunk_note, effective_chunk_size
        chunk = effective_chunk_size(cfg.chunk_size, stream)
        if chunk < min(cfg.chunk_size, stream.n_steps):     # a chunk never holds more than T steps anyway
            notes.append(chunk_note(cfg.chunk_size, chunk))
        if stream.task in ("logistic", "softmax") and stream.n_clients > cfg.tracker.client_hindsight_max:
            notes.append(client_hindsight_note(int(stream.n_clients), cfg.tracker.client_hindsight_max))
    if cfg.reservoir_size != type(cfg).model_fields["reservoir_size"].default:
        notes.append(f"reservoir_size = {cfg.reservoir_size} is ignored: the live static comparator keeps no "
                     f"sample reservoir any more (a certified interval instead, docs/live-regret.md)")
    rows = None
    if hasattr(stream, "n_rows_"):
        dropped, beyond = int(stream.n_dropped_), int(stream.n_truncated_)
        rows = {"read": int(stream.n_rows_), "streamed": int(stream.n_rows_) - dropped - beyond,
                "dropped_incomplete_batches": dropped, "beyond_steps": beyond}
        if cfg.steps is not None and stream.n_steps < cfg.steps:
            notes.append(f"the table gives T = {_count(stream.n_steps, 'step')}, fewer than steps: {cfg.steps}")
    if getattr(stream, "kind", None) == "interactions":
        return {"source": _source_text(src),
                "shape": {"n_steps": int(stream.n_steps), "n_clients": int(stream.n_clients),
                          "n_items": int(stream.n_items), "batch_size": 1},
                "task": {"value": "implicit feedback: binary cross-entropy on positives and sampled negatives "
                                  "(learner.model gmf)", "source": "config", "rule": None},
                "columns": [], "rows": {"read": int(stream.n_interactions_), "streamed": int(stream.n_streamed_),
                                        "dropped_incomplete_batches": 0,
                                        "beyond_steps": int(stream.n_interactions_ - stream.n_streamed_)},
                "idle_clients": list(stream.idle_clients_), "notes": notes}
    out = {
        "source": _source_text(src),
        "shape": {"n_steps": int(stream.n_steps), "n_clients": int(stream.n_clients),
                  "n_features": int(stream.n_features), "batch_size": int(stream.batch_size),
                  "intercept": bool(getattr(stream, "has_intercept", False))},
        "task": task,
        "columns": [dict(c) for c in stream.columns_],
        "rows": rows,
        "idle_clients": list(getattr(stream, "idle_clients_", [])),
        "notes": notes,
    }
    if cfg.learner.model == "linear":
        from ..models import StepSize
        from ..regret.stability import step_size_check
        lc = cfg.learner.step_size
        check = step_size_check(stream, StepSize(lc.kind, lc.eta, lc.mu, lc.t0), cfg.learner.radius)
        out["step_size"] = check
        out["warnings"] = [check["warning"]] if check["warning"] else []
    return out


def gmf_notes(cfg, stream) -> list[str]:
    """What a streaming GMF run decides beyond the config (the header and summary.json say it)."""
    from ..config import GMFConfig
    g = cfg.learner.gmf or GMFConfig()
    out = [f"client model: GMF (FedNCF), D = {g.dim}, user embeddings private; item rows aggregated every τ = "
           f"{cfg.learner.tau} steps with {g.item_rule}, h and b with FedAvg ({cfg.learner.weighting})"
           + ("" if cfg.learner.gmf is not None else " (learner.gmf not given: defaults)"),
           f"loss: mean BCE over each arriving positive and {g.negatives} training negatives drawn uniformly from "
           f"the items the user has not interacted with so far (with replacement)",
           f"prequential HR@10: each arriving positive ranked by the played model against {g.eval_negatives} "
           f"distinct items the user never interacts with in the recorded stream, ties broken at random",
           "regret: against an ESTIMATED comparator, the fixed GMF trained offline on the recorded stream "
           "(GMF is non-convex: the true best fixed model is unknown)",
           "the linear tracker's heterogeneity, decomposition and regime figures do not apply to GMF: not computed"]
    dropped = [b for b in cfg.baselines if b != "tau1"]
    if dropped:
        out.append(f"baselines {', '.join(dropped)} are not available with learner.model gmf (only tau1): "
                   f"run without them")
    return out


def sparse_notes(cfg, stream) -> list[str]:
    """What a streaming sparse logistic run decides beyond the config (the header and summary.json say it)."""
    from ..config import SparseConfig
    from ..regret.sparse import TOL
    sp = cfg.learner.sparse or SparseConfig()
    rule = ("FedSubAvg (each row averaged over the clients whose round involves it: heat counted by the server "
            "in the clear, full participation)" if sp.rule == "fedsubavg" else "sparse FedAvg (uniform over the M "
            "clients: a row moves heat/M as far)")
    out = [f"client model: sparse logistic regression, table of F = {stream.n_features:,} rows starting at 0, a bias "
           f"per client; rows aggregated every τ = {cfg.learner.tau} steps with {rule}, the bias by the plain mean; "
           f"lazy L2 λ = {sp.l2:g} on the rows a step uses" + ("" if cfg.learner.sparse is not None
                                                                 else " (learner.sparse not given: defaults)"),
           f"loss: mean BCE (nats) of the played model over each client's b = {stream.batch_size} samples of the "
           f"step, then one SGD step on it",
           f"regret: against the best fixed sparse logistic model in hindsight, fitted offline on the recorded stream "
           f"(exact to gradient norm <= {TOL:g}); also against the generator's true concept (w*, b*)",
           f"memory: the tracker keeps the recorded feature ids, T·M·b·nnz = "
           f"{stream.n_steps * stream.n_clients * stream.batch_size * stream.nnz:,} int32",
           "the linear tracker's heterogeneity, decomposition and regime figures do not apply: not computed"]
    if cfg.baselines:
        out.append("baselines: " + ", ".join(cfg.baselines) + (" (fedavg: the same model and τ with sparse FedAvg)"
                                                               if "fedavg" in cfg.baselines else ""))
    return out


def _names(names: list[str], limit: int = 12) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def _count(n: int, noun: str) -> str:
    """``1 step``, ``2 steps``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def header_lines(inputs: dict) -> list[str]:
    """The run header as a few short lines (for the terminal), from :func:`describe_inputs`.

    Columns are grouped by how they were read; each dropped column gets its
    own line with the reason, and each note a ``note:`` line.

    Examples
    --------
    >>> inputs = {"source": "file data.csv", "shape": {"n_steps": 2, "n_clients": 2, "n_features": 2,
    ...           "batch_size": 2},
    ...           "task": {"value": "softmax", "source": "inferred", "rule": "label 'y' holds 3 distinct whole "
    ...                    "numbers (at most 10), so classes → softmax"},
    ...           "columns": [{"column": "x1", "read_as": "number", "why": "numbers"},
    ...                       {"column": "x2", "read_as": "dropped", "why": "text (row 2: 'abc')"},
    ...                       {"column": "y", "read_as": "label", "why": "3 classes, numbered in sorted order: "
    ...                        "1 → 0 (2 rows), 2 → 1 (2 rows), 3 → 2 (1 row)"}],
    ...           "rows": {"read": 5, "streamed": 4, "dropped_incomplete_batches": 1, "beyond_steps": 0},
    ...           "idle_clients": [], "notes": ["1 row not streamed"]}
    >>> print("\\n".join(header_lines(inputs)))
    input: file data.csv → T = 2 steps, M = 2 clients, d = 2 features, b = 2
    task: softmax, inferred: label 'y' holds 3 distinct whole numbers (at most 10), so classes → softmax
    columns: number x1 · label y
    label y: 3 classes, numbered in sorted order: 1 → 0 (2 rows), 2 → 1 (2 rows), 3 → 2 (1 row)
    dropped column x2: text (row 2: 'abc')
    rows: 5 read, 4 streamed
    note: 1 row not streamed
    """
    sh = inputs["shape"]
    if "n_items" in sh or "nnz" in sh:    # an interaction stream (FedNCF) or a sparse-feature stream (FedSubAvg)
        shape = (f"M = {_count(sh['n_clients'], 'client')} (one per user), I = {_count(sh['n_items'], 'item')}, "
                 f"one interaction per client and step") if "n_items" in sh else \
                (f"M = {_count(sh['n_clients'], 'client')}, F = {_count(sh['n_features'], 'feature')} "
                 f"(a table row each), nnz = {sh['nnz']} active per sample, b = {sh['batch_size']}")
        return ([f"input: {inputs['source']} → T = {_count(sh['n_steps'], 'step')}, {shape}",
                 f"task: {inputs['task']['value']}"] + [f"note: {n}" for n in inputs["notes"]])
    lines = [f"input: {inputs['source']} → T = {_count(sh['n_steps'], 'step')}, "
             f"M = {_count(sh['n_clients'], 'client')}, d = {_count(sh['n_features'], 'feature')}"
             + (" incl. an intercept" if sh.get("intercept") else "") + f", b = {sh['batch_size']}"]
    t = inputs["task"]
    lines.append(f"task: {t['value']}, inferred: {t['rule']}" if t["source"] == "inferred"
                 else f"task: {t['value']} ({'source.task' if t['source'] == 'config' else 'default of source.task'})")
    groups = []
    for kind in READ_AS[:-1]:
        cols = [c for c in inputs["columns"] if c["read_as"] == kind]
        if not cols:
            continue
        groups.append(f"{kind} {_names([c['column'] for c in cols])}")
    if groups:
        lines.append("columns: " + " · ".join(groups))
    for c in inputs["columns"]:
        if c["read_as"] == "label":       # what was read for the label: classes and their numbers, or the range
            lines.append(f"label {c['column']}: {c['why']}")
    for c in inputs["columns"]:
        if c["read_as"] == "dropped":
            lines.append(f"dropped column {c['column']}: {c['why']}")
    rows = inputs.get("rows")
    if rows:
        lines.append(f"rows: {rows['read']} read, {rows['streamed']} streamed")
    lines.extend(f"note: {n}" for n in inputs["notes"])
    lines.extend(f"warning: {w}" for w in inputs.get("warnings", []))
    return lines
