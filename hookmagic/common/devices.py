"""What names a GPU in a trace's ``meta["devices"]`` entries (shared by rank identities and
trace sets)."""
from __future__ import annotations

from typing import Any, Mapping


def gpu_identity(device: Mapping[str, Any]) -> str:
    """The GPU's UUID ("GPU-…", as nvidia-smi prints it) where the capture recorded one, else
    its PCI address ("PCI 0000:06:00"): either tells the GPUs of one host apart."""
    uuid = str(device.get("uuid") or "")
    if uuid:
        return uuid
    pci = device.get("pci") or ()
    if len(pci) == 3 and all(int(x) >= 0 for x in pci):
        return "PCI {:04x}:{:02x}:{:02x}".format(*(int(x) for x in pci))
    return ""
