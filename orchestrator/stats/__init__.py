"""The package's statistics, in one place: ranks and correlations (`ranks.py`), agreement
beyond chance: Cohen's and Fleiss' κ, Krippendorff's α (`agreement.py`), the
bootstrap with percentile, BCa and whole-cluster resamples (`bootstrap.py`), the sign-flip
test and the interval that inverts it, plain and clustered (`signflip.py`), one-number
intervals and tests: Wilson, the exact binomial tail, Holm, Welch (`intervals.py`), the
t-test's power with the intra-cluster correlation (`power.py`), Spearman's test over whole
clusters (`clustered.py`), the logistic fit of stacked ensembles (`logistic.py`) and
Learn then Test's fixed-sequence step (`ltt.py`). Compute
functions, compare, the judge card, align, calibrate, power and meta-eval all call these;
prediction-powered means from a judge and a few labels (PPI++, `ppi.py`) are what
`estimate` reports; import them from
here, not from the modules.

The bottom layer but for `errors`: numpy and scipy only (scipy imported where used). The
compute modules import this package inside the functions that need it, so compiling a
graph, which loads every compute module, loads no numpy.
"""

from .agreement import (
    cohen_kappa_codes,
    fleiss_kappa,
    krippendorff_alpha_counts,
    weighted_alpha,
)
from .bootstrap import (
    RESAMPLES,
    bca_interval,
    bootstrap,
    bootstrap_p,
    cluster_draws,
    cluster_index,
    draw_counts,
    draws,
    generator,
    mean_interval,
    percentile_interval,
    percentile_intervals,
    resample,
    resampled,
)
from .clustered import cluster_rank_p
from .intervals import (
    Interval,
    binomial_tail,
    cohens_dz,
    finite,
    holm,
    welch_p,
    wilson,
)
from .logistic import fit_logistic
from .ltt import fixed_sequence, least_answered
from .power import normal_n, one_way_icc, sd_interval, sign_flip_power, t_power
from .ppi import (
    SMALL_SAMPLE,
    UNIFORM_SHARE,
    PPIMean,
    active_probabilities,
    bootstrap_t_interval,
    cluster_interval,
    inclusion_probabilities,
    labels_for_width,
    ppi_mean,
    ppi_terms,
    systematic_sample,
    tuned_lambda,
)
from .ranks import (
    Method,
    correlation_p,
    correlation_test,
    kendall_tau_b,
    pearson,
    ranks,
    spearman,
    spearman_interval,
)
from .signflip import (
    DRAWS,
    EXACT_UP_TO,
    PERMUTATIONS,
    ClusterSignFlip,
    SignFlip,
    SignFlipInterval,
    cluster_sign_flip,
    cluster_sums,
    sign_flip_interval,
    sign_flip_p,
    sign_flip_test,
)

__all__ = [
    "DRAWS",
    "EXACT_UP_TO",
    "PERMUTATIONS",
    "RESAMPLES",
    "SMALL_SAMPLE",
    "UNIFORM_SHARE",
    "ClusterSignFlip",
    "Interval",
    "Method",
    "PPIMean",
    "SignFlip",
    "SignFlipInterval",
    "active_probabilities",
    "bca_interval",
    "binomial_tail",
    "bootstrap",
    "bootstrap_p",
    "bootstrap_t_interval",
    "cluster_draws",
    "cluster_index",
    "cluster_interval",
    "cluster_rank_p",
    "cluster_sign_flip",
    "cluster_sums",
    "cohen_kappa_codes",
    "cohens_dz",
    "correlation_p",
    "correlation_test",
    "draw_counts",
    "draws",
    "finite",
    "fit_logistic",
    "fixed_sequence",
    "fleiss_kappa",
    "generator",
    "holm",
    "inclusion_probabilities",
    "kendall_tau_b",
    "krippendorff_alpha_counts",
    "labels_for_width",
    "least_answered",
    "mean_interval",
    "normal_n",
    "one_way_icc",
    "pearson",
    "percentile_interval",
    "percentile_intervals",
    "ppi_mean",
    "ppi_terms",
    "ranks",
    "resample",
    "resampled",
    "sd_interval",
    "sign_flip_interval",
    "sign_flip_p",
    "sign_flip_power",
    "sign_flip_test",
    "spearman",
    "spearman_interval",
    "systematic_sample",
    "t_power",
    "tuned_lambda",
    "weighted_alpha",
    "welch_p",
    "wilson",
]
