"""The hookmagic version, on the ground floor so every part can name it without importing the
package's front door (``hookmagic/__init__``)."""
from __future__ import annotations

__version__ = "0.1.0"
