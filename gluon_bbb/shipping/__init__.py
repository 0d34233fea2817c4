"""Shipping a trained run: the compressed file's format and its NumPy-only reader and predictor
(``model_file.py``), and the writer that prunes, narrows and quantizes a run into it
(``writer.py``)."""
