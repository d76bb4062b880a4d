"""ctx_magic: an agent for IPython and Jupyter that keeps its conversation inside the model's window."""

__version__ = "0.1.0"
