"""The proportion-SVM family.

* Yu et al. 2013, proportion-SVM: :mod:`.alter_psvm` (Alg. 1) on the shared alternating engine
  :mod:`.alternating` with its steps :mod:`.svm_step` and :mod:`.label_step`; :mod:`.conv_psvm`
  (Alg. 2) on the WellSVM solver;
* Wang et al., twin proportion-SVM: :mod:`.twin_psvm` (Alg. 1) on the same alternating engine;
* Li et al. 2013, WellSVM: :mod:`.wellsvm` (estimator), :mod:`.wellsvm_labels` (label spaces),
  :mod:`.wellsvm_solver` (cutting plane and label-kernel learning).
"""
