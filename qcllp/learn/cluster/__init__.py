"""Stolpe & Morik 2011: learning from label proportions by clustering.

:mod:`.kmeans_labeler` (the estimator, Alg. 1) with :mod:`.cluster_labeling` (the evolutionary
search for the cluster labels).
"""
