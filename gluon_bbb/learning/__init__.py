"""Training a run: its config (``config.py``), the learning-rate schedules (``schedules.py``),
one training step (``step.py``) on the ndarray backend (``ndarray_backend.py``) or the C
accelerator (``gluon_bbb.native.library``), the epoch loop (``loop.py``), the run directory and its
parameter files (``rundir.py``, ``checkpoint.py``), the noise (``noise.py``), the device
(``context.py``) and sweeps of many runs (``learning/trials.py``)."""
