"""Every model of the zoo; importing this package registers them."""
from models import ggd, seq2seq, span_cky  # noqa: F401
