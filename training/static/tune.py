"""tune=corpus: fit the token table so each training text's static mean reproduces the teacher's pooled output.

tokenlearn fits the table with Adam on a loss over (text, teacher vector) pairs. The static mean is linear in
the table (A·T, with A the texts × vocabulary weight matrix the encoder itself builds), so on one corpus the
least-squares fit has a closed form; we solve it as a ridge toward the distilled table T₀,

    min_T ‖A·T − E‖² + λ‖T − T₀‖²   ⇔   (AᵀA + λI)·T = AᵀE + λT₀,

with Jacobi-preconditioned conjugate gradients, every table column at once (no epochs, learning rate or
seed to choose, deterministic, a few hundred sparse products on 2 CPUs). λ keeps rare tokens near their
distilled vectors and leaves tokens absent from the corpus exactly there, so test-time synonyms keep the
teacher's geometry. The targets E are the teacher's outputs through the same PCA as the table.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def ridge_fit(
    A: sp.csr_matrix, E: np.ndarray, T0: np.ndarray, ridge: float, max_iter: int, tol: float = 1e-4
) -> tuple[np.ndarray, dict]:
    """The table minimising ‖A·T − E‖² + λ‖T − T₀‖², λ = `ridge` × the mean data weight (AᵀA's diagonal) of
    the tokens the corpus uses; returns it (float32) and facts for the run log."""
    A = A.tocsc()
    seen = np.flatnonzero(np.diff(A.indptr))
    A = A[:, seen].tocsr().astype(np.float64)
    At = A.T.tocsr()
    diag = np.asarray(A.multiply(A).sum(axis=0)).ravel()
    lam = ridge * float(diag.mean()) if len(diag) else 0.0
    B = At @ E.astype(np.float64) + lam * T0[seen].astype(np.float64)
    precond = 1.0 / (diag + lam)[:, None]

    def apply(T: np.ndarray) -> np.ndarray:
        return At @ (A @ T) + lam * T

    X = T0[seen].astype(np.float64)
    R = B - apply(X)
    Z = R * precond
    P = Z.copy()
    rz = np.einsum("ij,ij->j", R, Z)
    start = np.linalg.norm(R)
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 (reported below)
        Q = apply(P)
        step = rz / np.maximum(np.einsum("ij,ij->j", P, Q), 1e-300)
        X += P * step
        R -= Q * step
        if np.linalg.norm(R) <= tol * start:
            break
        Z = R * precond
        rz_new = np.einsum("ij,ij->j", R, Z)
        P = Z + P * (rz_new / np.maximum(rz, 1e-300))
        rz = rz_new
    table = T0.astype(np.float32).copy()
    table[seen] = X.astype(np.float32)
    facts = {
        "tokens_fitted": int(len(seen)),
        "lambda": lam,
        "iterations": it,
        "residual": float(np.linalg.norm(R) / max(start, 1e-300)),
    }
    return table, facts
