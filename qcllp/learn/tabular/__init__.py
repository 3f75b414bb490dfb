"""The nonlinear learners of tabular LLP.

* :mod:`.llpfc` -- Zhang, Wang & Scott 2022: bag pairs as a label-noise problem, forward-corrected;
* :mod:`.mean_maps` -- Patrini et al. 2014: Laplacian and alternating mean map;
* :mod:`.proportion_boosting` -- DLLP's bag loss on gradient-boosted trees;
* :mod:`.em_llp` -- EM with a boosted or logistic base;
* :mod:`.binning` -- quantile bins for the tree learners.
"""
