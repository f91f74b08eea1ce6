"""Fit the literals of cdynamo's float32 exact GELU and its derivative (mathlib.c,
cdy_vgelu_tailf / cdy_vgelu_gradf): h = Phi(-a) = erfc(a / sqrt 2) / 2 is computed as
e^(-a^2/2) R(a), R(a) = Phi(-a) e^(a^2/2) (Mills' ratio times phi's constant:
0.5 at 0, ~ 1 / (a sqrt(2 pi)) for large a, smooth) a rational function
P(a) / Q(a), Q monic, fitted for RELATIVE error (Lawson's iteratively reweighted
linearised least squares), so h is relatively accurate where Phi(-a) is tiny
(GELU's negative tail).  P's constant is set to Q's / 2 so that R(0) is 0.5
exactly in float32.  Also the minimax polynomial of e^r on [-ln2/2, ln2/2]
(relative) that e^(-a^2/2)'s reduction uses.

    python tools/fit_gelu.py            # the shipped fits: R (3,4) on [0, 5.5426]
                                        # (GELU) and (4,5) on [0, 14.5] (derivative)
    python tools/fit_gelu.py m n A      # R of degrees m, n on [0, A]

Needs numpy and mpmath (torch's sympy brings mpmath).
"""
import sys

import mpmath
import numpy as np

mpmath.mp.dps = 30


def mills(a):
    """R(a) = Phi(-a) e^(a^2/2) at the points a, in float64 from mpmath."""
    return np.array([float(mpmath.erfc(mpmath.mpf(v) / mpmath.sqrt(2)) / 2 *
                           mpmath.exp(mpmath.mpf(v) ** 2 / 2)) for v in a])


def fit_rational(m, n, A, points=3000, iters=300):
    """(max relative error, P lowest first, Q lowest first, Q monic) of R on [0, A]."""
    a = (1 - np.cos(np.linspace(0, np.pi, points))) / 2 * A
    f, s = mills(a), a / A
    vp, vq = np.vander(s, m + 1, increasing=True), np.vander(s, n + 1, increasing=True)
    q_prev, lawson, best = np.ones(points), np.ones(points) / points, None
    lhs = np.hstack([vp, -f[:, None] * vq[:, 1:]])
    for _ in range(iters):
        w = np.sqrt(lawson) / np.abs(q_prev) / f
        sol = np.linalg.lstsq(lhs * w[:, None], f * w, rcond=None)[0]
        pc, qc = sol[:m + 1], np.concatenate([[1.0], sol[m + 1:]])
        q_prev = vq @ qc
        err = np.abs((vp @ pc) / q_prev - f) / f
        if best is None or err.max() < best[0]:
            best = (err.max(), pc.copy(), qc.copy())
        lawson = lawson * err / (lawson * err).sum()
    e, pc, qc = best
    lead = qc[n] / A ** n
    P = [pc[k] / A ** k / lead for k in range(m + 1)]
    Q = [qc[k] / A ** k / lead for k in range(n + 1)]
    P[0] = float(np.float32(Q[0])) / 2                  # R(0) = 0.5 exactly
    return e, P, Q


def fit_exp(deg, points=3000, iters=400):
    """(max relative error, coefficients highest first) of e^r on [-ln2/2, ln2/2],
    its constant term 1 (e^0 = 1 exactly: the derivative's 0.5 at 0)."""
    h = float(mpmath.log(2) / 2)
    r = np.linspace(-h, h, points)
    f, V = np.exp(r), np.vander(r, deg + 1, increasing=True)[:, 1:]
    lawson, best = np.ones(points) / points, None
    for _ in range(iters):
        w = np.sqrt(lawson) / f
        c = np.linalg.lstsq(V * w[:, None], (f - 1) * w, rcond=None)[0]
        err = np.abs(V @ c + 1 - f) / f
        if best is None or err.max() < best[0]:
            best = (err.max(), c)
        lawson = lawson * err / (lawson * err).sum()
    return best[0], list(reversed(best[1])) + [1.0]


def show(m, n, A):
    e, P, Q = fit_rational(m, n, A)
    print("/* R (%d,%d) on [0, %g]: max relative error %.3g */" % (m, n, A, e))
    print("P (a^%d .. a^0):" % m, ", ".join("%.9ef" % c for c in reversed(P)))
    print("Q (a^%d monic .. a^0):" % n, ", ".join("%.9ef" % c for c in reversed(Q[:n])))


def main(argv):
    if argv:
        show(int(argv[0]), int(argv[1]), float(argv[2]))
        return
    show(3, 4, 5.5426)
    show(4, 5, 14.5)
    e, c = fit_exp(5)
    print("/* e^r, degree 5, max relative error %.3g */" % e)
    print(", ".join("%.9ef" % v for v in c))


if __name__ == "__main__":
    main(sys.argv[1:])
