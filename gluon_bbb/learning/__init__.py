"""Training a run: its config (``config.py``), the learning-rate schedules (``schedules.py``),
the loss that trains and one training step (``step.py``) on MXNet operators or the C
accelerator (``gluon_bbb.native.library``), the epoch loop (``loop.py``), the run directory and its
parameter files (``rundir.py``), the noise (``noise.py``), the device
(``context.py``) and sweeps of many runs (``learning/trials.py``)."""
