"""Parameter checks of the learners: one constraints table per estimator, checked once in ``fit``.

Every learner declares what its ``__init__`` parameters accept in a class attribute
``_parameter_constraints``, in the style of scikit-learn: parameter name -> list of allowed
kinds, any one of which suffices::

    _parameter_constraints = {
        "C": [POSITIVE],
        "init": [None, StrOptions({"invcal", "conv"})],
        "random_state": ["random_state"],
    }

and ``fit`` starts with :func:`check_params`, before it looks at the data. A bad value raises a
``ValueError`` naming the learner, the parameter, what it accepts and the value, e.g.
``AlterPSVM: C must be a finite number > 0, got -1.0``. Checks that depend on the data (more
clusters than rows) stay in ``fit`` after the input is validated.

Why our own helper and not scikit-learn's: the installed scikit-learn (1.9.1; the project
requires >= 1.4) has the same mechanism, ``BaseEstimator._validate_params`` with ``Interval``
and ``StrOptions`` from ``sklearn.utils._param_validation``, but both are private API (leading
underscores, changed between releases without deprecation; imbalanced-learn vendors a copy for
that reason), and on scikit-learn >= 1.9 ``_fit_context`` also enters its callback machinery.
The learners need a handful of constraint kinds, which fit in this module; the names and
signatures follow scikit-learn's (``Interval(Real, 0, None, closed="neither")``,
``StrOptions({...})``, ``None``, ``"random_state"``, ``"boolean"``, ``"callable"``,
``HasMethods(...)``) so a table reads like a scikit-learn one. They are not scikit-learn's
objects: call :func:`check_params`, not ``BaseEstimator._validate_params``.

Shared constraints (:data:`POSITIVE`, :data:`NON_NEGATIVE`, :data:`UNIT_INTERVAL`,
:data:`COUNT`, :data:`INTEGER`) keep the same parameter checked the same way in every learner.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from qcllp.learn.core.problem import plain_value

__all__ = [
    "COUNT",
    "INTEGER",
    "NON_NEGATIVE",
    "POSITIVE",
    "UNIT_INTERVAL",
    "HasMethods",
    "Interval",
    "StrOptions",
    "check_params",
]


@dataclass(frozen=True)
class Interval:
    """Numbers of ``kind`` (``numbers.Real`` or ``numbers.Integral``) between ``left`` and
    ``right`` (``None``: unbounded), ``closed`` on ``"left"``, ``"right"``, ``"both"`` or
    ``"neither"`` side. Booleans, NaN and infinities are never accepted."""

    kind: type
    left: float | None
    right: float | None
    closed: str

    def accepts(self, value) -> bool:
        if isinstance(value, bool | np.bool_) or not isinstance(value, self.kind):
            return False
        if not math.isfinite(value):
            return False
        if self.left is not None and not (
            value >= self.left if self.closed in ("left", "both") else value > self.left
        ):
            return False
        return self.right is None or (
            value <= self.right if self.closed in ("right", "both") else value < self.right
        )

    def __str__(self) -> str:
        bounded = self.left is not None and self.right is not None
        noun = (
            "an integer" if self.kind is Integral else "a number" if bounded else "a finite number"
        )
        if self.left is None and self.right is None:
            return noun
        if self.right is None:
            return f"{noun} {'>=' if self.closed in ('left', 'both') else '>'} {self.left}"
        if self.left is None:
            return f"{noun} {'<=' if self.closed in ('right', 'both') else '<'} {self.right}"
        opening = "[" if self.closed in ("left", "both") else "("
        closing = "]" if self.closed in ("right", "both") else ")"
        return f"{noun} in {opening}{self.left}, {self.right}{closing}"


@dataclass(frozen=True)
class StrOptions:
    """One of a fixed set of strings."""

    options: frozenset

    def __init__(self, options: Iterable[str]):
        object.__setattr__(self, "options", frozenset(options))

    def accepts(self, value) -> bool:
        return isinstance(value, str) and value in self.options

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(o) for o in sorted(self.options))


@dataclass(frozen=True)
class HasMethods:
    """An object with all of these methods (e.g. a scikit-learn classifier)."""

    methods: tuple[str, ...]

    def __init__(self, *methods: str):
        object.__setattr__(self, "methods", methods)

    def accepts(self, value) -> bool:
        return all(callable(getattr(value, m, None)) for m in self.methods)

    def __str__(self) -> str:
        return "an object with methods " + ", ".join(self.methods)


@dataclass(frozen=True)
class _Named:
    """The constraints scikit-learn spells as ``None`` or a string."""

    description: str
    test: object

    def accepts(self, value) -> bool:
        return bool(self.test(value))

    def __str__(self) -> str:
        return self.description


_NAMED = {
    None: _Named("None", lambda v: v is None),
    "boolean": _Named("True or False", lambda v: isinstance(v, bool | np.bool_)),
    "callable": _Named("a callable", callable),
    "random_state": _Named(
        "None, an integer or a numpy RandomState",
        lambda v: (
            v is None
            or isinstance(v, np.random.RandomState)
            or (isinstance(v, Integral) and not isinstance(v, bool | np.bool_))
        ),
    ),
}

POSITIVE = Interval(Real, 0, None, closed="neither")
"""A weight or step that must be strictly positive (C, C_p, reg, gamma, annealing_delta)."""
NON_NEGATIVE = Interval(Real, 0, None, closed="left")
"""A tolerance or width where 0 means "exact" (tol, InvCal's epsilon, mutvar)."""
UNIT_INTERVAL = Interval(Real, 0, 1, closed="both")
"""A share or probability."""
COUNT = Interval(Integral, 1, None, closed="left")
"""A number of things or iterations, at least one."""
INTEGER = Interval(Integral, None, None, closed="neither")
"""Any integer (joblib's ``n_jobs``: -1 means all cores)."""


def _constraint(spec):
    return _NAMED[spec] if spec is None or isinstance(spec, str) else spec


def check_params(estimator) -> None:
    """Check ``estimator``'s parameters against its class's ``_parameter_constraints``.

    Raises ``ValueError`` at the first parameter that none of its constraints accepts, naming
    the estimator, the parameter, what it accepts and the value it got.
    """
    params = estimator.get_params(deep=False)
    for name, specs in type(estimator)._parameter_constraints.items():
        value = params[name]
        allowed = [_constraint(spec) for spec in specs]
        if not any(c.accepts(value) for c in allowed):
            accepted = " or ".join(str(c) for c in allowed)
            raise ValueError(
                f"{type(estimator).__name__}: {name} must be {accepted}, got {plain_value(value)!r}"
            )
