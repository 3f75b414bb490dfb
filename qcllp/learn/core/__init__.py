"""The contract every learner shares: input validation, estimator bases, parameter checks.

* :mod:`.problem` -- ``check_llp_input`` and :class:`LLPProblem` (bags, counts, shares);
* :mod:`.base` -- :class:`LLPClassifierMixin`; :mod:`.margin` -- one-vs-rest for margin models;
* :mod:`.params` -- parameter constraints, declared once per estimator;
* :mod:`.kernels` -- feature maps (exact RBF, linear decisions); :mod:`.threads` -- BLAS threads.
"""
