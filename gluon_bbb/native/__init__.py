"""The C accelerator of the training step's formulas: ``table.py`` declares what the kernels
serve (imports nothing), ``library.py`` loads ``_fused.c``'s library and calls it (MXNet)."""
