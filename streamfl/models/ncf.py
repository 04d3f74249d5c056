"""Neural collaborative filtering models: GMF, MLP and NeuMF (torch).

The three models of NCF (He et al., WWW 2017) as federated by FedNCF (paper
003, §3.1 and Fig. 1). A model scores a (user, item) pair with a logit; the
predicted interaction probability is its sigmoid, trained with binary cross
entropy on positives and sampled negatives.

* **GMF**: ŷ = σ(hᵀ (p_u ⊙ q_i) + b), user and item embeddings of size D.
* **MLP**: ŷ = σ(hᵀ φ([p_u; q_i]) + b), φ a ReLU tower. With FedNCF's layers
  (48, 24, 12, 6) the user and item embeddings have 48/2 = 24 entries each,
  the tower is 48 → 24 → 12 → 6 and h has 6 entries (NCF's convention: the
  first "layer" is the concatenated embedding).
* **NeuMF**: ŷ = σ(hᵀ [p^G_u ⊙ q^G_i ; φ([p^M_u; q^M_i])] + b), with separate
  embeddings for its GMF and MLP parts. :func:`neumf_from_pretrained` starts
  it from a trained GMF and MLP (NCF §3.4.1): embeddings and tower copied,
  h = [α h_GMF, (1−α) h_MLP] and b = α b_GMF + (1−α) b_MLP, α = 0.5.

Initialisation follows FedNCF §5.2 (Xavier for the network weights) and
NCF's code for embeddings (normal, σ = 0.01); biases start at 0.

Every model names its parameter groups, which is what federated training
needs: ``user_tables`` (never leave the client), ``item_tables`` (sparse rows,
aggregated per item by MF-FedAvg) and the rest (dense network weights,
FedAvg).

**Stacked clients.** The forward passes use :func:`lookup` and :func:`dense`,
which broadcast over leading axes: run through
``torch.func.functional_call`` with every parameter stacked on a leading
client axis (K, ...) and index tensors of shape (K, B), a model computes the K
clients' logits (K, B) in one batched pass, each client with its own
parameters (:mod:`streamfl.models.stacked_torch`).

>>> import torch
>>> m = GMF(n_users=3, n_items=5, dim=4, generator=torch.Generator().manual_seed(0))
>>> m(torch.tensor([0, 2]), torch.tensor([1, 4])).shape
torch.Size([2])
>>> m.user_tables, m.item_tables
(('user.weight',), ('item.weight',))
"""

from __future__ import annotations

import torch
from torch import nn

EMBEDDING_STD = 0.01


def lookup(table: torch.Tensor, index: torch.Tensor, sparse: bool = False) -> torch.Tensor:
    """Rows of an embedding table: (N, D) with index (...) → (..., D); stacked (K, N, D) with (K, B) → (K, B, D).

    The stacked form reads client k's rows from client k's table (one flat
    index into the (K·N, D) view, whose backward is one scatter-add).
    ``sparse`` (2-D tables only) makes the table's gradient a sparse tensor
    holding the rows of the batch, for ``torch.optim.SparseAdam``.
    """
    if table.dim() == 2:
        return torch.nn.functional.embedding(index, table, sparse=sparse)
    K, N, D = table.shape
    offset = torch.arange(K, device=index.device).view(K, *([1] * (index.dim() - 1))) * N
    return table.reshape(K * N, D)[index + offset]


