"""Every model of the zoo; importing this package registers them."""
from models import seq2seq  # noqa: F401
