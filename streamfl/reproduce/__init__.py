"""Reproductions of the papers' experiments on data available offline (``streamfl reproduce …``)."""
