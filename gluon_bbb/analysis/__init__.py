"""What a trained run is measured by: the Monte Carlo predictive and its uncertainty report
(``analysis/uncertainty.py``, ``report.py``), the metrics (``metrics.py``), robustness to rotated and
translated images (``robustness.py``) and pruning by the signal-to-noise ratio (``snr.py``)."""
