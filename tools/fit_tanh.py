#!/usr/bin/env python3
"""Fits the rational tanh of the CPU kernel's f32 activations (Note [Activations] in
core/src/cpu/float.rs) and prints its coefficients as f32.

    python3 tools/fit_tanh.py          # needs numpy only

tanh(x) ~ (x + x^3 P(x^2)) / (1 + x^2 Q(x^2)) on [0, 9], P and Q of degree 3, minimising
the maximum relative error: Loeb's linearisation (x P - tanh(x) Q = tanh(x) - x, weighted
by the previous denominator) solved by least squares, with Lawson's reweighting towards
the points of largest error. The variable is scaled to x/9 for the solve so that the
columns are of one size. The printed coefficients are those of `TANH_P` and `TANH_Q`;
the f32 rounding and evaluation errors are checked by the tests in float.rs.
"""

import numpy as np

# Coefficients of P and Q (each of degree 3 in x^2: four coefficients), the interval's end,
# the Chebyshev nodes of the fit, and Lawson's rounds.
TERMS_P, TERMS_Q, LIMIT, NODES, ROUNDS = 4, 4, 9.0, 60000, 200


def fit():
    t = np.cos(np.pi * (np.arange(NODES) + 0.5) / NODES)
    x = (t + 1) / 2 * LIMIT
    x = x[x > 1e-3]
    u2 = (x / LIMIT) ** 2
    f = np.tanh(x)
    q_prev = np.ones_like(x)
    w = np.ones_like(x) / len(x)
    best = None
    for _ in range(ROUNDS):
        a = np.hstack(
            [
                np.stack([x * u2**k for k in range(1, TERMS_P + 1)], 1),
                np.stack([-f * u2**k for k in range(1, TERMS_Q + 1)], 1),
            ]
        )
        s = np.sqrt(w) / (f * q_prev)
        sol, *_ = np.linalg.lstsq(a * s[:, None], (f - x) * s, rcond=None)
        p = np.concatenate([[1.0], sol[:TERMS_P]])
        q = np.concatenate([[1.0], sol[TERMS_P:]])
        big_p, big_q = np.polyval(p[::-1], u2), np.polyval(q[::-1], u2)
        e = x * big_p / big_q / f - 1
        if best is None or np.abs(e).max() < best[0]:
            best = (np.abs(e).max(), p, q)
        q_prev = big_q
        w = np.maximum(w * np.abs(e) / (w * np.abs(e)).sum(), 1e-300)
    err, p, q = best
    scale = LIMIT ** (-2.0 * np.arange(max(TERMS_P, TERMS_Q) + 1))
    return err, p * scale[: TERMS_P + 1], q * scale[: TERMS_Q + 1]


def main():
    err, p, q = fit()
    print(f"max relative error in exact arithmetic: {err:.3g}")
    print("TANH_P (x^3, x^5, x^7, x^9):", ", ".join(repr(float(np.float32(v))) for v in p[1:]))
    print("TANH_Q (x^2, x^4, x^6, x^8):", ", ".join(repr(float(np.float32(v))) for v in q[1:]))


if __name__ == "__main__":
    main()
