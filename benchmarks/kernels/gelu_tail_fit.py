"""Derivation of the gelu kernels' normal-tail coefficients (CPU; needs numpy and scipy).

Both providers compute gelu(a) = a * Phi(a) from the smaller tail of the standard normal:

    tail(u) = Phi(-u) = exp(-u^2 / 2) * t * P(t),   t = 1 / (1 + p * u),   u = |a|,
    Phi(a) = 1 - tail(u) for a >= 0, tail(u) for a < 0.

tail(u) * exp(u^2 / 2) falls smoothly from 1/2 to 0 like 1 / (u * sqrt(2 pi)), so a short
polynomial in t fits it, and a negative a never subtracts two numbers near 1 (the erf form,
0.5 * (1 + erf(a / sqrt 2)), loses every digit of Phi for a below -5 in float32). The fit
minimises the largest relative error of t * P(t) over u in [0, U] by linear programming on a
dense grid, for each p of a grid, and keeps the best p. The kernels' accuracy in float32 is
then measured over [-12, 12] against float64.

Usage: python benchmarks/kernels/gelu_tail_fit.py [--degree 7] [--upper 6]
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.optimize import linprog
from scipy.special import erfc, erfcx


def fit(p: float, degree: int, upper: float, points: int = 2000) -> tuple[np.ndarray, float]:
    """Coefficients c_1..c_degree of P (t * P(t) = sum c_k t^k) for this p, and their largest
    relative error over u in [0, upper]."""
    u = np.concatenate([np.linspace(0, 1, points // 2), np.linspace(1, upper, points // 2)])
    t = 1 / (1 + p * u)
    scaled_tail = 0.5 * erfcx(u / np.sqrt(2))  # tail(u) * exp(u^2 / 2)
    powers = np.stack([t**k for k in range(1, degree + 1)], axis=1) / scaled_tail[:, None]
    # minimise e subject to |powers @ c - 1| <= e
    ones = np.ones((len(u), 1))
    bound = np.block([[powers, -ones], [-powers, -ones]])
    limit = np.concatenate([np.ones(len(u)), -np.ones(len(u))])
    objective = np.zeros(degree + 1)
    objective[-1] = 1
    free = [(None, None)] * degree + [(0, None)]
    result = linprog(objective, A_ub=bound, b_ub=limit, bounds=free, method="highs")
    return result.x[:degree], float(result.x[-1])


def gelu_float32(a: np.ndarray, p: float, coefficients: np.ndarray) -> np.ndarray:
    """gelu as the kernels evaluate it, every step rounded to float32."""
    f = np.float32
    t = (f(1) / (f(1) + f(p) * np.abs(a))).astype(f)
    poly = np.full_like(t, f(coefficients[-1]))
    for c in coefficients[-2::-1]:
        poly = (poly * t + f(c)).astype(f)
    tail = (t * poly * np.exp2(a * a * f(-0.5 / np.log(2)))).astype(f)
    result: np.ndarray = (a * np.where(a >= 0, f(1) - tail, tail)).astype(f)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--degree", type=int, default=7)
    parser.add_argument("--upper", type=float, default=6.0, help="U: the fit covers u in [0, U]")
    args = parser.parse_args()
    # p by a coarse grid, then a fine one around the best
    coarse = min((fit(p, args.degree, args.upper, 1000)[1], p) for p in np.linspace(0.15, 0.8, 66))
    fine = np.linspace(coarse[1] - 0.01, coarse[1] + 0.01, 21)
    p = round(float(min((fit(p, args.degree, args.upper)[1], p) for p in fine)[1]), 4)
    coefficients, error = fit(p, args.degree, args.upper)
    print(f"p = {p}; largest relative error of the fit on [0, {args.upper}]: {error:.3g}")
    print("coefficients c_1..c_n of t * P(t):")
    for c in coefficients:
        print(f"    {float(c)!r}")
    # rounded to float32, as the kernels hold them
    coefficients = coefficients.astype(np.float32).astype(np.float64)
    a = np.linspace(-12, 12, 2_000_001).astype(np.float32)
    exact = a.astype(np.float64) * 0.5 * erfc(-a.astype(np.float64) / np.sqrt(2))
    ours = gelu_float32(a, p, coefficients)
    relative = np.abs(ours - exact) / np.maximum(np.abs(exact), 1e-300)
    print("float32 evaluation against float64, largest relative error by range of a:")
    for lo, hi in ((-12, -8), (-8, -4), (-4, -1), (-1, 1), (1, 4), (4, 12)):
        inside = (a >= lo) & (a < hi)
        print(f"    [{lo}, {hi}): {relative[inside].max():.2e}")


if __name__ == "__main__":
    main()
