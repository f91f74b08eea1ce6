"""Fit the rational function of cdynamo's float32 exact GELU (mathlib.c,
cdy_vgelu_exactf): h(a) = (A - a) P(a) / Q(a) ~ Phi(-a) = erfc(a / sqrt 2) / 2
on [0, A], P of degree m, Q monic of degree n, minimising max max(a, 1) |h - Phi(-a)|
(the GELU's absolute error |x| |h - Phi(-|x|)|, and h's own near 0) by Lawson's
iteratively reweighted linearised least squares.  Prints the C literals: the
polynomials as fitted, and in the form mathlib.c evaluates them, Knuth's
adaptation of a degree-6 polynomial's coefficients (TAOCP vol. 2, 4.6.4):
z = (a + a0) a + a1, w = (a + a2) z + a3, u = ((w + z) + a4) w + a5, three
multiply-adds and four additions where Horner's rule takes six multiply-adds
(a Zen 4 core does one 512-bit multiply-add per cycle but has its adders too;
mathlib.c uses it on AMD's Zen cores, Horner's rule elsewhere); P's leading
coefficient L goes into Q's last two steps.

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


def knuth6(c, seed=0):
    """a0..a5 of Knuth's adapted form of the monic degree-6 polynomial whose other
    coefficients are c (a^0 .. a^5), found by Newton's method from seeded starts."""
    mpmath.mp.dps = 40
    rng = np.random.default_rng(seed)

    def eqs(a0, a1, a2, a3, a4, a5):
        w2, w1, w0 = a0 + a2, a1 + a0 * a2, a1 * a2 + a3            # w = a^3 + w2 a^2 + ...
        s2, s1, s0 = w2 + 1, w1 + a0, w0 + a1 + a4                   # w + z + a4
        got = [w0 * s0 + a5, w1 * s0 + w0 * s1, w2 * s0 + w1 * s1 + w0 * s2,
               w0 + w2 * s1 + w1 * s2 + s0, w1 + w2 * s2 + s1, w2 + s2]
        return [g - t for g, t in zip(got, c)]
    for _ in range(2000):
        try:
            r = mpmath.findroot(eqs, list(rng.uniform(-30, 30, 6)), tol=1e-30, maxsteps=100)
        except (ValueError, ZeroDivisionError):
            continue
        if all(abs(mpmath.im(v)) < 1e-20 for v in r):
            return [float(mpmath.re(v)) for v in r]
    raise SystemExit("no real adapted form found")


def main(argv):
    m, n, A = (int(argv[0]), int(argv[1]), float(argv[2])) if argv else (6, 6, 5.8)
    e, P, Q = fit(m, n, A)
    print("/* m=%d n=%d A=%g: max max(a, 1) |h - Phi(-a)| = %.3g */" % (m, n, A, e))
    print("P (a^%d .. a^0):" % m, ", ".join("%.9ef" % c for c in reversed(P)))
    print("Q (a^%d .. a^0):" % n, ", ".join("%.9ef" % c for c in reversed(Q)))
    if m == n == 6:
        L = P[6]
        a = knuth6([c / L for c in P[:6]])
        b = knuth6(Q[:6])
        f = lambda v: "%.9ef" % v
        print("    float zp = CDY_FMAF(a + %s, a, %s);" % (f(a[0]), f(a[1])))
        print("    float wp = CDY_FMAF(a + %s, zp, %s);" % (f(a[2]), f(a[3])))
        print("    float p = CDY_FMAF((wp + zp) + %s, wp, %s);" % (f(a[4]), f(a[5])))
        print("    float zq = CDY_FMAF(a + %s, a, %s);" % (f(b[0]), f(b[1])))
        print("    float wq = CDY_FMAF(a + %s, zq, %s);" % (f(b[2]), f(b[3])))
        print("    float q = CDY_FMAF(CDY_FMAF(wq + zq, %s, %s), wq, %s);"
              % (f(1 / L), f(b[4] / L), f(b[5] / L)))


if __name__ == "__main__":
    main(sys.argv[1:])
