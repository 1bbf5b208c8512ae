"""numpy_fixture.py -- the NumPy side of the .npy interchange test.

    python3 tests/data/numpy_fixture.py make          writes tests/data/numpy_problem/ and numpy_expected/
    python3 tests/data/numpy_fixture.py verify DIR    checks DIR/o.npy and DIR/ht.npy against numpy_expected/

`make` draws a small problem with NumPy's own generator (not the project's), saves it as
NumPy saves arrays (np.save, float32, C order), and computes o and ht with an independent
float64 transcription of docs/contract.md section 1 in NumPy. The files are committed, so the
Check suite can test the binaries against NumPy-written input without NumPy installed.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PROBLEM = os.path.join(HERE, "numpy_problem")
EXPECTED = os.path.join(HERE, "numpy_expected")


def reference(q, k, v, g, beta, h0, scale):
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = np.zeros((B, T, H, V))
    ht = np.zeros((B, H, K, V))
    for b in range(B):
        for h in range(H):
            S = h0[b, h].astype(np.float64).copy()
            for t in range(T):
                S = np.exp(float(g[b, t, h])) * S
                u = float(beta[b, t, h]) * (v[b, t, h].astype(np.float64) - S.T @ k[b, t, h].astype(np.float64))
                S = S + np.outer(k[b, t, h].astype(np.float64), u)
                o[b, t, h] = scale * (S.T @ q[b, t, h].astype(np.float64))
            ht[b, h] = S
    return o, ht


def make():
    rng = np.random.default_rng(2026)
    B, T, H, K, V = 2, 37, 3, 8, 6
    q = rng.standard_normal((B, T, H, K)).astype(np.float32)
    k = rng.standard_normal((B, T, H, K))
    k = (k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(np.float32)
    v = rng.standard_normal((B, T, H, V)).astype(np.float32)
    g = np.log(1 / (1 + np.exp(-rng.standard_normal((B, T, H))))).astype(np.float32)
    beta = (1 / (1 + np.exp(-rng.standard_normal((B, T, H))))).astype(np.float32)
    h0 = rng.standard_normal((B, H, K, V)).astype(np.float32)
    os.makedirs(PROBLEM, exist_ok=True)
    os.makedirs(EXPECTED, exist_ok=True)
    for name, array in dict(q=q, k=k, v=v, g=g, beta=beta, h0=h0).items():
        np.save(os.path.join(PROBLEM, name + ".npy"), array)
    o, ht = reference(q, k, v, g, beta, h0, 1 / np.sqrt(K))
    np.save(os.path.join(EXPECTED, "o.npy"), o)
    np.save(os.path.join(EXPECTED, "ht.npy"), ht)


def verify(folder):
    worst = 0.0
    for name in ("o", "ht"):
        got = np.load(os.path.join(folder, name + ".npy"))
        want = np.load(os.path.join(EXPECTED, name + ".npy"))
        assert got.shape == want.shape, (name, got.shape, want.shape)
        error = np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want)
        print(f"{name}: NumPy read {got.dtype} {got.shape}; relative error vs float64 NumPy: {error:.3e}")
        worst = max(worst, error)
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "make":
        make()
    elif len(sys.argv) == 3 and sys.argv[1] == "verify":
        sys.exit(verify(sys.argv[2]))
    else:
        sys.exit(__doc__)
