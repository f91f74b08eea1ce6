"""Fit the rational function of cdynamo's float32 exact GELU (mathlib.c,
cdy_vgelu_exactf): h(a) = (A - a) P(a) / Q(a) ~ Phi(-a) = erfc(a / sqrt 2) / 2
on [0, A], P of degree m, Q monic of degree n, minimising max max(a, 1) |h - Phi(-a)|
(the GELU's absolute error |x| |h - Phi(-|x|)|, and h's own near 0) by Lawson's
iteratively reweighted linearised least squares.  Prints the C literals.

    python tools/fit_gelu.py [m n A]        # defaults: 6 6 5.8 (the shipped fit)

Needs numpy and mpmath (torch's sympy brings mpmath).
"""
import sys

import mpmath
import numpy as np


def fit(m, n, A, points=6000, iters=300):
    """Best (weighted error, P coefficients, Q coefficients) in a, lowest first."""
    a = (1 - np.cos(np.linspace(0, np.pi, points))) / 2 * A      # dense at both ends
    f = np.array([float(mpmath.erfc(x / mpmath.sqrt(2)) / 2) for x in a])
    wt = np.maximum(a, 1.0)
    s = a / A                                                    # conditioning
    vp, vq = np.vander(s, m + 1, increasing=True), np.vander(s, n + 1, increasing=True)
    q_prev, lawson, best = np.ones(points), np.ones(points) / points, None
    lhs = np.hstack([((A - a) / A)[:, None] * vp, -f[:, None] * vq[:, :n]])
    for _ in range(iters):
        w = wt / np.abs(q_prev) * np.sqrt(lawson)
        sol = np.linalg.lstsq(lhs * w[:, None], f * vq[:, n] * w, rcond=None)[0]
        pc, qc = sol[:m + 1], np.append(sol[m + 1:], 1.0)
        q_prev = vq @ qc
        err = wt * np.abs((A - a) / A * (vp @ pc) / q_prev - f)
        if best is None or err.max() < best[0]:
            best = (err.max(), pc.copy(), qc.copy())
        lawson = lawson * err / (lawson * err).sum()
    e, pc, qc = best
    lead = qc[n] / A ** n
    P = [pc[k] / A ** (k + 1) / lead for k in range(m + 1)]
    Q = [qc[k] / A ** k / lead for k in range(n + 1)]
    return e, P, Q


def main(argv):
    m, n, A = (int(argv[0]), int(argv[1]), float(argv[2])) if argv else (6, 6, 5.8)
    e, P, Q = fit(m, n, A)
    print("/* m=%d n=%d A=%g: max max(a, 1) |h - Phi(-a)| = %.3g */" % (m, n, A, e))
    print("P (a^%d .. a^0):" % m, ", ".join("%.9ef" % c for c in reversed(P)))
    print("Q (a^%d .. a^0):" % n, ", ".join("%.9ef" % c for c in reversed(Q)))


if __name__ == "__main__":
    main(sys.argv[1:])
