"""Networks: layers and the ``Network`` they make (``layers.py``: a new layer is one class
there, with its shapes and forward pass), and the Gluon blocks for a model of the user's own
(``blocks.py``)."""
