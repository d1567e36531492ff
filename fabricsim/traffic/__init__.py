"""Traffic: the message model and the built-in patterns."""
from .message import Message
from .patterns import PATTERNS, generate

__all__ = ["Message", "PATTERNS", "generate"]