def dense(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """x Wᵀ + b for x (..., B, in); W (out, in) or stacked (K, out, in), b (out,) or (K, out)."""
    return torch.matmul(x, layer.weight.transpose(-1, -2)) + layer.bias.unsqueeze(-2)


def _init_linear(layer: nn.Linear, generator: torch.Generator | None):
    bound = (6.0 / (layer.in_features + layer.out_features)) ** 0.5      # Xavier uniform
    with torch.no_grad():
        layer.weight.uniform_(-bound, bound, generator=generator)
        layer.bias.zero_()


def _embedding(n: int, dim: int, generator: torch.Generator | None) -> nn.Embedding:
    e = nn.Embedding(n, dim)
    with torch.no_grad():
        e.weight.normal_(0.0, EMBEDDING_STD, generator=generator)
    return e


class GMF(nn.Module):
    """Generalized matrix factorisation: logit = hᵀ (p_u ⊙ q_i) + b.

    Parameters
    ----------
    n_users, n_items : int
    dim : int
        D, embedding size (12 in FedNCF).
    generator : torch.Generator or None
        Seeds the initialisation.
    """

    user_tables = ("user.weight",)
    item_tables = ("item.weight",)
    sparse_grad = False          # True: embedding gradients are sparse (rows of the batch), for SparseAdam

    def __init__(self, n_users: int, n_items: int, dim: int = 12, generator: torch.Generator | None = None):
        super().__init__()
        self.user = _embedding(n_users, dim, generator)
        self.item = _embedding(n_items, dim, generator)
        self.out = nn.Linear(dim, 1)
        _init_linear(self.out, generator)

    def features(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """p_u ⊙ q_i, shape (B, D) (or (K, B, D) stacked)."""
        return lookup(self.user.weight, users, self.sparse_grad) * lookup(self.item.weight, items, self.sparse_grad)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Logits, shape (B,), for user and item index tensors of shape (B,) (or (K, B) stacked)."""
        return dense(self.features(users, items), self.out).squeeze(-1)


class MLP(nn.Module):
    """NCF's MLP: logit = hᵀ φ([p_u; q_i]) + b with a ReLU tower φ.

    Parameters
    ----------
    n_users, n_items : int
    layers : tuple of int
        (48, 24, 12, 6) in FedNCF: embeddings of layers[0]/2 each, then
        Linear+ReLU to each following size.
    generator : torch.Generator or None

    Raises
    ------
    ValueError
        If layers[0] is odd or fewer than two sizes are given.
    """

    user_tables = ("user.weight",)
    item_tables = ("item.weight",)
    sparse_grad = False

    def __init__(self, n_users: int, n_items: int, layers: tuple[int, ...] = (48, 24, 12, 6),
                 generator: torch.Generator | None = None):
        super().__init__()
        if len(layers) < 2 or layers[0] % 2:
            raise ValueError(f"The 'layers' parameter of MLP must have ≥ 2 sizes and an even first size. Got {layers!r} instead.")
        self.user = _embedding(n_users, layers[0] // 2, generator)
        self.item = _embedding(n_items, layers[0] // 2, generator)
        self.tower = nn.ModuleList(nn.Linear(a, b) for a, b in zip(layers[:-1], layers[1:]))
        for layer in self.tower:
            _init_linear(layer, generator)
        self.out = nn.Linear(layers[-1], 1)
        _init_linear(self.out, generator)

    def features(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """φ([p_u; q_i]), shape (B, layers[-1])."""
        x = torch.cat([lookup(self.user.weight, users, self.sparse_grad),
                       lookup(self.item.weight, items, self.sparse_grad)], dim=-1)
        for layer in self.tower:
            x = torch.relu(dense(x, layer))
        return x

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Logits, shape (B,) (or (K, B) stacked)."""
        return dense(self.features(users, items), self.out).squeeze(-1)


class NeuMF(nn.Module):
    """NeuMF: GMF and MLP parts side by side, one prediction layer over both.

    Parameters
    ----------
    n_users, n_items : int
    dim : int
        D of the GMF part.
    layers : tuple of int
        The MLP part's sizes (see :class:`MLP`).
    generator : torch.Generator or None
    """

    user_tables = ("gmf.user.weight", "mlp.user.weight")
    item_tables = ("gmf.item.weight", "mlp.item.weight")

    @property
    def sparse_grad(self) -> bool:
        return self.gmf.sparse_grad

    @sparse_grad.setter
    def sparse_grad(self, value: bool):
        self.gmf.sparse_grad = self.mlp.sparse_grad = value

    def __init__(self, n_users: int, n_items: int, dim: int = 12, layers: tuple[int, ...] = (48, 24, 12, 6),
                 generator: torch.Generator | None = None):
        super().__init__()
        self.gmf = GMF(n_users, n_items, dim, generator)
        self.mlp = MLP(n_users, n_items, layers, generator)
        del self.gmf.out, self.mlp.out                     # NeuMF has one prediction layer over both parts
        self.out = nn.Linear(dim + layers[-1], 1)
        _init_linear(self.out, generator)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Logits, shape (B,) (or (K, B) stacked)."""
        z = torch.cat([self.gmf.features(users, items), self.mlp.features(users, items)], dim=-1)
        return dense(z, self.out).squeeze(-1)


def neumf_from_pretrained(gmf: GMF, mlp: MLP, alpha: float = 0.5) -> NeuMF:
    """NeuMF initialised from a trained GMF and MLP (NCF §3.4.1; FedNCF §3.1).

    Embeddings and the MLP tower are copied; the prediction layer is
    h = [α h_GMF, (1−α) h_MLP] and its bias b = α b_GMF + (1−α) b_MLP.

    Raises
    ------
    ValueError
        If α is outside [0, 1] or the two models disagree on users or items.

    >>> import torch
    >>> g = GMF(2, 3, dim=2, generator=torch.Generator().manual_seed(0))
    >>> m = MLP(2, 3, layers=(4, 2), generator=torch.Generator().manual_seed(1))
    >>> n = neumf_from_pretrained(g, m, alpha=0.5)
    >>> torch.equal(n.out.weight[0, :2], 0.5 * g.out.weight[0]), torch.equal(n.out.weight[0, 2:], 0.5 * m.out.weight[0])
    (True, True)
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"The 'alpha' parameter of neumf_from_pretrained must be in [0, 1]. Got {alpha!r} instead.")
    if gmf.user.num_embeddings != mlp.user.num_embeddings or gmf.item.num_embeddings != mlp.item.num_embeddings:
        raise ValueError("GMF and MLP must have the same users and items to be fused into NeuMF.")
    layers = (2 * mlp.user.embedding_dim,) + tuple(layer.out_features for layer in mlp.tower)
    n = NeuMF(gmf.user.num_embeddings, gmf.item.num_embeddings, gmf.user.embedding_dim, layers)
    with torch.no_grad():
        n.gmf.user.weight.copy_(gmf.user.weight)
        n.gmf.item.weight.copy_(gmf.item.weight)
        n.mlp.user.weight.copy_(mlp.user.weight)
        n.mlp.item.weight.copy_(mlp.item.weight)
        for dst, src in zip(n.mlp.tower, mlp.tower):
            dst.weight.copy_(src.weight)
            dst.bias.copy_(src.bias)
        n.out.weight.copy_(torch.cat([alpha * gmf.out.weight, (1 - alpha) * mlp.out.weight], dim=1))
        n.out.bias.copy_(alpha * gmf.out.bias + (1 - alpha) * mlp.out.bias)
    return n


def build(kind: str, n_users: int, n_items: int, dim: int = 12, layers: tuple[int, ...] = (48, 24, 12, 6),
          generator: torch.Generator | None = None) -> nn.Module:
    """The model named ``kind`` ("gmf", "mlp" or "neumf").

    Raises
    ------
    ValueError
        Unknown ``kind`` (names the allowed values).
    """
    if kind == "gmf":
        return GMF(n_users, n_items, dim, generator)
    if kind == "mlp":
        return MLP(n_users, n_items, layers, generator)
    if kind == "neumf":
        return NeuMF(n_users, n_items, dim, layers, generator)
    raise ValueError(f"The model kind must be one of ['gmf', 'mlp', 'neumf']. Got {kind!r} instead.")
